"""CUDA C from the emitter compiles to PTX through NVRTC (no GPU needed), build errors show the
marked source and the kernel's line, and the OpenCL run's CUDA guard (ALPYKA_CHECK_CUDA=1)."""

import os
import tempfile

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing import device_calls as results
from alpyka_testing import local_arrays
from alpyka_testing.backends import blocks as mt
from backends._c_build import (
    CUPY_NVRTC_APPENDED,
    KernelBuildError,
    error_lines,
    format_build_error,
    nvrtc_available,
    nvrtc_compile,
)
from backends._c_emit import emit

needs_nvrtc = pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
ARCH = os.environ.get("ALPYKA_CUDA_ARCH", "compute_90")


class Track(soa.Layout):
    x = soa.column(np.float32)
    p = soa.vector(np.float64, 3)
    cov = soa.matrix(np.float32, 2, 2)
    n = soa.scalar(np.int32)


@pk.device_function
def norm2(v, i):
    return v.p[i, 0] * v.p[i, 0] + v.p[i, 1] * v.p[i, 1] + v.p[i, 2] * v.p[i, 2]


@pk.kernel
def soa_kernel(acc, out, v, scale):
    for i in acc.uniform_elements(out.size):
        out.x[i] = np.float32(norm2(v, i)) * scale + v.cov[i, 1, 0]
        acc.atomic_add(out.n, 1)


@pk.kernel
def bit_ops(acc, counts, rev, x, n):
    for i in acc.uniform_elements(n):
        counts[i, 0] = acc.popcount(x[i]) + acc.clz(x[i]) + acc.ffs(x[i])
        rev[i] = acc.brev(x[i])


@pk.kernel
def warp_matches(acc, out, x, n):
    for i in acc.uniform_elements(n):
        s = x[i]
        m = acc.warp_match_any(s) ^ acc.warp_match_all(np.float32(s)) ^ acc.warp_match_any(np.float64(s))
        out[i] = np.int64(m) + acc.warp_shfl(s, 3, width=8) + acc.warp_shfl(np.float64(s), 1, width=2)


def _h(shape, dtype):
    return pk.Buffer(pk.host(), shape, dtype)


def _cases():
    """(kernel, example args, ndim): the backend tests' kernels (alpyka_testing/backends/blocks.py)
    and one of SoA views, typed by host stand-ins."""
    f64, f32, i64, i32 = np.float64, np.float32, np.int64, np.int32
    track = pk.PortableCollection(Track, 8, pk.host())
    return [
        (mt.block_sums, (_h(4, f64), _h(8, f64), 8), 1),
        (mt.transpose_tiled, (_h((4, 4), f32), _h((4, 4), f32), 4, 4), 2),
        (mt.reverse_in_block, (_h(8, f32), _h(8, f32), 8), 1),
        (mt.histogram, (_h(4, np.int32), _h(4, f64), _h(2, f32), _h(8, f32), 8, 4), 1),
        (mt.counters, (_h(3, np.uint32), _h(3, i64), 8), 1),
        (mt.python_arith, (_h((8, 2), i64), _h((8, 5), f64), _h(8, i64), _h(8, i64), _h(8, f64), _h(8, f64), 8), 1),
        (soa_kernel, (track.view(), track.const_view(), np.float32(2)), 1),
        (mt.math_all, (_h((8, 9), f64), _h(8, f32), _h(8, f32), 8), 1),
        (mt.math_all, (_h((8, 9), f64), _h(8, f64), _h(8, f64), 8), 1),
        (mt.weighted_block_sums, (_h(1, f64), pk.PortableCollection(mt.WP, 8, pk.host()).const_view(), 8), 1),
        (bit_ops, (_h((8, 1), np.int32), _h(8, np.int32), _h(8, np.int32), 8), 1),  # __popc, __clz...
        (bit_ops, (_h((8, 1), np.int32), _h(8, np.uint64), _h(8, np.uint64), 8), 1),  # __popcll, __clzll...
        (warp_matches, (_h(8, np.float64), _h(8, np.int64), 8), 1),  # __match_any_sync, shfl within widths
        (results.several_values, (_h((8, 10), f64), _h(1, i64), _h(8, i64), 8), 1),
        (results.rotate_points, (_h(8, f32), _h(8, f32), f32(0.5), f32(0.5), 8), 1),
        (results.sums_and_counts, (_h(8, i64), _h(8, i64), _h(8, i64), 8), 1),
        (results.count_neighbours, (_h(8, i32), _h(5, i32), _h(8, i32), _h(8, i32), _h(8, f32), f32(1), 1, 8), 1),
        (results.neighbours_by_lambda, (_h(8, i32), _h(5, i32), _h(8, i32), _h(8, i32), _h(8, f32), f32(1), 1, 8), 1),
        (results.nested_in_a_function, (_h(8, f64), _h(16, f64), 1.5, 8), 1),
        (local_arrays.through_functions, (_h((8, 6), f64), _h(8, f64), 8), 1),
        (local_arrays.roundtrips(np.bool_)[2], (_h((8, 12), np.bool_), _h((8, 12), np.bool_), 8), 1),
        (local_arrays.constant_indices, (_h((8, 5), f64), _h(8, f64), 8), 1),
    ]


@needs_nvrtc
@pytest.mark.parametrize("unit", [False, True], ids=["chunked", "one-element"])
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "range-checked"])
@pytest.mark.parametrize("case", range(len(_cases())), ids=[f"{c[0].__name__}{i}" for i, c in enumerate(_cases())])
def test_every_test_kernel_compiles_to_ptx(case, debug, unit):
    kernel, args, ndim = _cases()[case]
    kir = kernel.ir(kernel.signature(args), ndim, debug)
    src = emit(kir, "cuda", unit_elements=unit)
    ptx = nvrtc_compile(src, ARCH, CUPY_NVRTC_APPENDED)  # the flags cupy compiles with
    assert f".entry {src.entry}" in ptx
    if any(s.shape for s in kir.shared):
        assert ".shared" in ptx


def test_hip_source_is_the_cuda_source_but_for_atomics():
    kernel, args, ndim = _cases()[3]
    kir = kernel.ir(kernel.signature(args), ndim, False)
    cuda, hip = emit(kir, "cuda").text, emit(kir, "hip").text
    assert "__syncthreads" not in cuda or "__syncthreads" in hip
    assert 'extern "C" __global__' in hip
    # float64 atomic add is native on CUDA (sm_60+) and a CAS loop on HIP
    assert "atomicAdd(p, v)" in cuda and "atomicCAS((unsigned long long*)" in hip


@needs_nvrtc
def test_nvrtc_error_marks_the_line_and_names_the_kernel_line():
    kernel, args, ndim = _cases()[0]
    src = emit(kernel.ir(kernel.signature(args), ndim, False), "cuda")
    target = next(n for n in range(1, len(src.text.splitlines()) + 1) if n in src.line_map)
    lines = src.text.splitlines()
    lines[target - 1] = "this_is_not_cuda; " + lines[target - 1]  # before the // comment
    src.text = "\n".join(lines) + "\n"
    with pytest.raises(KernelBuildError) as info:
        nvrtc_compile(src, ARCH)
    msg = str(info.value)
    assert f">>{target:5d} |" in msg
    assert f"alpyka_testing/backends/blocks.py:{src.line_map[target]}" in msg
    assert "this_is_not_cuda" in msg


def test_build_error_formatting_of_clang_logs():
    kernel, args, ndim = _cases()[0]
    src = emit(kernel.ir(kernel.signature(args), ndim, False), "opencl")
    line = max(src.line_map)
    log = f"<source>:{line}:7: error: use of undeclared identifier 'zz'"
    assert error_lines(log) == [line]
    msg = format_build_error(src, "OpenCL (test)", log)
    assert f">>{line:5d} |" in msg and f":{src.line_map[line]}" in msg


@pytest.mark.alpyka_backends("opencl")  # the plugin's matrix: skipped (saying why) unless selected and available
def test_opencl_build_error_is_a_kernel_build_error(device):
    cl = pytest.importorskip("pyopencl")
    from backends._opencl_launch import build_program

    dev = device
    kernel, args, ndim = _cases()[0]
    src = emit(kernel.ir(kernel.signature(args), ndim, False), "opencl")
    line = max(src.line_map)
    lines = src.text.splitlines()
    lines[line - 1] = "undeclared_zz = 1; " + lines[line - 1]
    src.text = "\n".join(lines) + "\n"
    before = set(os.listdir(tempfile.gettempdir()))
    with pytest.raises(KernelBuildError) as info:
        build_program(dev.native.context, dev.native.device, src)
    assert f">>{line:5d} |" in str(info.value)
    # pyopencl saves a copy of a failed source in the temporary directory: removed, not named
    assert "source saved as" not in str(info.value)
    assert not [f for f in set(os.listdir(tempfile.gettempdir())) - before if f.endswith(".cl")]
    assert isinstance(info.value, pk.AlpykaError) and cl is not None


@needs_nvrtc
@pytest.mark.alpyka_backends("opencl")
def test_opencl_runs_check_the_cuda_dialect_when_asked(monkeypatch, device):
    """CI runs the OpenCL matrix with ALPYKA_CHECK_CUDA=1: a kernel whose CUDA C does not compile
    fails its OpenCL launch too."""
    import backends._c_build as build
    from backends import _check_markers

    monkeypatch.setenv("ALPYKA_CHECK_CUDA", "1")
    monkeypatch.setattr(_check_markers, "passed", lambda kind, name: False)  # no process compiled it before
    seen = []
    real = build.nvrtc_compile
    monkeypatch.setattr(
        build,
        "nvrtc_compile",
        lambda src, arch="compute_90", options=(): seen.append((src.dialect, options)) or real(src, arch, options),
    )

    @pk.kernel
    def fresh(acc, out, n):
        for i in acc.uniform_elements(n):
            out[i] = i * 2

    dev = device
    q = pk.Queue(dev)
    out = pk.Buffer(dev, 10, np.int64)
    pk.exec(q, pk.WorkDiv(1, 4, 1), fresh, out, 10)
    got = np.empty(10, np.int64)
    pk.memcpy(q, got, out)
    q.wait()
    # the options cupy.RawModule hands NVRTC: alpyka's float rules, then cupy's own
    want = build.float_options("cuda", False) + build.CUPY_NVRTC_APPENDED
    assert seen == [("cuda", want)] and (got == np.arange(10) * 2).all()


def _marker_of(src, arch, options):
    import backends._c_build as build
    from backends import _check_markers

    name = _check_markers.digest(build.nvrtc_identity(), arch, *options, f"{src.kernel_name}.cu", src.text)
    return pk.compiler.private_cache() / "nvrtc-checked" / f"{name}.ok"


@needs_nvrtc
def test_the_nvrtc_check_is_shared_by_processes(monkeypatch, tmp_path):
    """A text the CUDA guard compiled leaves a marker: a process that checks the same text, arch
    and options later compiles nothing; a failing text leaves none, and a marker that is not the
    cache's own (untagged, others may write its folder, a link) compiles again."""
    import backends._c_build as build

    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    kernel, args, ndim = _cases()[0]
    kir = kernel.ir(kernel.signature(args), ndim, False)
    src = emit(kir, "cuda")
    compiled = []
    real = build._nvrtc_compile
    monkeypatch.setattr(build, "_nvrtc_compile", lambda *a: compiled.append(a[1:]) or real(*a))
    fresh_process = lambda: monkeypatch.setattr(build, "_PTX", {})  # noqa: E731 - only the markers remain
    fresh_process()
    build.nvrtc_check(src, ARCH, CUPY_NVRTC_APPENDED)
    assert compiled == [(ARCH, CUPY_NVRTC_APPENDED)]
    marker = _marker_of(src, ARCH, CUPY_NVRTC_APPENDED)
    assert marker.is_file() and len(marker.read_bytes()) == 32
    fresh_process()
    build.nvrtc_check(src, ARCH, CUPY_NVRTC_APPENDED)
    assert len(compiled) == 1
    build.nvrtc_check(src, ARCH)  # other options: another marker
    assert compiled[-1] == (ARCH, ())
    tag = marker.read_bytes()
    for tamper in ("untagged", "shared folder", "link"):
        fresh_process()
        if tamper == "untagged":
            marker.write_bytes(marker.name[:-3].encode())
        elif tamper == "shared folder":
            marker.write_bytes(tag)
            marker.parent.chmod(0o777)
        else:
            marker.parent.chmod(0o700)
            real_file = marker.with_name("elsewhere")
            real_file.write_bytes(tag)
            marker.unlink()
            marker.symlink_to(real_file)
        before = len(compiled)
        build.nvrtc_check(src, ARCH, CUPY_NVRTC_APPENDED)
        assert len(compiled) == before + 1, tamper
    bad = emit(kir, "cuda")
    bad.text += "this_is_not_cuda;\n"
    for _ in range(2):
        fresh_process()
        with pytest.raises(KernelBuildError):
            build.nvrtc_check(bad, ARCH)
    assert not _marker_of(bad, ARCH, ()).exists()


def test_unavailable_backends_say_why():
    reasons = pk.unavailable_backends()
    try:
        import cupy
    except Exception:
        cupy = None
    if "cuda" in reasons:
        assert "cupy" in reasons["cuda"] and (
            "driver" in reasons["cuda"] or "install" in reasons["cuda"] or "build" in reasons["cuda"]
        )
    if "rocm" in reasons and cupy is not None and not cupy.cuda.runtime.is_hip:
        assert "HIP" in reasons["rocm"] and "CUDA build" in reasons["rocm"]
    from portable.cli._info import info_text

    text = info_text()
    for name, why in reasons.items():
        assert f"{name}" in text and why in text


@needs_nvrtc
def test_nvrtc_compile_leaves_python_bytes_intact():
    """NVRTC writes its log and PTX into the buffers it is given: a successful compile has a
    one-byte log, and writing it into ``b" " * 1`` (CPython's shared one-byte object) once broke
    every later ``torch.save`` of the process."""
    kernel, args, ndim = _cases()[0]
    src = emit(kernel.ir(kernel.signature(args), ndim, False), "cuda")
    nvrtc_compile(src, ARCH)
    assert b" " == bytes([32]) and b" " * 3 == bytes([32, 32, 32])


@pk.kernel
def every_warp_op(acc, out, n):
    """Each shuffle kind on int, float and bool, each vote, and pk.tools.block_sum's shuffles."""
    ws = acc.shared_array(32, np.int64)
    for i in acc.uniform_elements(n):
        out[i] = (
            acc.warp_shfl(i, 0)
            + acc.warp_shfl_up(i, 1)
            + acc.warp_shfl_down(i, 1)
            + acc.warp_shfl_xor(i, 1)
            + np.int64(acc.warp_ballot(i % 2 == 0))
            + (1 if acc.warp_all(i > 0) else 0)
            + (1 if acc.warp_any(i > 3) else 0)
            + np.int64(acc.warp_shfl_down(np.float32(i), 2))
            + (1 if acc.warp_shfl_xor(i % 3 == 0, 2) else 0)
        )
    out[0] += pk.tools.block_sum(acc, out[acc.thread_idx], ws)


@pk.kernel
def active_mask_only(acc, out):
    out[acc.thread_idx] = np.int64(acc.warp_active_mask()) + acc.warp_shfl(acc.thread_idx, 0)


@needs_nvrtc
@pytest.mark.parametrize("dialect", ["cuda", "hip"])
def test_sync_warp_ops_take_the_launched_lanes_not_activemask(dialect):
    """Issue 32, item 3: ``__activemask()`` converges nothing, so a *_sync operation over it can
    read undefined lanes after a divergent loop. Every *_sync call passes the warp's launched
    lanes (computed from blockDim); only ``acc.warp_active_mask()`` reads ``__activemask()``."""
    import re

    i64 = np.int64
    src = emit(every_warp_op.ir(every_warp_op.signature((_h(64, i64), 64)), 1, False), dialect)
    # the explicit-mask forms' macros (acc.warp_ballot_mask/warp_shfl_mask) pass the kernel's mask
    text = "\n".join(line for line in src.text.split("\n") if not re.match(r"#define ALPYKA_\w+_MASK\(", line))
    calls = re.findall(r"__(\w+)_sync\(([^,()]*(?:\(\))?)", text)
    ops = {op for op, _ in calls if not op.startswith("syncthreads")}
    assert {"ballot", "all", "any", "shfl", "shfl_up", "shfl_down", "shfl_xor"} <= ops, calls
    assert {mask for op, mask in calls if op in ops} == {"ALPYKA_LANES"}, calls
    assert "alpyka_warp_lanes" in src.text and "blockDim" in src.text
    ptx = nvrtc_compile(src, ARCH, CUPY_NVRTC_APPENDED)
    assert "shfl.sync" in ptx and "vote.sync" in ptx and "%ntid" in ptx
    assert "activemask" not in ptx  # no warp_active_mask() in the kernel: no activemask instruction

    src = emit(active_mask_only.ir(active_mask_only.signature((_h(64, i64),)), 1, False), dialect)
    assert src.text.count("__activemask()") == 1
    assert "activemask.b32" in nvrtc_compile(src, ARCH, CUPY_NVRTC_APPENDED)


def _diff_of_products(acc, a, b, c, d, out, n):
    for i in acc.uniform_elements(n):
        out[i] = a[i] * b[i] - c[i] * d[i]


@needs_nvrtc
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("hip", [False, True], ids=["cuda", "hip"])
def test_ptx_fuses_no_fma_unless_fast_math(dtype, hip):
    """The options the CUDA launcher hands cupy.RawModule reach NVRTC: by default ``a*b - c*d``
    is two multiplies and a subtract that carry ``.rn`` (PTX's rule: ptxas fuses no ``.rn``
    operation into an FMA) and no ``fma``; NVRTC's own default (``--fmad=true``) and
    ``@pk.kernel(fast_math=True)`` leave them fusable (``mul.f32``, ``mul.ftz.f32``) or fused.
    The HIP text (NVRTC as hiprtc's stand-in here) is compiled with the NVRTC spelling of its
    float rules."""
    from backends._c_build import float_options
    from backends._cupy_launch import compile_options

    t = "f32" if dtype == np.float32 else "f64"
    args = tuple(_h(16, dtype) for _ in range(5)) + (16,)
    for fast in (False, True):
        kernel = pk.kernel(fast_math=fast)(_diff_of_products)
        src = emit(kernel.ir(kernel.signature(args), 1, False), "hip" if hip else "cuda")
        assert src.fast_math is fast
        rawmodule = compile_options(hip, fast)
        assert rawmodule == (() if hip else ("--std=c++17",)) + float_options("hip" if hip else "cuda", fast)
        opts = float_options("cuda", fast) + CUPY_NVRTC_APPENDED  # nvrtc_compile adds --std=c++17
        body = nvrtc_compile(src, ARCH, opts).split(f".entry {src.entry}", 1)[1]
        ops = [
            ln.split()[0]
            for ln in body.splitlines()
            if ln.strip()
            and ln.split()[0].endswith(f".{t}")
            and ln.split()[0].split(".")[0] in ("mul", "sub", "add", "fma", "neg")
        ]
        arith = [op for op in ops if op.split(".")[0] in ("mul", "sub", "fma")]
        assert arith, body
        if fast:
            assert any(op.startswith("fma.") or ".rn" not in op for op in arith), ops
        else:
            assert not [op for op in arith if op.startswith("fma.") or ".rn" not in op], ops


def test_the_compile_checks_are_the_suites_hook_not_the_launch_paths():
    """ALPYKA_CHECK_CUDA / ALPYKA_CHECK_HIP are read by the suite's hook (tests/conftest.py installs
    alpyka_testing/compile_checks.py around the launchers' IR -> C step), never by the library."""
    import inspect

    import backends._gpu_launch as launch
    from alpyka_testing.compile_checks import wrappers

    chain = wrappers(launch.emit_for)  # the emulator's source recorder may wrap it too
    assert any(getattr(f, "compile_checks", False) for f in chain), "tests/conftest.py did not install the checks"
    assert chain[-1].__module__ == launch.__name__
    assert "ALPYKA_CHECK" not in inspect.getsource(launch)


@needs_nvrtc
@pytest.mark.parametrize("name", ["several_values", "rotate_points", "count_neighbours", "neighbours_by_lambda"])
def test_out_pointers_and_passed_functions_leave_no_call_or_local_memory(name):
    """Several return values go through out-pointers to the caller's locals, and a function passed
    to a device function is a specialisation of its own: once NVRTC inlines them, the PTX keeps
    every value in registers (no local memory, no call)."""
    f32, i32, i64, f64 = np.float32, np.int32, np.int64, np.float64
    args = {
        "several_values": (_h((8, 10), f64), _h(1, i64), _h(8, i64), 8),
        "rotate_points": (_h(8, f32), _h(8, f32), f32(0.5), f32(0.5), 8),
        "count_neighbours": (_h(8, i32), _h(5, i32), _h(8, i32), _h(8, i32), _h(8, f32), f32(1), 1, 8),
        "neighbours_by_lambda": (_h(8, i32), _h(5, i32), _h(8, i32), _h(8, i32), _h(8, f32), f32(1), 1, 8),
    }[name]
    kernel = getattr(results, name)
    ptx = nvrtc_compile(emit(kernel.ir(kernel.signature(args), 1, False), "cuda"), ARCH, CUPY_NVRTC_APPENDED)
    assert ".local" not in ptx and "call" not in ptx.replace(".callseq", ""), ptx
