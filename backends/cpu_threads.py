"""cpu_threads: blocks run concurrently on alpyka's own pool of threads (one thread per block,
nogil code).

How a launch runs (:meth:`CpuThreads.run_blocks`, :meth:`CpuThreads.launch_blocks`): a small
grid runs inline on the calling thread (the queue's worker, or the caller of a blocking queue),
exactly as on cpu_serial; a larger one is cut into chunks of consecutive blocks that the calling
thread and the pool's workers run concurrently. Each compiled kernel's launches are timed, and
its measured cost decides which (backends/_launch_cost.py; ``ALPYKA_THREADS_INLINE_US`` sets the
inline threshold by hand). The pool (backends/_thread_pool.py) is one per process, shared by
every queue and host thread: daemon workers that never hold up the end of the process; Ctrl-C
stops a launch between chunks, and the next launch waits for the chunks still running, so queue
order holds.
"""

from __future__ import annotations

import math
from typing import Any

from . import _launch_cost
from ._host import HostBackend
from ._host_slices import FIRST, run_sliced
from ._launch_cost import _run_measured, _tick
from ._thread_pool import _get_ident, _pool, main_ident

#: the hot path's test reads the pool's list of interrupted launches (one list for good)
_abandoned = _pool.abandoned


class CpuThreads(HostBackend):
    name = "cpu_threads"
    parallel_blocks = True

    def __init__(self) -> None:
        super().__init__()
        self.workers = _pool.cores  #: threads that run a launch's chunks (the caller included)

    def execution(self) -> str:
        """How launches run (``alpyka info``)."""
        pool = _pool
        n = pool.cores - 1
        inline_us = _launch_cost.INLINE_S * 1e6  # read at the call: calibration changes it
        head = (
            f"alpyka's own pool: {n} persistent daemon worker thread{'s' if n != 1 else ''} + the "
            "calling thread, each worker woken through its own lock"
        )
        if pool.calibrated:
            return (
                f"{head}; handing work to a worker and back costs {pool.overhead_s * 1e6:.0f} us here, "
                f"so grids measured below {inline_us:.0f} us run inline on the calling thread"
            )
        return (
            f"{head} (started by the first grid too big to run inline); grids measured below "
            f"{inline_us:.0f} us run inline on the calling thread (measured again once the pool runs)"
        )

    def launch_blocks(self, plan: Any, workdiv: Any, dyn: int, args: tuple) -> None:
        """A blocking queue's launch, on the calling thread (see the module doc)."""
        b, e = workdiv.blocks, workdiv.elements
        if len(b) == 1:
            nblocks, units = b[0], e[0]
        else:
            nblocks, units = math.prod(b), math.prod(e)
        # the hot path: a grid measured far below the threshold runs here, untimed
        if nblocks * units <= plan.inline_upto and _tick() & 31 and not _abandoned:
            plan.invoke(b, e, dyn, args)
            return
        nblocks, call = plan.pack(b, e, dyn, args)
        _run_measured(plan, nblocks, call, units)

    def run_blocks(self, plan: Any, nblocks: int, call: tuple, keep: tuple, units: int = 1) -> None:
        """Run blocks ``[0, nblocks)`` of ``plan`` packed as ``call`` (``units``: elements per
        block; a non-blocking queue's worker runs this): inline when small, otherwise in chunks
        on the pool and the calling thread (see the module doc)."""
        if nblocks * units <= plan.inline_upto and _tick() & 31 and not _abandoned:
            if nblocks > FIRST and _get_ident() == main_ident():  # a wait() on the main thread
                run_sliced(plan.fn, nblocks, call)  # Ctrl-C lands between slices
            else:
                plan.fn(0, nblocks, *call)
            return
        _run_measured(plan, nblocks, call, units)


_backend: CpuThreads | None = None


def load() -> CpuThreads:
    global _backend
    if _backend is None:
        _backend = CpuThreads()
    return _backend
