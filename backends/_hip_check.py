"""HIP text compiled for AMD GPUs (gfx90a, gfx942) without an AMD GPU or ROCm, from pip parts only.

``ALPYKA_CHECK_HIP=1`` in the test suite (alpyka_testing/compile_checks.py): every kernel it builds
for a device also has its HIP text compiled to AMD code objects, so a mistake only HIP's compiler
sees fails with the compiler's message at the kernel's Python line (``KernelBuildError``), as
``ALPYKA_CHECK_CUDA=1`` does with NVRTC. Every text is compiled for gfx90a, and for gfx942 too
where it uses what the compile treats per target (:func:`targets_for`: atomics, fences, barriers,
warp functions, shared memory, target builtins; ``ALPYKA_CHECK_HIP_ALL_TARGETS=1``: every text).

The toolchain (docs/backends.md, "Checking the HIP text"; made from pip parts and verified by
backends/_hip_toolchain.py): ``zig clang`` with HIP's headers and ROCm's device libraries, and
``hip_runtime.h`` precompiled per target. Here: where it lives (``$ALPYKA_CACHE_DIR/hip-toolchain``,
one process of a test run building it under a lock, the others waiting), its set-up once per
process (verified and smoke-tested, else built again), and each text's compile. A source that
compiled for a target leaves a marker named by the digest of (toolchain, target, options, text); a
failure is never cached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from portable import KernelBuildError
from portable.compiler import trust

from ._c_build import float_options, format_build_error
from ._c_source import CSource
from ._compiler_run import run_compiler
from ._hip_toolchain import TARGETS, TRITON, Toolchain, Unavailable, build, parts, pch, verify  # noqa: F401 (TRITON: this module's name before the split)
from ._hip_toolchain import key as toolchain_key

ENV_CHECK = "ALPYKA_CHECK_HIP"
# TARGETS (the toolchain's, imported above: gfx90a, gfx942): every text is compiled for the first,
# a text that uses what differs by target for both (:func:`targets_for`)
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
#: ELF ``e_flags`` machine (EF_AMDGPU_MACH_AMDGCN_*) of each target; ``e_machine`` is EM_AMDGPU
EF_MACH = {"gfx90a": 0x03F, "gfx942": 0x04C}
EM_AMDGPU = 224
_lock = threading.Lock()
_state: dict[str, object] = {}  # "toolchain" -> Toolchain, or "reason" -> why it is unavailable
_checked: set[str] = set()  # digests compiled (or found compiled) by this process
_warned: list[bool] = []


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


def _run(tc: Toolchain, text: str, name: str, arch: str, options: tuple[str, ...]) -> tuple[bool, bytes | str]:
    """Compile ``text`` as file ``name`` in a private temporary directory (so the log names the
    file alone): (True, the code object) or (False, the compiler's log)."""
    with tempfile.TemporaryDirectory(prefix="alpyka-hip-") as tmp:
        Path(tmp, name).write_text(text)
        header = ["-Xclang", "-include-pch", "-Xclang", str(pch(tc, arch, "-ffast-math" in options))]
        cmd = tc.command(arch, options) + [*header, "-c", name, "-o", "kernel.co"]
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


def _digest(tc: Toolchain, arch: str, options: tuple[str, ...], text: str) -> str:
    return hashlib.sha256("\0".join([tc.key, arch, *options, text]).encode()).hexdigest()


def _marker(tc: Toolchain, digest: str) -> Path:
    return tc.home.parent / "objects" / f"{digest}.ok"


def _marked(tc: Toolchain, digest: str) -> bool:
    path = _marker(tc, digest)
    try:
        st = os.lstat(path)
        return _private(path.parent) and _mine(st) and stat.S_ISREG(st.st_mode) and path.read_text() == digest
    except OSError:
        return False


def _mark(tc: Toolchain, digest: str) -> None:
    where = _marker(tc, digest).parent
    with contextlib.suppress(OSError):
        where.mkdir(mode=0o700, exist_ok=True)
        if _private(where):
            fd, tmp = tempfile.mkstemp(dir=where)
            with os.fdopen(fd, "w") as fh:
                fh.write(digest)
            os.replace(tmp, _marker(tc, digest))


# one check of "this user's, writable by no one else" for every cache: portable.compiler.trust
_mine = trust.mine
_private = trust.private_dir


# ---------------------------------------------------------------------- the toolchain
def toolchain() -> Toolchain:
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


def _root() -> Path:
    from portable.compiler import cache_dir

    return cache_dir() / "hip-toolchain"


def _setup() -> Toolchain:
    zig, resources, versions = parts()
    root = _root()
    key = toolchain_key(versions, resources)
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
        tc = Toolchain(zig, resources, home, key)
        if verify(home) and _smoke(tc) is None:
            return tc
        if home.exists():
            shutil.rmtree(home, ignore_errors=True)
        build(tc, root)
        if not verify(home):
            raise Unavailable(f"the HIP toolchain built in {home} changed under alpyka (owner, mode or bytes)")
        failed = _smoke(tc)
        if failed is not None:
            raise Unavailable(f"the HIP toolchain in {home} cannot compile a kernel: {failed}")
        return tc


def _smoke(tc: Toolchain) -> str | None:
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
