"""Building generated C: readable build errors, and CUDA C -> PTX through NVRTC (no GPU needed).

A failed build raises :class:`KernelBuildError` whose message holds the compiler's log, the
generated source around each line the compiler complained about (marked ``>>``) and the kernel's
own Python file:line for it.
"""

from __future__ import annotations

import os
import re
from typing import Any

from portable import KernelBuildError  # defined in portable, raised (and imported from) here

from ._c_source import CSource

#: ``<source>:12:5: error`` (clang), ``error: /tmp/x.cl:12:5: ...`` (PoCL), ``k.cu(12): error`` (NVRTC)
_LINE_PATTERNS = (
    re.compile(r":(\d+):\d+:\s*(?:fatal\s+)?error"),
    re.compile(r"error:\s*\S+?:(\d+):\d+:"),
    re.compile(r"\((\d+)\):\s*(?:catastrophic\s+)?error"),
)


def error_lines(log: str) -> list[int]:
    """C line numbers the compiler's ``log`` reports errors on, in order, without repeats."""
    seen: list[int] = []
    for pat in _LINE_PATTERNS:
        for m in pat.finditer(log):
            n = int(m.group(1))
            if n not in seen:
                seen.append(n)
    return seen


def format_build_error(src: CSource, compiler: str, log: str, context: int = 3, marks: list[int] | None = None) -> str:
    """The message of a failed build: the log, the marked source and the kernel's lines (the C
    lines to mark: ``marks``, else those :func:`error_lines` finds in the log)."""
    bad = error_lines(log) if marks is None else marks
    lines = src.text.splitlines()
    parts = [f"{compiler} could not build kernel {src.kernel_name!r} ({src.source_file})"]
    where = []
    for n in bad:
        py = src.python_line(n)
        if py:
            where.append(f"{src.source_file}:{py}")
    if where:
        parts.append("kernel line(s): " + ", ".join(dict.fromkeys(where)))
    parts += ["", "compiler log:", log.strip() or "(empty)", ""]
    shown: set[int] = set()
    for n in bad or []:
        lo, hi = max(1, n - context), min(len(lines), n + context)
        if shown:
            parts.append("    ...")
        for i in range(lo, hi + 1):
            if i in shown:
                continue
            shown.add(i)
            mark = ">>" if i == n else "  "
            parts.append(f"{mark}{i:5d} | {lines[i - 1]}")
    if not bad:
        parts.append("generated source:")
        parts += [f"  {i:5d} | {line}" for i, line in enumerate(lines, 1)]
    return "\n".join(parts)


# ---------------------------------------------------------------------- NVRTC
#: options cupy appends to every NVRTC compile (cupy.cuda.compiler): float32 denormals flush to
#: zero in CUDA kernels. alpyka's own option is ``--std=c++17`` (added by :func:`nvrtc_compile`).
CUPY_NVRTC_APPENDED = ("-ftz=true",)


# ---------------------------------------------------------------------- float rules
# numpy's float bits by default: no compiler may fuse ``a*b + c`` into an FMA (one rounding, where
# numpy rounds twice) nor relax IEEE rules. ``@pk.kernel(fast_math=True)`` (CSource.fast_math)
# turns each compiler's fast math on. OpenCL's default is ``#pragma OPENCL FP_CONTRACT OFF`` in
# the source (backends._c_emit), the CPU backends' numba ``fastmath`` is off (numba emits no
# ``contract`` flags then) and the CUDA stand-in's C++ compiler runs with ``-ffp-contract=off``.
#: NVRTC (CUDA): contraction on by default (``--fmad=true``)
NVRTC_FLOAT_OPTIONS = {False: ("--fmad=false",), True: ("--use_fast_math",)}
#: hiprtc (HIP, clang): contracts ``a*b + c`` within a statement by default (``-ffp-contract=on``)
HIPRTC_FLOAT_OPTIONS = {False: ("-ffp-contract=off",), True: ("-ffast-math",)}
#: OpenCL build options (the pragma is in the source)
OPENCL_FLOAT_OPTIONS = {False: (), True: ("-cl-fast-relaxed-math",)}
#: what ``-cl-fast-relaxed-math`` is made of (OpenCL C spec, 5.8.4.2: it sets these and
#: ``__FAST_RELAXED_MATH__``), less what a runtime adds to it on its own: Intel's CPU runtime
#: swaps ``sqrt`` for ``native_sqrt`` under it, and on a CPU without AVX-512 its builtin library
#: has no ``native_sqrt(double16)`` for the 16-wide sub-groups of kernels without warps, so a
#: float64 kernel with a square root fails to link. A fast-math build that fails where these build uses these
#: (``backends._opencl_launch.build_program``): FMA contraction, reassociation, no signed zeros,
#: no NaN or infinity, as before; only the float64 ``sqrt`` stays the correctly rounded one
#: (float32 ``sqrt`` may be 3 ulp off in OpenCL under either, as in any fast-math build).
OPENCL_FAST_MATH_PARTS = (
    "-cl-mad-enable",
    "-cl-no-signed-zeros",
    "-cl-unsafe-math-optimizations",
    "-cl-finite-math-only",
)


def float_options(dialect: str, fast_math: bool) -> tuple[str, ...]:
    """The compiler options of the float rules for a source of ``dialect`` ("cuda" for NVRTC,
    "hip" for hiprtc, "opencl")."""
    table = {"cuda": NVRTC_FLOAT_OPTIONS, "hip": HIPRTC_FLOAT_OPTIONS, "opencl": OPENCL_FLOAT_OPTIONS}[dialect]
    return table[bool(fast_math)]


def nvrtc_available() -> str | None:
    """None when NVRTC can be used here, else the reason."""
    try:
        from cuda.bindings import nvrtc

        err, *_ = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return f"nvrtcVersion failed: {err}"
    except Exception as exc:  # noqa: BLE001 - ImportError, missing shared library...
        return f"cuda.bindings.nvrtc is not usable: {exc}"
    return None


def _check(result: Any, what: str) -> Any:
    from cuda.bindings import nvrtc

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise KernelBuildError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


_PTX: dict[tuple[str, str, tuple[str, ...]], str] = {}  # (text, arch, options) -> PTX, this process


def nvrtc_compile(src: CSource, arch: str = "compute_90", options: tuple[str, ...] = ()) -> str:
    """PTX of a CUDA-dialect source through NVRTC; KernelBuildError with the marked source else.
    A text compiled before with the same arch and options is not compiled again (the CI guard
    and the cupy stand-in compile the same sources)."""
    key = (src.text, arch, tuple(options))
    ptx = _PTX.get(key)
    if ptx is None:
        ptx = _PTX[key] = _nvrtc_compile(src, arch, options)
    return ptx


def nvrtc_check(src: CSource, arch: str = "compute_90", options: tuple[str, ...] = ()) -> None:
    """Compile a CUDA-dialect source through NVRTC only to see that it compiles (KernelBuildError
    as :func:`nvrtc_compile`), unless a trusted marker of this cache says this exact text, NVRTC,
    arch and options compiled before (``backends._check_markers``: processes share them)."""
    from . import _check_markers

    name = _check_markers.digest(nvrtc_identity(), arch, *options, f"{src.kernel_name or 'kernel'}.cu", src.text)
    if _check_markers.passed("nvrtc", name):
        return
    nvrtc_compile(src, arch, options)  # (a text this process compiled is not compiled again either)
    _check_markers.record("nvrtc", name)


_identity: list[str] = []


def nvrtc_identity() -> str:
    """What decides NVRTC's result besides the source and options: its version, its packages'
    versions and the library file this process loaded (path, size, modification time)."""
    if _identity:
        return _identity[0]
    from importlib import metadata

    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    parts = [f"nvrtc {major}.{minor}"]
    for dist in ("cuda-bindings", "nvidia-cuda-nvrtc"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} none")
    parts += _loaded_libraries("libnvrtc")
    _identity.append(", ".join(parts))
    return _identity[0]


def _loaded_libraries(stem: str) -> list[str]:
    """``path size mtime_ns`` of each file named ``stem*`` this process has mapped (Linux)."""
    found = []
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({line.split(None, 5)[-1].strip() for line in fh if stem in line})
    except OSError:
        return ["maps unreadable"]
    for path in paths:
        if os.path.basename(path).startswith(stem):
            try:
                st = os.stat(path)
            except OSError:
                continue
            found.append(f"{path} {st.st_size} {st.st_mtime_ns}")
    return found


def _nvrtc_compile(src: CSource, arch: str, options: tuple[str, ...]) -> str:
    from cuda.bindings import nvrtc

    name = f"{src.kernel_name or 'kernel'}.cu".encode()
    prog = _check(nvrtc.nvrtcCreateProgram(src.text.encode(), name, 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", *[o.encode() for o in options]]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffer: it must be mutable. (``b" " * 1`` is CPython's shared
        # one-byte object; writing a NUL into it corrupts every b" " of the process.)
        log = bytearray(size)
        _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        log_text = bytes(log).rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise KernelBuildError(format_build_error(src, f"NVRTC ({arch})", log_text))
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx = bytearray(size)
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return bytes(ptx).rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
