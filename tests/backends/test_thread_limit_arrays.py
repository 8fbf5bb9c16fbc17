"""The emulator's thread limit counts a per-thread array as NVRTC places it: one NVRTC keeps in
registers (every subscript constant, or a loop over a constant range) lowers the kernel's limit
as on CUDA; one indexed by data lives in local memory and leaves the limit alone. Compared with
the register count of NVRTC's own cubin (``.nv.info``'s ``EIATTR_REGCOUNT``), no GPU needed."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from backends.emulator import fake_cupy_kernels
from backends.emulator.thread_limit import max_threads_per_block

#: elements of the per-thread float64 array (128 registers when NVRTC keeps it in registers)
N = 64


@pk.kernel
def array_in_registers(acc, out, x, n):
    """A per-thread array every element of which is live at once, indexed by constant ranges."""
    for i in acc.uniform_elements(n):
        a = acc.local_array(N, np.float64)
        for k in range(N):
            a[k] = x[i] * k + 1.0
        s = 0.0
        for k in range(N):
            s = s * a[N - 1 - k] * 0.5 + a[k]
        out[i] = s


@pk.kernel
def array_in_local_memory(acc, out, x, where, n):
    """The same array indexed by data: NVRTC puts it in the thread's local memory."""
    for i in acc.uniform_elements(n):
        a = acc.local_array(N, np.float64)
        for k in range(N):
            a[(k * 7 + where[i]) % N] = x[i] * k + 1.0
        s = 0.0
        for k in range(N):
            s += a[(k * 3 + where[i]) % N]
        out[i] = s


def _in_registers_expected(x: np.ndarray) -> np.ndarray:
    a = [x * k + 1.0 for k in range(N)]
    s = np.zeros_like(x)
    for k in range(N):
        s = s * a[N - 1 - k] * 0.5 + a[k]
    return s


def _host(shape, dtype):
    return pk.Buffer(pk.host(), shape, dtype)


def _cuda_text(kernel, args) -> str:
    from backends._c_emit import emit

    return emit(kernel.ir(kernel.signature(args), 1, False), "cuda", unit_elements=True).text


def _nvrtc_registers(text: str) -> int:
    """Registers per thread of the one kernel of ``text`` in NVRTC's cubin for sm_90."""
    from cuda.bindings import nvrtc

    from backends._c_build import CUPY_NVRTC_APPENDED

    _, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"kernel.cu", 0, [], [])
    try:
        opts = [b"--gpu-architecture=sm_90", b"--std=c++17", *[o.encode() for o in CUPY_NVRTC_APPENDED]]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return _register_count(bytes(cubin))


def _register_count(cubin: bytes) -> int:
    """``EIATTR_REGCOUNT`` (attribute 0x2f: symbol index, registers) of a cubin's ``.nv.info``."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names = headers[names_at][4]
    for h in headers:
        start = names + h[0]
        if cubin[start : cubin.index(b"\0", start)] == b".nv.info":
            data, at = cubin[h[4] : h[4] + h[5]], 0
            while at + 4 <= len(data):
                form, attr, size = struct.unpack_from("<BBH", data, at)
                if form == 0x04 and attr == 0x2F:
                    return struct.unpack_from("<II", data, at + 4)[1]
                at += 4 + (size if form == 0x04 else 0)
    raise AssertionError("no register count in the cubin")


def _cuda_limit(registers: int) -> int:
    """CUDA's ``maxThreadsPerBlock`` for ``registers`` a thread: registers are given out in
    units of 8 a thread (256 a warp) from the block's 65,536."""
    unit = -(-registers // 8) * 8
    return min(1024, 65536 // (unit * 32) * 32)


def test_an_array_in_registers_lowers_the_estimate_as_nvrtc_does():
    """Before arrays were counted by their elements both kernels estimated 1024 threads; NVRTC
    gives the first 142 registers (448 threads on CUDA). The estimate stays on the safe side
    (at most CUDA's limit) and within a quarter of it."""
    from backends._c_build import nvrtc_available

    args = (_host(8, np.float64), _host(8, np.float64), 8)
    estimated = max_threads_per_block(_cuda_text(array_in_registers, args), is_hip=False)
    assert estimated < 1024
    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")
    real = _cuda_limit(_nvrtc_registers(_cuda_text(array_in_registers, args)))
    assert real < 1024, real
    assert real * 3 // 4 <= estimated <= real, (estimated, real)


def test_an_array_indexed_by_data_keeps_the_limit_as_nvrtc_does():
    from backends._c_build import nvrtc_available

    args = (_host(8, np.float64), _host(8, np.float64), _host(8, np.int32), 8)
    text = _cuda_text(array_in_local_memory, args)
    assert max_threads_per_block(text, is_hip=False) == 1024
    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")
    assert _cuda_limit(_nvrtc_registers(text)) == 1024


@pytest.mark.hip_differs  # the rocm emulator's answer is 1024 (AMD's compiler spills instead)
def test_the_emulated_device_keeps_launches_within_the_arrays_limit(device, queue):
    """On the emulated CUDA device the array lowers the kernel's limit; ``valid_workdiv`` picks
    blocks within it, the kernel gives numpy's answer, and a block over it is refused."""
    if device.backend_name not in fake_cupy_kernels.served_here():
        pytest.skip("the GPU emulator's estimate: an emulated device only")
    n = 2000
    x = np.linspace(-1.0, 1.0, n) * 1e-3
    bx, out = upload(queue, x), upload(queue, np.zeros(n))
    wd = pk.valid_workdiv(device, n, kernel=array_in_registers, args=(out, bx, n))
    limit = device.backend.kernel_thread_limit(device, wd, array_in_registers, (out, bx, n))
    if device.backend_name == "cuda":
        assert limit < 1024 and wd.threads[0] <= limit
    else:
        assert limit == 1024
    pk.exec(queue, wd, array_in_registers, out, bx, n)
    np.testing.assert_allclose(download(queue, out), _in_registers_expected(x), rtol=1e-12)
    if limit < 1024:
        with pytest.raises(pk.WorkDivError, match=f"can run at most {limit} threads"):
            pk.exec(queue, pk.WorkDiv(1, limit + 32, 1), array_in_registers, out, bx, n)
