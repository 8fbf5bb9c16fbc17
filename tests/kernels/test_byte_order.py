"""Values of a non-native byte order (``>f4``, ``>i8`` straight from FITS, HDF5 or ROOT files) on
every backend: refused at pk.exec and by pk.tools with a KernelArgumentError naming the
argument, refused by pk.memcpy into a Buffer (a byte copy would not convert them), converted by
PortableCollection.from_dict (which copies anyway)."""

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.kernels import download, upload

BIG = [">f4", ">i8"]


@pk.kernel
def double_into(acc, src, out, n):
    for i in acc.uniform_elements(n):
        out[i] = src[i] * 2


def _big_endian_arg(queue, dt):
    """A big-endian argument the queue's device can address: a numpy array on the CPU
    backends, a Buffer of that dtype elsewhere."""
    values = np.array([1.5, 2.0, 3.0, 4.0]).astype(dt)
    if queue.device.is_host_memory:
        return values
    return pk.Buffer(queue.device, 4, dt)


@pytest.mark.parametrize("dt", BIG)
def test_exec_refuses_a_big_endian_array_naming_it(queue, dt):
    src = _big_endian_arg(queue, dt)
    out = pk.Buffer(queue.device, 4, np.dtype(dt).newbyteorder("="))
    with pytest.raises(pk.KernelArgumentError, match=r"argument 'src' holds >[fi][48] values.*newbyteorder"):
        pk.exec(queue, pk.valid_workdiv(queue.device, 4), double_into, src, out, 4)
    queue.wait()  # nothing was enqueued: no error left for the wait


@pytest.mark.parametrize("dt", BIG)
def test_exec_refuses_a_big_endian_buffer(queue, dt):
    src = upload(queue, np.arange(4, dtype=np.dtype(dt).newbyteorder("=")))
    out = pk.Buffer(queue.device, 4, dt)
    with pytest.raises(pk.KernelArgumentError, match=r"argument 'out' holds >"):
        pk.exec(queue, pk.valid_workdiv(queue.device, 4), double_into, src, out, 4)


@pytest.mark.parametrize("dt", BIG)
def test_exec_runs_once_converted(queue, dt):
    raw = np.array([1.5, 2.0, 3.0, 4.0]).astype(dt)
    native = raw.astype(raw.dtype.newbyteorder("="))
    src = native if queue.device.is_host_memory else upload(queue, native)
    out = pk.Buffer(queue.device, 4, native.dtype)
    pk.exec(queue, pk.valid_workdiv(queue.device, 4), double_into, src, out, 4)
    np.testing.assert_array_equal(download(queue, out), raw.astype(native.dtype) * 2)


@pytest.mark.parametrize("dt", BIG)
@pytest.mark.parametrize("call", ["prefix_scan", "radix_sort", "argsort"])
def test_tools_refuse_big_endian_input_naming_it(queue, dt, call):
    keys = _big_endian_arg(queue, dt)
    with pytest.raises(pk.KernelArgumentError, match=r"pk.tools: (src|keys) holds >"):
        if call == "prefix_scan":
            pk.tools.prefix_scan(queue, keys, pk.Buffer(queue.device, 4, np.dtype(dt).newbyteorder("=")))
        else:
            getattr(pk.tools, call)(queue, keys)


def test_one_to_many_refuses_big_endian_keys(queue):
    with pytest.raises(pk.KernelArgumentError, match=r"pk.tools: keys holds >i8"):
        pk.tools.one_to_many(queue, _big_endian_arg(queue, ">i8"), 4)


def test_prefix_scan_refuses_a_big_endian_destination(queue):
    src = upload(queue, np.arange(4, dtype=np.float32))
    with pytest.raises(pk.KernelArgumentError, match=r"pk.tools: dst holds >f4"):
        pk.tools.prefix_scan(queue, src, pk.Buffer(queue.device, 4, ">f4"))


@pytest.mark.parametrize("dt", BIG)
def test_memcpy_refuses_big_endian_into_a_native_buffer(queue, dt):
    raw = np.array([1.5, 2.0, 3.0, 4.0]).astype(dt)
    buf = pk.Buffer(queue.device, 4, raw.dtype.newbyteorder("="))
    with pytest.raises(ValueError, match=r"source holds >.* byte order.*newbyteorder"):
        pk.memcpy(queue, buf, raw)
    with pytest.raises(ValueError, match=r"destination holds >"):
        pk.memcpy(queue, np.empty(4, dt), buf)
    with pytest.raises(ValueError, match=r"untyped memory"):
        pk.memcpy(queue, buf.memref(), raw)
    pk.memcpy(queue, buf, raw.astype(raw.dtype.newbyteorder("=")))  # the fix the message names
    np.testing.assert_array_equal(download(queue, buf), raw)


def test_memcpy_between_arrays_of_the_same_byte_order(queue):
    """A byte copy between two sides of the same non-native dtype keeps every value."""
    raw = np.array([1.5, -2.25, 3.0], ">f4")
    buf = pk.Buffer(queue.device, 3, ">f4")
    pk.memcpy(queue, buf, raw)
    back = np.empty(3, ">f4")
    pk.memcpy(queue, back, buf)
    queue.wait()
    np.testing.assert_array_equal(back, raw)


class Hit(soa.Layout):
    x = soa.column(np.float32)
    n = soa.column(np.int64)
    total = soa.scalar(np.float64)


def test_from_dict_converts_big_endian_values(queue):
    """from_dict copies every field anyway: it converts the byte order (numpy's assignment)."""
    data = {
        "x": np.array([1.5, 2.5, -3.0], ">f4"),
        "n": np.array([1, 2**40, -7], ">i8"),
        "total": np.array(6.25, ">f8"),
    }
    got = pk.PortableCollection.from_dict(Hit, data, queue).to_dict(queue)
    np.testing.assert_array_equal(got["x"], [1.5, 2.5, -3.0])
    np.testing.assert_array_equal(got["n"], [1, 2**40, -7])
    assert got["total"] == 6.25
    assert got["x"].dtype.isnative and got["n"].dtype.isnative
