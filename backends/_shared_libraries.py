"""Shared libraries alpyka compiles itself (the GPU emulator's kernels, the native OpenCL launch):
built once into a subdirectory of alpyka's private cache, tagged, and verified before each load.

A library is cached as its bytes, a mark and its tag (HMAC under the cache's per-user secret over
its name and bytes, :mod:`portable.compiler.trust`). It is loaded from the cache only when the
directory is private to this user along its path and the tag matches: a changed, swapped,
truncated or appended-to file is built again (one warning). A cache that is not private, cannot
be written or is full: the library is built in a private temporary directory and loaded from
there (one warning naming ``ALPYKA_CACHE_DIR``). One process at a time builds a library (a lock
file beside it): another waits, then loads what the first cached.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ._compiler_run import run_compiler

T = TypeVar("T")

TAG_MARK = b"\0alpyka-tag\0"  # then the 32-byte tag: the last bytes of a cached library
#: what a compiler or linker says when it cannot write its output (the cache, not the source)
_WRITE_FAILURES = tuple(
    os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG, errno.EPERM)
)


def compiler_version(name: str) -> tuple[str, str] | str:
    """``(path, version line)`` of the compiler ``name`` found on PATH, else why not (a line for
    the report of every compiler tried)."""
    path = shutil.which(name)
    if path is None:
        return f"{name}: not found"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{name}: {type(exc).__name__}: {exc}"
    return path, (out.splitlines() or ["?"])[0].strip()


class Library(NamedTuple):
    """What to build: the compiler and its flags (the source and ``-o`` output follow), the
    source's text and file name, the library's name in the cache, what a warning calls it, and
    how it is loaded (``ctypes.CDLL``, an extension module's loader)."""

    command: list[str]
    unit: str
    source_name: str
    lib_name: str
    what: str
    load: Callable[[Path], Any]


class LibraryCache(NamedTuple):
    """A private directory of the cache, and the cache's secret (what tags its libraries)."""

    where: Path
    key: bytes


def library_cache(subdir: str) -> LibraryCache | None:
    """``$ALPYKA_CACHE_DIR/<subdir>`` and the cache's secret when the cache directory is private to
    this user along its path and can be written; None after one warning else."""
    from portable.compiler import private_cache, trust, warn_cache_not_private, warn_cache_unwritable

    root = private_cache()
    if root is None:
        return None
    where = root / subdir
    try:
        trust.make_private_dirs(where)
        key = trust.user_key(root)
    except OSError as exc:
        warn_cache_unwritable(where, exc)
        return None
    if not trust.private_dir(where):
        warn_cache_not_private(where, "another user's, writable by others, or a link")
        return None
    return LibraryCache(where, key)


def load_cached(cache: LibraryCache, lib_name: str, what: str, load: Callable[[Path], T]) -> T | None:
    """``load(path)`` of the cached library ``lib_name`` when it is this user's private file ending
    in its own tag; None when it is missing, or (after one warning calling it ``what``) not the
    library alpyka built. Between the check and the load only this user's processes could change
    it (the directory and the file are private), and alpyka replaces a library, never rewrites
    it in place."""
    from portable.compiler import trust, warn_cache_once

    path = cache.where / lib_name
    if not os.path.lexists(path):
        return None
    data = trust.read_private_file(path)
    n = len(TAG_MARK) + 32
    if data is not None and data[-n:-32] == TAG_MARK and trust.tagged(cache.key, path.name, data[:-n], data[-32:]):
        return load(path)
    warn_cache_once(
        what,
        f"{what} {path} is not the one alpyka built there (changed, swapped, truncated, appended to, "
        "or not this user's own file): built again",
    )
    return None


def _compile_in(where: Path, lib: Library) -> tuple[Path | None, str]:
    """Compile ``lib`` (its source written into ``where``) into ``where/library.so``: (the
    library, "") or (None, the compiler's log)."""
    src = where / lib.source_name
    src.write_text(lib.unit)
    out = where / "library.so"
    done = run_compiler([*lib.command, str(src), "-o", str(out)], timeout=600)  # a Ctrl-C leaves no temporaries
    return (out, "") if done.returncode == 0 else (None, done.stderr)


def build_once(lib: Library, cache: LibraryCache | None) -> tuple[Any, Path, str]:
    """``(lib.load(library), its path, "")``, the library built or loaded from what another
    process cached meanwhile; ``(None, path, the compiler's log)`` on a compile error."""
    from portable.compiler import build_lock

    if cache is None:
        return build_library(lib, cache)
    with build_lock(cache.where / f"{lib.lib_name}.lock"):
        loaded = load_cached(cache, lib.lib_name, lib.what, lib.load)
        if loaded is not None:
            return loaded, cache.where / lib.lib_name, ""
        return build_library(lib, cache)


def build_library(lib: Library, cache: LibraryCache | None) -> tuple[Any, Path, str]:
    """Build the library, load it from the private directory it was built in (a unique path: the
    loader never hands back a library of the same name loaded before), and move it, tagged, into
    the cache. Where the cache cannot take it (not private, read-only, full) it is built in a
    private temporary directory instead, with one warning."""
    from portable.compiler import trust, warn_cache_unwritable, write_atomic

    if cache is not None:
        try:
            with tempfile.TemporaryDirectory(dir=cache.where) as tmp:
                out, log = _compile_in(Path(tmp), lib)
                if out is not None:
                    loaded = lib.load(out)
                    data = out.read_bytes()
                    tagged = data + TAG_MARK + trust.tag(cache.key, lib.lib_name, data)
                    write_atomic(cache.where / lib.lib_name, tagged)  # atomic: another process loads either file
                    return loaded, cache.where / lib.lib_name, ""
                if not any(w in log for w in _WRITE_FAILURES):
                    return None, cache.where / lib.lib_name, log
                raise OSError(next(w for w in _WRITE_FAILURES if w in log))
        except OSError as exc:
            warn_cache_unwritable(cache.where, exc)
    with tempfile.TemporaryDirectory(prefix="alpyka-library-") as tmp:  # 0700, this user's
        out, log = _compile_in(Path(tmp), lib)
        return (lib.load(out) if out is not None else None), Path(tmp) / "library.so", log
