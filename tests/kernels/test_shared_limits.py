"""Static shared memory (``acc.shared_array``) beyond what one block may declare is a WorkDivError
naming the arrays and the limit, before any device compiler sees the kernel (issue 38 item 10):
CUDA caps a block's static ``__shared__`` at 48 KiB on every GPU (more needs dynamic shared memory
and the opt-in; the GPU emulator ran 80,000 bytes), HIP gives a block 64 KiB of LDS, OpenCL the
device's ``CL_DEVICE_LOCAL_MEM_SIZE``; a 2 GiB array was a linker error on the emulator."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload


@pk.kernel
def shared_48k(acc, out):
    sh = acc.shared_array(6144, np.float64)  # 49,152 bytes: CUDA's static limit exactly
    t = acc.thread_idx
    sh[t] = 2.0
    acc.sync_block_threads()
    out[t] = sh[t]


@pk.kernel
def shared_64k(acc, out):
    sh = acc.shared_array((64, 128), np.float64)  # 65,536 bytes: HIP's LDS per block
    t = acc.thread_idx
    sh[t, 1] = 3.0
    acc.sync_block_threads()
    out[t] = sh[t, 1]


@pk.kernel
def shared_80k(acc, out):
    a = acc.shared_array(5000, np.float64)
    b = acc.shared_array(10000, np.float32)  # 40,000 + 40,000 bytes
    t = acc.thread_idx
    a[t] = 4.0
    b[t] = 1.0
    acc.sync_block_threads()
    out[t] = a[t] + b[t]


@pk.kernel
def shared_2gib(acc, out):
    sh = acc.shared_array(1 << 28, np.float64)
    t = acc.thread_idx
    sh[t] = 6.0
    acc.sync_block_threads()
    out[t] = sh[t]


CASES = [(shared_48k, 49152, 2.0), (shared_64k, 65536, 3.0), (shared_80k, 80000, 5.0), (shared_2gib, 2**31, 6.0)]


@pytest.fixture
def no_device_build(monkeypatch, backend):
    """Counts the device compiler's builds (OpenCL, CUDA/ROCm): a refused kernel reaches none."""
    builds = []
    if backend == "opencl":
        from backends import _opencl_launch as module

        name = "build_program"
    else:
        from backends import _cupy_launch as module

        name = "build_function"
    real = getattr(module, name)

    def counted(*args, **kwargs):
        builds.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return builds


def _limit(device):
    """What one block may declare: CUDA's 48 KiB, else the device's shared memory per block."""
    if device.capabilities.c_dialect == "cuda":
        return 48 * 1024
    return device.limits.shared_memory_per_block


@pytest.mark.alpyka_backends("opencl", "cuda", "rocm")
@pytest.mark.parametrize("kern, nbytes, value", CASES, ids=[c[0].__name__ for c in CASES])
def test_static_shared_memory_above_the_block_limit_is_refused_before_the_build(
    device, queue, no_device_build, monkeypatch, kern, nbytes, value
):
    limit = _limit(device)
    if device.capabilities.c_dialect == "opencl":  # the suite's HIP guard (tests/conftest.py) builds
        monkeypatch.delenv("ALPYKA_CHECK_HIP", raising=False)  # each kernel for AMD's 64 KiB of LDS too
    out = upload(queue, np.zeros(4))
    if nbytes <= limit:
        pk.exec(queue, pk.WorkDiv(1, 4, 1), kern, out)
        np.testing.assert_array_equal(download(queue, out), np.full(4, value))
        return
    with pytest.raises(pk.WorkDivError) as err:
        pk.exec(queue, pk.WorkDiv(1, 4, 1), kern, out)
    msg = str(err.value)
    assert f"kernel {kern.__name__!r} (" in msg and f"declares {nbytes} bytes of static shared memory" in msg, msg
    if device.capabilities.c_dialect == "cuda":
        assert "CUDA caps a block's static __shared__ memory at 49152 bytes (48 KiB)" in msg, msg
        assert "dynamic_shared_bytes" in msg, msg
    else:
        what = "LDS per block" if device.capabilities.c_dialect == "hip" else "CL_DEVICE_LOCAL_MEM_SIZE"
        assert f"has {limit} bytes of" in msg and what in msg, msg
    assert no_device_build == [], "the device compiler saw a kernel the check refuses"
    queue.wait()  # nothing was enqueued


@pytest.mark.alpyka_backends("cuda")
def test_dynamic_shared_memory_goes_past_cudas_static_limit(device, queue):
    """The fix the message names: 80,000 bytes as dynamic shared memory run (the launcher opts
    in up to the device's sharedMemPerBlockOptin)."""
    optin = device.properties.get("shared_memory_per_block_optin") or device.limits.shared_memory_per_block
    if optin < 80000:
        pytest.skip(f"{device} gives a block {optin} bytes of shared memory in all")

    @pk.kernel(dynamic_shared_bytes=80000)
    def dynamic_80k(acc, out):
        sh = acc.dynamic_shared_array(np.float64)
        t = acc.thread_idx
        sh[9999 - t] = 7.0
        acc.sync_block_threads()
        out[t] = sh[9999 - t]

    out = upload(queue, np.zeros(4))
    pk.exec(queue, pk.WorkDiv(1, 4, 1), dynamic_80k, out)
    np.testing.assert_array_equal(download(queue, out), np.full(4, 7.0))
