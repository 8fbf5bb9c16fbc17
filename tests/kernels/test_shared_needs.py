"""A shared array smaller than a device function needs (``@pk.device_function(min_shared=...)``,
as ``pk.tools.block_prefix_scan``'s ``ws``: one element per thread of the block) is a
WorkDivError at pk.exec naming it, on every backend, before any device compiler sees the
kernel (a 32-element ``ws`` with 256 threads crashed Intel's OpenCL compiler)."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload


@pk.kernel
def scan_ws32(acc, data, n):
    ws = acc.shared_array(32, np.int64)  # CMSSW's one-per-warp: too small past 32 threads
    if acc.block_idx == 0:
        pk.tools.block_prefix_scan(acc, data, data, n, ws)


@pk.kernel
def scan_ws1024(acc, data, n):
    ws = acc.shared_array(1024, np.int64)
    if acc.block_idx == 0:
        pk.tools.block_prefix_scan(acc, data, data, n, ws)


@pk.device_function(min_shared={"buf": lambda block_threads: 64 * block_threads})
def needs_64_per_thread(acc, buf):
    buf[acc.thread_idx] = 1


@pk.device_function
def passes_it_on(acc, buf):
    needs_64_per_thread(acc, buf)


@pk.kernel
def nested_small(acc, out):
    big = acc.shared_array(4096, np.int32)
    small = acc.shared_array(32, np.int32)
    passes_it_on(acc, big)  # first specialisation of passes_it_on: big enough for 64 threads
    passes_it_on(acc, small)  # the same specialisation again: its need still applies
    out[0] = 1


@pytest.fixture
def no_device_build(monkeypatch, backend):
    """Fails the test if the backend's device compiler is reached (OpenCL, CUDA/ROCm)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the device compiler was called before the shared-size check")

    if backend == "opencl":
        from backends import _opencl_launch

        monkeypatch.setattr(_opencl_launch, "build_program", refuse)
    elif backend in ("cuda", "rocm"):
        from backends import _cupy_launch

        monkeypatch.setattr(_cupy_launch, "build_function", refuse)


def _threads(device, wanted):
    return min(wanted, device.limits.max_threads_per_block)


def test_a_too_small_scan_workspace_is_refused_at_exec(queue, no_device_build):
    t = _threads(queue.device, 256)
    if t <= 32:
        pytest.skip(f"{queue.device} runs at most {t} threads per block: a 32-element ws is enough there")
    data = upload(queue, np.ones(1000, np.int64))
    with pytest.raises(
        pk.WorkDivError,
        match=rf"kernel 'scan_ws32': shared array 'ws' has 32 elements, but "
        rf"parameter 'ws' of device function 'block_prefix_scan' needs at "
        rf"least {t} with {t} threads per block",
    ):
        pk.exec(queue, pk.WorkDiv(1, t, 1), scan_ws32, data, 1000)
    queue.wait()  # nothing was enqueued


def test_a_workspace_of_one_per_thread_runs(queue):
    """The same scan with ``ws`` of 32 elements where the block has at most 32 threads (every
    CPU backend: one thread per block) and with 1024 elements at 256 threads: right sums."""
    n = 1000
    x = np.arange(n, dtype=np.int64) % 7
    data = upload(queue, x)
    pk.exec(queue, pk.WorkDiv(1, _threads(queue.device, 32), 1), scan_ws32, data, n)
    np.testing.assert_array_equal(download(queue, data), np.cumsum(x))
    data = upload(queue, x)
    pk.exec(queue, pk.WorkDiv(1, _threads(queue.device, 256), 1), scan_ws1024, data, n)
    np.testing.assert_array_equal(download(queue, data), np.cumsum(x))


def test_a_declared_need_is_checked_through_device_functions(queue, no_device_build):
    """A need of 64 elements per thread, passed on by another device function: the 32-element
    array is refused on every backend (one thread per block needs 64 already)."""
    out = pk.Buffer(queue.device, 1, np.int32)
    t = _threads(queue.device, 64)
    with pytest.raises(
        pk.WorkDivError,
        match=rf"shared array 'small' has 32 elements, but parameter 'buf' of "
        rf"device function 'needs_64_per_thread' needs at least {64 * t}",
    ):
        pk.exec(queue, pk.WorkDiv(1, t, 1), nested_small, out)


def test_the_check_follows_each_work_division(device):
    """A plan built for a work division that fits still refuses a later one that does not."""
    t = _threads(device, 256)
    if t <= 32:
        pytest.skip(f"{device} runs at most {t} threads per block")
    q = pk.Queue(device, blocking=True)
    data = upload(q, np.ones(64, np.int64))
    pk.exec(q, pk.WorkDiv(1, 32, 1), scan_ws32, data, 64)
    np.testing.assert_array_equal(download(q, data), np.arange(1, 65))
    with pytest.raises(pk.WorkDivError, match="shared array 'ws' has 32 elements"):
        pk.exec(q, pk.WorkDiv(1, t, 1), scan_ws32, data, 64)


def test_min_shared_is_checked_when_declared():
    with pytest.raises(TypeError, match="not a parameter"):
        pk.device_function(min_shared={"nope": lambda t: t})(lambda acc, ws: None)
    with pytest.raises(TypeError, match="function of block_threads"):
        pk.device_function(min_shared={"ws": 32})(lambda acc, ws: None)
