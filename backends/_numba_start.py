"""The CPU backends' first numba compile in a process without the third-party numba extensions:
alpyka's generated code uses numpy arrays and scalars only, so the ``numba_extensions`` entry
points of installed packages (awkward's imports awkward: ~0.15 s of CPU) are left to the
process's next numba compile, the user's own, which loads them as numba always does."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def extensions_deferred() -> Iterator[None]:
    """Compile (or load from numba's cache) inside this block without running numba's extension
    entry points, where no numba compile of this process ran them yet. numba's compiler lock is
    held throughout, so no other thread compiles meanwhile; afterwards numba's flag says "not
    initialised" again, and the next compile (of any code) initialises the extensions."""
    try:
        from numba.core import entrypoints
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:  # a numba without these: its own start-up, unchanged
        yield
        return
    if getattr(entrypoints, "_already_initialized", True):
        yield
        return
    with global_compiler_lock:  # re-entrant: numba takes it again to compile
        if entrypoints._already_initialized:  # noqa: SLF001 - numba's flag, no public switch
            yield
            return
        entrypoints._already_initialized = True  # noqa: SLF001
        try:
            yield
        finally:
            entrypoints._already_initialized = False  # noqa: SLF001


__all__ = ["extensions_deferred"]
