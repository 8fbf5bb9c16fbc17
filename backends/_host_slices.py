"""A CPU kernel's blocks run on the main thread in slices, so that Ctrl-C lands between two of
them: a numba call cannot be interrupted, and the main thread runs a kernel itself on a blocking
queue and when a ``wait()`` helps its queue's worker. A launch that would take more than about
:data:`SLICE_S` is cut into slices of about that long; a short one stays one call after its
first :data:`FIRST` blocks (a single long block still runs to its end)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: blocks of the first slice, which measures the kernel's pace
FIRST = 16
#: the longest a slice should run (s): Ctrl-C waits for at most about this long, plus one block
SLICE_S = 0.05

_MAIN = threading.main_thread().ident


def run_blocks(fn: Callable[..., None], nblocks: int, call: tuple) -> None:
    """``fn(0, nblocks, *call)``, in slices when it runs on the main thread."""
    if nblocks <= FIRST or threading.get_ident() != _MAIN:
        fn(0, nblocks, *call)
        return
    run_sliced(fn, nblocks, call)


def run_sliced(fn: Callable[..., None], nblocks: int, call: tuple) -> None:
    """Blocks ``[0, nblocks)`` of ``fn``: :data:`FIRST` of them, then slices sized from the pace
    measured so far, the rest in one call once it fits in :data:`SLICE_S`."""
    clock = time.perf_counter
    lo, size = 0, FIRST
    while lo < nblocks:
        hi = min(nblocks, lo + size)
        t0 = clock()
        fn(lo, hi, *call)
        per_block = max((clock() - t0) / (hi - lo), 1e-9)
        lo = hi
        left = nblocks - lo
        size = left if per_block * left <= SLICE_S else max(1, int(SLICE_S / per_block))
