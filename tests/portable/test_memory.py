"""Buffers, memcpy and memset on every backend."""

import numpy as np
import pytest

import portable as pk
from portable import spi

# the rocm stand-in runs this file too: smoke set: copies and memsets through the HIP personality
pytestmark = pytest.mark.hip_differs


def test_memcpy_roundtrip_through_device(queue, device):
    rng = np.random.default_rng()
    src = rng.standard_normal(1000).astype(np.float32)
    dbuf = pk.Buffer(device, 1000, np.float32)
    back = np.empty_like(src)
    pk.memcpy(queue, dbuf, src)
    pk.memcpy(queue, back, dbuf)
    queue.wait()
    np.testing.assert_array_equal(back, src)


def test_memset_then_copy(queue, device):
    buf = pk.Buffer(device, (10, 3), np.int32)
    pk.memset(queue, buf, 0xFF)
    out = np.zeros((10, 3), np.int32)
    pk.memcpy(queue, out, buf)
    queue.wait()
    assert (out == -1).all()


def test_device_to_device_copy(queue, device):
    a = pk.Buffer(device, 64, np.float64)
    b = pk.Buffer(device, 64, np.float64)
    pk.memcpy(queue, a, np.arange(64, dtype=np.float64))
    pk.memcpy(queue, b, a)
    out = np.zeros(64)
    pk.memcpy(queue, out, b)
    queue.wait()
    np.testing.assert_array_equal(out, np.arange(64))


def test_memcpy_and_memset_of_byte_spans(queue, device):
    """``buffer.memref(offset, nbytes)``: a span of a buffer, copied and filled in queue order."""
    buf = pk.Buffer(device, 16, np.int32)
    pk.memset(queue, buf, 0)
    pk.memcpy(queue, buf.memref(8, 16), np.array([1, 2, 3, 4], np.int32))  # elements 2..5
    pk.memset(queue, buf.memref(40), 0xFF)  # elements 10..15
    part = np.zeros(3, np.int32)
    pk.memcpy(queue, part, buf.memref(12, 12))  # elements 3..5
    out = np.zeros(16, np.int32)
    pk.memcpy(queue, out, buf)
    queue.wait()
    np.testing.assert_array_equal(out, [0, 0, 1, 2, 3, 4, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(part, [2, 3, 4])
    for offset, nbytes in ((60, 8), (-4, 4), (0, 68), (8, -1), (65, None)):
        with pytest.raises(ValueError, match="is outside this buffer of 64 bytes"):
            buf.memref(offset, nbytes)
    with pytest.raises(ValueError, match=r"^offset 65 is outside"):
        buf.memref(65)


def test_memcpy_errors(queue, device):
    buf = pk.Buffer(device, 10, np.float32)
    with pytest.raises(ValueError, match="40 bytes, source has 80"):
        pk.memcpy(queue, buf, np.zeros(20, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        pk.memcpy(queue, buf, np.zeros(20, np.float32)[::2])
    ro = np.zeros(10, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pk.memcpy(queue, ro, buf)
    with pytest.raises(ValueError, match="byte"):
        pk.memset(queue, buf, 256)
    with pytest.raises(TypeError, match="pk.Queue"):
        pk.memcpy(buf, buf, buf)


def test_buffer_queue_must_be_a_queue(device):
    with pytest.raises(TypeError, match="queue= takes a pk.Queue, got str"):
        pk.Buffer(device, 4, np.float32, queue="q")


def test_buffer_shapes_and_errors(device):
    b = pk.Buffer(device, (4, 5), np.int64)
    assert b.nbytes == 160 and b.shape == (4, 5)
    assert pk.Buffer(device, 0, np.float32).nbytes == 0
    with pytest.raises(ValueError, match="non-negative"):
        pk.Buffer(device, -3)
    with pytest.raises(TypeError, match="Python objects"):
        pk.Buffer(device, 3, object)
    # sizes past 64 bits used to wrap around to a 0-byte buffer; past 2**48 bytes: a clear error
    for shape in ((2**32, 2**32), 2**62, (2**24, 2**24)):
        with pytest.raises(pk.OutOfMemory, match=r"more than a device can address \(2\*\*48\); split") as err:
            pk.Buffer(device, shape)
        assert isinstance(err.value, MemoryError)  # alpyka's error, still the builtin


def test_host_buffer_is_numpy():
    b = pk.Buffer(pk.host(), (3, 4), np.float32, pinned=True)
    arr = np.asarray(b)
    assert arr.shape == (3, 4) and arr.ctypes.data == b.ptr and b.ptr % 128 == 0
    arr[:] = 2
    assert float(np.asarray(b).sum()) == 24


def test_buffer_of_other_memory_space_is_refused(queue, device):
    foreign = pk.Device("cuda", 7, "pretend GPU", "gpu", "cuda:7", device.limits)
    ref = spi.MemRef(foreign, None, 0, 16)
    from portable._memory import _check_queue_access

    with pytest.raises(pk.DeviceMismatch, match="cuda:7"):
        _check_queue_access(queue, ref, "the destination")
