"""cpu_threads: blocks run concurrently on alpyka's own pool of threads (one thread per block,
nogil code).

How a launch runs (:meth:`CpuThreads.run_blocks`):

* **Small grids run inline**, on the calling thread (the queue's worker, or the caller of a
  blocking queue), exactly as on cpu_serial: waking a thread costs more than they do. Launches
  are timed (two ``perf_counter`` calls), so each compiled kernel has a measured cost per
  element, per size class (the bit length of blocks x elements); a grid predicted to cost less
  than :data:`INLINE_S` runs inline (below a quarter of it untimed, but for one launch in 32).
  :data:`INLINE_S` is :data:`INLINE_FACTOR` times the measured cost of handing work to a worker
  and back (measured once, by a launch that finds the pool idle; ``ALPYKA_THREADS_INLINE_US``
  overrides it). The first
  launch of a kernel at a size runs a short probe (1, 2, 4, ... of its blocks) inline to
  measure it.
* **Larger grids** are cut into contiguous chunks of blocks (one per thread; up to
  :data:`CHUNKS_PER_WORKER` per thread of at least :data:`CHUNK_MIN_S` each; more where a chunk
  would exceed :data:`CHUNK_MAX_S`, at most :data:`MAX_CHUNKS_PER_WORKER` per thread) that the
  calling thread and the pool's workers take in order; the compiled code releases the GIL, so
  the chunks run concurrently. A size whose parallel launches do not beat the inline time by
  :data:`PARALLEL_GAIN` runs inline (re-tried now and then).

The pool (:class:`_Pool`, one per process, shared by every queue and host thread):

* ``cores - 1`` persistent **daemon** threads (the calling thread is the last core's worker);
  an idle worker sleeps on its own lock, which a launch releases to wake it (one futex wake);
  nothing joins the workers at exit, so a running chunk never holds up the end of the process.
* Nothing refuses work at shutdown: launches keep working while ``threading`` waits for
  non-daemon user threads. Once the interpreter runs its ``atexit`` hooks (every user thread
  has ended, nothing waits for the queues any more), a queue's launch still waiting for its
  chunks, or started later by a queue worker, is given up (an error that queue reports), so the
  queue workers stop at once; a launch from an ``atexit`` hook itself (the main thread) still
  runs.
* Several host threads launching at once share the workers: a launch wakes workers only while
  the callers plus the awake workers are fewer than the cores, and a worker goes back to
  sleep when they are more. Every caller takes the chunks of its own launch until none is
  left, so a launch never waits for a worker that is busy elsewhere or asleep (no deadlock,
  also for a launch made from a pool thread, which runs inline).
* Ctrl-C: the calling thread notices it between chunks (:data:`CHUNK_MAX_S` apart once the
  kernel was measured, unless its blocks are longer) and while it waits; the launch's remaining chunks are skipped and
  ``KeyboardInterrupt`` propagates. Chunks still running on workers finish in the background;
  the next cpu_threads launch waits for them first, so queue order holds.
* After ``fork`` the child starts with a fresh, empty pool.

Nothing here runs from the garbage collector (no finalizers), and no lock is held while a
kernel runs.
"""

from __future__ import annotations

import _thread
import itertools
import math
import os
import statistics
import threading
import time
from collections import deque
from typing import Any

from portable.spi import before_workers_stop

from ._host import HostBackend

#: at most this much measured work (seconds) per chunk of a parallel launch (Ctrl-C latency)
CHUNK_MAX_S = 5e-3
#: beyond one chunk per thread, at least this much work per chunk: each chunk is one call of the
#: compiled code, which needs the GIL on its way in and out (contended between the threads)
CHUNK_MIN_S = 1e-3
#: chunks per thread of a parallel launch (so a core busy elsewhere does not hold it up), unless
#: CHUNK_MAX_S needs more; never more than MAX_CHUNKS_PER_WORKER
CHUNKS_PER_WORKER = 4
MAX_CHUNKS_PER_WORKER = 256
#: grids predicted to cost less than this (seconds) run inline: INLINE_FACTOR times the cost of
#: handing work to a worker, measured when the pool starts (ALPYKA_THREADS_INLINE_US overrides)
INLINE_S = 60e-6
INLINE_FACTOR = 2.5
#: bounds of the measured INLINE_S, and how long a calibration round waits for its worker
INLINE_MIN_S, INLINE_MAX_S = 20e-6, 1e-3
CALIBRATE_WAIT_S = 0.05
#: the first launch of a kernel at a size runs a probe inline, timed: 1, 2, 4, ... blocks until
#: PROBE_S of work or 1/2**PROBE_SHIFT of the grid (grids of fewer than 2**(PROBE_SHIFT+1)
#: blocks are not probed: their first launch is parallel)
PROBE_SHIFT = 5
PROBE_S = 50e-6
#: weight of the newest measurement in a kernel's running estimates
EMA = 0.25
#: a size whose parallel launches took more than this fraction of the inline time it would
#: have taken runs inline (re-tried in parallel every RETRY launches)
PARALLEL_GAIN = 0.9
RETRY = 16

_perf = time.perf_counter
_get_ident = _thread.get_ident
_MAIN = threading.main_thread().ident
_EXIT_MESSAGE = ("cpu_threads: kernel launch given up: the program ended (atexit) without waiting "
                 "for its queue")


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _release(lock: Any) -> None:
    """Release ``lock`` unless it is released already (completion and exit may both try)."""
    try:
        lock.release()
    except RuntimeError:
        pass


class _Job:
    """One parallel launch: chunk ``c`` is blocks ``[bounds[c], bounds[c+1])``."""

    __slots__ = ("fn", "call", "bounds", "chunks", "take", "fin", "done", "complete", "cancel",
                 "errors", "busy", "active")

    def __init__(self, fn: Any, call: tuple, bounds: list[int]) -> None:
        self.fn = fn
        self.call = call
        self.bounds = bounds
        self.chunks = len(bounds) - 1
        self.take = itertools.count().__next__  # atomic under the GIL: each chunk is taken once
        self.fin = itertools.count(1).__next__  # chunks finished (run or skipped)
        self.done = _thread.allocate_lock()  # released when the last chunk finished
        self.done.acquire()
        self.complete = False
        self.cancel = False  # set on an error, Ctrl-C or exit: the chunks not started are skipped
        self.errors: list[BaseException] = []
        self.busy: list[float] = []  # seconds of kernel time, one entry per participating thread
        self.active: set[int] = set()  # pool workers inside run() (never the caller)

    def run(self) -> None:
        """Take chunks and run them until none is left (the caller and workers alike)."""
        take, chunks, bounds, fn, call = self.take, self.chunks, self.bounds, self.fn, self.call
        busy = 0.0
        try:
            while True:
                c = take()
                if c >= chunks:
                    return
                if c == chunks - 1:  # the last chunk is taken: other workers move on
                    _pool.close(self)
                if not self.cancel:
                    t0 = _perf()
                    try:
                        fn(bounds[c], bounds[c + 1], *call)
                    except BaseException as exc:  # raised by the caller once all chunks ended
                        self.errors.append(exc)
                        self.cancel = True
                    busy += _perf() - t0
                if self.fin() == chunks:
                    self.complete = True
                    _release(self.done)
        finally:
            self.busy.append(busy)


class _Pool:
    """The persistent daemon workers shared by every cpu_threads launch (see the module doc)."""

    def __init__(self) -> None:
        self.cores = _cores()
        self._reset()

    def _reset(self) -> None:
        self.mutex = _thread.allocate_lock()  # guards jobs/idle hand-over; never held over a kernel
        self.start_lock = _thread.allocate_lock()
        self.jobs: deque[_Job] = deque()  # launches with chunks not yet taken, oldest first
        self.idle: list[Any] = []  # wake locks of sleeping workers
        self.inflight: set[_Job] = set()  # parallel launches whose caller has not returned
        # interrupted launches whose chunks may still run (one list for good: the hot path
        # holds it)
        self.abandoned: list[_Job] = getattr(self, "abandoned", [])
        self.abandoned.clear()
        self.threads: set[int] = set()  # idents of the workers
        self.nworkers = 0
        self.started = False
        self.calibrated = False
        self.calibrate_lock = _thread.allocate_lock()
        self.exiting = False
        self.overhead_s = float("nan")

    # ------------------------------------------------------------------ workers
    def start(self) -> None:
        with self.start_lock:
            if self.started:
                return
            self.started = True
            for i in range(self.cores - 1):
                wake = _thread.allocate_lock()
                wake.acquire()
                t = threading.Thread(target=self._worker, args=(wake,), name=f"alpyka-blocks-{i}", daemon=True)
                try:
                    t.start()
                except RuntimeError:  # no new threads (interpreter finalising): launches run inline
                    break
                self.nworkers += 1

    def _worker(self, wake: Any) -> None:
        me = _get_ident()
        self.threads.add(me)
        mutex, jobs, idle = self.mutex, self.jobs, self.idle
        while True:
            with mutex:
                # sleep when there is nothing to do, or when the callers already fill the cores
                job = jobs[0] if jobs and len(self.inflight) + self.nworkers - len(idle) <= self.cores else None
                if job is None:
                    idle.append(wake)
            if job is None:
                wake.acquire()  # released by the launch that takes it off ``idle``
                continue
            job.active.add(me)
            try:
                job.run()
            finally:
                job.active.discard(me)
                del job

    def close(self, job: _Job) -> None:
        """No chunk of ``job`` is left to take: drop it from the open launches."""
        try:
            self.jobs.remove(job)
        except ValueError:
            pass

    def submit(self, job: _Job, helpers: int | None = None) -> None:
        """Open ``job`` to the workers, waking as many as it can use (or ``helpers``) and the
        cores allow."""
        self.inflight.add(job)
        if self.exiting and _get_ident() != _MAIN:  # at_exit ran before the add: give it up too
            job.cancel = True
        with self.mutex:
            self.jobs.append(job)
            awake = self.nworkers - len(self.idle)
            n = job.chunks - 1 if helpers is None else helpers
            n = min(len(self.idle), n, self.cores - len(self.inflight) - awake)
            wake = [self.idle.pop() for _ in range(max(0, n))]
        for w in wake:
            w.release()

    def calibrate(self, rounds: int = 15) -> None:
        """Measure what handing work to a worker costs: a one-chunk launch that does nothing,
        run by a worker while the caller sleeps (a wake-up each way, the GIL hand-over); a grid
        whose work is below INLINE_FACTOR times that runs faster inline. Done by a launch that
        finds the pool idle (other launches would be measured too, or keep the worker away);
        if that changes, or the worker does not come, it is left to a later launch."""
        if not self.calibrate_lock.acquire(False):
            return
        try:
            def noop(lo: int, hi: int) -> None:
                return None

            times = []
            for _ in range(rounds):
                if self.inflight or self.calibrated:
                    return
                t0 = _perf()
                job = _Job(noop, (), [0, 1])
                try:
                    self.submit(job, helpers=1)
                    came = job.complete or job.done.acquire(timeout=CALIBRATE_WAIT_S)
                    if not came:
                        job.run()  # the worker did not come: finish the (empty) launch here
                        if not job.complete:
                            job.done.acquire()
                finally:
                    self.inflight.discard(job)
                if not came:
                    return
                times.append(_perf() - t0)
            self.overhead_s = statistics.median(times)
            self.calibrated = True
            if "ALPYKA_THREADS_INLINE_US" not in os.environ:
                _set_inline_s(min(INLINE_MAX_S, max(INLINE_MIN_S, INLINE_FACTOR * self.overhead_s)))
        finally:
            self.calibrate_lock.release()

    # ------------------------------------------------------------------ launches
    def run_job(self, job: _Job) -> None:
        """Open ``job`` to the workers and take part in it until every chunk finished; raise its
        first error. Ctrl-C skips the chunks not started and leaves those running to finish in
        the background."""
        try:
            self.submit(job)
            job.run()
            if not job.complete:
                job.done.acquire()  # interruptible; released by the last chunk (or at exit)
        except BaseException:
            self.abandon(job)
            raise
        finally:
            self.inflight.discard(job)
        if job.errors:
            raise job.errors[0]
        if not job.complete or job.cancel:
            raise RuntimeError(_EXIT_MESSAGE)

    def abandon(self, job: _Job) -> None:
        job.cancel = True
        self.close(job)
        self.inflight.discard(job)
        self.abandoned.append(job)

    def drain(self) -> None:
        """Wait until no worker runs a chunk of an abandoned launch (queue order after Ctrl-C)."""
        while self.abandoned:
            job = self.abandoned[0]
            while job.active and not self.exiting:
                time.sleep(0.0005)
            try:
                self.abandoned.remove(job)
            except ValueError:
                pass

    def at_exit(self) -> None:
        """Every user thread has ended: give up the queues' launches still waiting for chunks
        (and, from now on, those a queue worker starts; the main thread's, made by later atexit
        hooks, still run)."""
        self.exiting = True
        for job in list(self.inflight):
            job.cancel = True
            _release(job.done)

    def after_fork(self) -> None:
        """The child of a fork has none of the workers: start again from nothing."""
        global _MAIN
        _MAIN = _get_ident()  # the forking thread is the child's main thread
        self._reset()


_pool = _Pool()
before_workers_stop(_pool.at_exit)  # before the queue workers are joined at exit
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.after_fork)

#: per compiled kernel and size class (bit length of blocks x elements): seconds per element
#: when run inline, and how long its parallel launches took relative to that
_cost: dict[tuple[Any, int], float] = {}
_ratio: dict[tuple[Any, int], float] = {}
_tick = itertools.count().__next__  # every 32nd launch of a tiny grid is timed too
_abandoned = _pool.abandoned


def _set_inline_s(seconds: float) -> None:
    global INLINE_S, _UNTIMED_S
    INLINE_S = seconds
    _UNTIMED_S = seconds / 4  # far below the threshold: run without timing


_set_inline_s(float(os.environ["ALPYKA_THREADS_INLINE_US"]) * 1e-6
              if "ALPYKA_THREADS_INLINE_US" in os.environ else INLINE_S)


def _timed(fn: Any, lo: int, hi: int, call: tuple, key: tuple, units: int, est: float | None) -> float:
    """Run blocks ``[lo, hi)`` inline, timed; returns the updated cost estimate of ``key``."""
    t0 = _perf()
    fn(lo, hi, *call)
    est = _update(est, (_perf() - t0) / ((hi - lo) * units))
    _cost[key] = est
    return est


def _update(est: float | None, per: float) -> float:
    """A cost estimate after measuring ``per``: noise (preemption, page faults, a cold cache)
    only ever adds time, so a faster measurement is taken as it is, a slower one in part."""
    return per if est is None or per < est else est + (per - est) * EMA


def _probe(fn: Any, limit: int, call: tuple, key: tuple, units: int) -> tuple[int, float]:
    """Run blocks 1, 2, 4, ... inline until PROBE_S of work or ``limit`` blocks ran (so a slow
    kernel's probe is short too); returns the blocks run and the estimate they give."""
    fn(0, 0, *call)  # no block: numba compiles (or loads) the code for these types, untimed
    lo, step, spent = 0, 1, 0.0
    while True:
        hi = min(lo + step, limit)
        t0 = _perf()
        fn(lo, hi, *call)
        spent += _perf() - t0
        lo = hi
        if spent >= PROBE_S or lo >= limit:
            break
        step *= 2
    est = spent / (lo * units)
    _cost[key] = est
    return lo, est


def _note(plan: Any, total: int, est: float) -> None:
    """Keep ``plan.inline_upto`` (the hot path's test) at the edge of the grids measured far
    below the inline threshold, as launches of the plan are measured."""
    if est * total < _UNTIMED_S:
        if total > plan.inline_upto:
            plan.inline_upto = total
    elif total <= plan.inline_upto:
        plan.inline_upto = total - 1


def _run_measured(plan: Any, nblocks: int, call: tuple, units: int) -> None:
    """The launches that :class:`CpuThreads` does not run inline untimed."""
    pool = _pool
    if pool.abandoned:
        pool.drain()
    if pool.exiting and _get_ident() != _MAIN:
        raise RuntimeError(_EXIT_MESSAGE)  # a queue's launch after the program ended: no one waits
    fn = plan.fn
    if nblocks <= 1 or pool.cores <= 1 or _get_ident() in pool.threads:
        fn(0, nblocks, *call)
        return
    total = nblocks * units
    key = (fn, total.bit_length())
    est = _cost.get(key)
    lo = 0
    if est is None and nblocks >> (PROBE_SHIFT + 1):  # never measured at this size: probe
        lo, est = _probe(fn, nblocks >> PROBE_SHIFT, call, key, units)
    n = nblocks - lo
    if est is not None:
        work = est * n * units
        ratio = _ratio.get(key)
        if work < INLINE_S or (ratio is not None and ratio > PARALLEL_GAIN and _tick() % RETRY):
            _note(plan, total, _timed(fn, lo, nblocks, call, key, units, est))
            return
    else:
        work = 0.0  # a few blocks of unknown cost: one chunk per thread
    if not pool.started:
        pool.start()
    if not pool.nworkers:
        fn(lo, nblocks, *call)
        return
    if not pool.calibrated:
        pool.calibrate()
    cores = pool.cores
    chunks = max(cores, min(cores * CHUNKS_PER_WORKER, int(work / CHUNK_MIN_S)), int(work / CHUNK_MAX_S) + 1)
    chunks = min(n, cores * MAX_CHUNKS_PER_WORKER, -(-chunks // cores) * cores)  # even shares
    job = _Job(fn, call, [lo + n * c // chunks for c in range(chunks + 1)])
    t0 = _perf()
    pool.run_job(job)
    wall = _perf() - t0
    # the threads' summed chunk times bound the inline cost from above (they contend for memory
    # and the GIL): they may lower the estimate, never raise it (that would favour this path)
    per = sum(job.busy) / (n * units)
    if est is None or per < est:
        est = _cost[key] = per
    r = wall / (est * n * units)
    old = _ratio.get(key)
    _ratio[key] = r if old is None else old + (r - old) * EMA
    _note(plan, total, est)


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
        head = (f"alpyka's own pool: {n} persistent daemon worker thread{'s' if n != 1 else ''} + the "
                "calling thread, each worker woken through its own lock")
        if pool.calibrated:
            return (f"{head}; handing work to a worker and back costs {pool.overhead_s * 1e6:.0f} us here, "
                    f"so grids measured below {INLINE_S * 1e6:.0f} us run inline on the calling thread")
        return (f"{head} (started by the first grid too big to run inline); grids measured below "
                f"{INLINE_S * 1e6:.0f} us run inline on the calling thread (measured again once the pool runs)")

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
            plan.fn(0, nblocks, *call)
            return
        _run_measured(plan, nblocks, call, units)


_backend: CpuThreads | None = None


def load() -> CpuThreads:
    global _backend
    if _backend is None:
        _backend = CpuThreads()
    return _backend
