"""Markers of sources a compile check passed, shared by the processes that use one kernel cache.

A check that compiles a kernel only to see that it compiles (the suite's NVRTC check of every
OpenCL kernel's CUDA text) writes a marker once the compile succeeded; another process (a
pytest-xdist worker, a script the suite runs, the next run) finds it and does not compile the
same source again. A marker only ever skips a compile that passed before: it is named by the
digest of everything that decides the result (the exact source, the compiler's version, the
target and the options), a failure never leaves one, and a marker is trusted only where the cache
is private to this user along its whole path (``portable.compiler.private_cache``) and the file
is this user's, writable by no one else, not a link, and holds the tag of its digest under the
cache's per-user secret (``portable.compiler.trust``): a file copied in, made by anyone without
the secret, or left by an older layout compiles again.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from portable.compiler import private_cache, trust, write_atomic


def digest(*parts: str) -> str:
    """The marker name of a check: sha256 over ``parts`` (each NUL-separated)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _where(kind: str) -> tuple[Path, bytes] | None:
    """The marker directory of checks of ``kind`` and the cache's secret; None where the cache is
    not private (then nothing is read or written)."""
    root = private_cache()
    if root is None:
        return None
    try:
        key = trust.user_key(root)
    except OSError:
        return None
    return root / f"{kind}-checked", key


def passed(kind: str, name: str) -> bool:
    """Whether a trusted marker says the check ``kind`` of digest ``name`` passed before."""
    found = _where(kind)
    if found is None:
        return False
    folder, key = found
    if not trust.private_dir(folder):
        return False
    data = trust.read_private_file(folder / f"{name}.ok", 64)
    return data is not None and trust.tagged(key, name, name.encode(), data)


def record(kind: str, name: str) -> None:
    """Leave the marker of a check that passed (nothing where the cache cannot take it)."""
    found = _where(kind)
    if found is None:
        return
    folder, key = found
    with contextlib.suppress(OSError):
        trust.make_private_dirs(folder)
        if trust.private_dir(folder):
            write_atomic(folder / f"{name}.ok", trust.tag(key, name, name.encode()))
