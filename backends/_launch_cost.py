"""cpu_threads' launch cost model: each compiled kernel's measured cost decides whether a launch
runs inline on the calling thread or in chunks on the thread pool (backends/_thread_pool.py).

* **Small grids run inline**, on the calling thread (the queue's worker, or the caller of a
  blocking queue), exactly as on cpu_serial: waking a thread costs more than they do. Launches
  are timed (two ``perf_counter`` calls), so each compiled kernel has a measured cost per
  element, per size class (the bit length of blocks x elements); a grid predicted to cost less
  than :data:`INLINE_S` runs inline (below a quarter of it untimed, but for one launch in 32).
  :data:`INLINE_S` is :data:`INLINE_FACTOR` times the measured cost of handing work to a worker
  and back (measured once, by a launch that finds the pool idle; ``ALPYKA_THREADS_INLINE_US``
  overrides it). The launch that starts the pool does not measure it (it keeps the default
  :data:`INLINE_S`): 15 hand-overs, tens of ms on a busy machine, would delay a new process's
  first result, and its workers are just starting; the next parallel launch measures it. The
  first launch of a kernel at a size runs a short probe (1, 2, 4, ... of its blocks) inline to
  measure it.
* **Larger grids** are cut into contiguous chunks of blocks (one per thread; up to
  :data:`CHUNKS_PER_WORKER` per thread of at least :data:`CHUNK_MIN_S` each; more where a chunk
  would exceed :data:`CHUNK_MAX_S`, at most :data:`MAX_CHUNKS_PER_WORKER` per thread) that the
  calling thread and the pool's workers take in order; the compiled code releases the GIL, so
  the chunks run concurrently, and a Ctrl-C is noticed between chunks (:data:`CHUNK_MAX_S`
  apart once the kernel was measured, unless its blocks are longer). A size whose parallel
  launches do not beat the inline time by :data:`PARALLEL_GAIN` runs inline (re-tried now and
  then).
* **This launch's own pace** (the main thread, where Ctrl-C lands): a kernel's cost may depend
  on its arguments (a loop count), so an estimate from earlier launches can be far too low, and
  chunks sized from it would run for minutes. Before it trusts the estimate, the main thread
  runs one block of the launch, timed (:func:`_own_pace`): a block no slower than the estimate
  says (within :data:`PILOT_TRUST` and :data:`PILOT_SLACK_S`) confirms it; a slower one, seen
  again on a second piece timed by the thread's CPU clock (a preemption does not count),
  sizes this launch's chunks from the measured pace instead (the estimate kept for
  later launches is not raised by it). That costs one more call of the compiled code (~1-2 us)
  per measured launch on the main thread, as cpu_serial's first slice does
  (backends/_host_slices.py); a launch whose later blocks are far slower than its first ones is
  still sized from those.

The module's globals are read at each launch: :data:`INLINE_S` (and ``_UNTIMED_S``) change when
the pool is calibrated, and tests patch them here.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from portable.env import env_number

from . import _thread_pool
from ._host_slices import run_blocks
from ._thread_pool import _get_ident, _Job, _perf, _pool, _thread_cpu

#: whether threads' CPU clocks resolve a chunk's time (not on a 15.6 ms tick): then a parallel
#: launch is judged against its own threads' CPU time
_CPU_CLOCK_FINE = time.get_clock_info("thread_time").resolution <= 1e-6

#: at most this much measured work (seconds) per chunk of a parallel launch (Ctrl-C latency)
CHUNK_MAX_S = 5e-3
#: beyond one chunk per thread, at least this much work per chunk: each chunk is one call of the
#: compiled code, which needs the GIL on its way in and out (contended between the threads)
CHUNK_MIN_S = 1e-3
#: chunks per thread of a parallel launch (so a core busy elsewhere does not hold it up), unless
#: CHUNK_MAX_S needs more; never more than MAX_CHUNKS_PER_WORKER
CHUNKS_PER_WORKER = 4
#: bounds the chunk list only: CHUNK_MAX_S decides the count (more chunks than this per thread
#: means over a minute of work, whose chunks then grow past CHUNK_MAX_S)
MAX_CHUNKS_PER_WORKER = 8192
#: grids predicted to cost less than this (seconds) run inline: INLINE_FACTOR times the cost of
#: handing work to a worker, measured when the pool starts (ALPYKA_THREADS_INLINE_US overrides)
INLINE_S = 60e-6
INLINE_FACTOR = 2.5
#: bounds of the measured INLINE_S
INLINE_MIN_S, INLINE_MAX_S = 20e-6, 1e-3
#: the first launch of a kernel at a size runs a probe inline, timed: 1, 2, 4, ... blocks until
#: PROBE_S of work or 1/2**PROBE_SHIFT of the grid (grids of fewer than 2**(PROBE_SHIFT+1)
#: blocks are not probed: their first launch is parallel)
PROBE_SHIFT = 5
PROBE_S = 50e-6
#: the main thread's first block of a launch confirms the estimate when it took at most
#: PILOT_TRUST times what the estimate says, plus PILOT_SLACK_S (a call's own cost, a short
#: preemption); a slower block is confirmed by a second piece of about PILOT_CONFIRM_S
PILOT_TRUST = 4.0
PILOT_SLACK_S = 20e-6
PILOT_CONFIRM_S = 1e-3
#: weight of the newest measurement in a kernel's running estimates
EMA = 0.25
#: a size whose parallel launches took more than this fraction of the inline time it would
#: have taken runs inline (re-tried in parallel every RETRY launches)
PARALLEL_GAIN = 0.9
RETRY = 16

#: per compiled kernel and size class (bit length of blocks x elements): seconds per element
#: when run inline, and how long its parallel launches took relative to that
_cost: dict[tuple[Any, int], float] = {}
_ratio: dict[tuple[Any, int], float] = {}
_tick = itertools.count().__next__  # every 32nd launch of a tiny grid is timed too


def _set_inline_s(seconds: float) -> None:
    global INLINE_S, _UNTIMED_S
    INLINE_S = seconds
    _UNTIMED_S = seconds / 4  # far below the threshold: run without timing


_inline_us = env_number("ALPYKA_THREADS_INLINE_US", None, float, minimum=0)
_set_inline_s(INLINE_S if _inline_us is None else _inline_us * 1e-6)


def _calibrate() -> None:
    """Measure the pool's hand-over cost once; a grid whose work is below INLINE_FACTOR times
    that runs faster inline (unless ALPYKA_THREADS_INLINE_US sets the threshold)."""
    if _pool.calibrate() and _inline_us is None:
        _set_inline_s(min(INLINE_MAX_S, max(INLINE_MIN_S, INLINE_FACTOR * _pool.overhead_s)))


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


def _own_pace(
    fn: Any, lo: int, hi: int, call: tuple, units: int, est: float | None, took: float
) -> tuple[int, float | None]:
    """The main thread's check of the estimate ``est`` (seconds per element from earlier
    launches; None: none) on this launch's own blocks: block ``lo - 1`` took ``took`` seconds,
    more than ``est`` says, so a second piece sized from it (at most an eighth of the blocks
    left) runs, timed by this thread's CPU clock (a preemption, which made the first block look
    slow on a busy machine, does not count there). Returns the next block to run and the pace
    to size this launch with: ``est`` when the piece confirms it, else the measured pace (never
    stored: see the module doc)."""
    per = took / units
    if lo >= hi:
        return lo, per
    n = max(1, min((hi - lo) >> 3, int(PILOT_CONFIRM_S / (per * units))))  # most blocks left to the chunks
    clock = _thread_cpu if _CPU_CLOCK_FINE else _perf
    t0 = clock()
    fn(lo, lo + n, *call)
    took = clock() - t0
    if took <= PILOT_TRUST * (est or 0.0) * n * units + PILOT_SLACK_S:
        return lo + n, est
    per = took / (n * units)
    return lo + n, per if est is None or per > est else est


def _note(plan: Any, total: int, est: float) -> None:
    """Keep ``plan.inline_upto`` (the hot path's test) at the edge of the grids measured far
    below the inline threshold, as launches of the plan are measured."""
    if est * total < _UNTIMED_S:
        if total > plan.inline_upto:
            plan.inline_upto = total
    elif total <= plan.inline_upto:
        plan.inline_upto = total - 1


def _run_measured(plan: Any, nblocks: int, call: tuple, units: int) -> None:
    """The launches that :class:`~backends.cpu_threads.CpuThreads` does not run inline
    untimed."""
    pool = _pool
    if pool.abandoned or pool.exiting:
        pool.before_launch()
    fn = plan.fn
    me = _get_ident()
    if nblocks <= 1 or pool.cores <= 1 or me in pool.threads:
        run_blocks(fn, nblocks, call)  # in slices on the main thread (Ctrl-C)
        return
    total = nblocks * units
    key = (fn, total.bit_length())
    est = _cost.get(key)
    lo, pace = 0, est
    if est is None and nblocks >> (PROBE_SHIFT + 1):  # never measured at this size: probe
        lo, est = _probe(fn, nblocks >> PROBE_SHIFT, call, key, units)
        pace = est  # measured on this launch's own blocks
    elif me == _thread_pool.main_ident():  # Ctrl-C lands here: check the estimate on a block
        t0 = _perf()
        fn(0, 1, *call)
        took = _perf() - t0
        lo = 1
        if took > PILOT_TRUST * (est or 0.0) * units + PILOT_SLACK_S:
            lo, pace = _own_pace(fn, 1, nblocks, call, units, est, took)
            if lo >= nblocks:
                return
    n = nblocks - lo
    if pace is not None:
        work = pace * n * units
        ratio = _ratio.get(key) if pace is est else None  # (measured on launches of another pace)
        if work < INLINE_S or (ratio is not None and ratio > PARALLEL_GAIN and _tick() % RETRY):
            if pace is est:
                _note(plan, total, _timed(fn, lo, nblocks, call, key, units, est))
            else:  # slower than the estimate but short: the estimate is kept
                fn(lo, nblocks, *call)
            return
    else:
        work = 0.0  # a few blocks of unknown cost: one chunk per thread
    starts = not pool.started
    if starts:
        pool.start()
    if not pool.nworkers:
        fn(lo, nblocks, *call)
        return
    if not (pool.calibrated or starts):  # not the launch that starts the pool (see the module doc)
        _calibrate()
    _note(plan, total, _parallel(fn, lo, nblocks, call, key, units, est, work))


def _chunk_bounds(lo: int, hi: int, work: float, cores: int) -> list[int]:
    """Chunks of blocks ``[lo, hi)``, ``work`` seconds in all, for ``cores`` threads: chunk
    ``c`` is ``[bounds[c], bounds[c+1])``."""
    n = hi - lo
    chunks = max(cores, min(cores * CHUNKS_PER_WORKER, int(work / CHUNK_MIN_S)), int(work / CHUNK_MAX_S) + 1)
    chunks = min(n, cores * MAX_CHUNKS_PER_WORKER, -(-chunks // cores) * cores)  # even shares
    return [lo + n * c // chunks for c in range(chunks + 1)]


def _parallel(fn: Any, lo: int, hi: int, call: tuple, key: tuple, units: int, est: float | None, work: float) -> float:
    """Run blocks ``[lo, hi)`` in chunks on the pool and the calling thread, timed; returns the
    updated cost estimate of ``key`` (and updates its parallel-to-inline ratio)."""
    n = hi - lo
    job = _Job(fn, call, _chunk_bounds(lo, hi, work, _pool.cores))
    t0 = _perf()
    _pool.run_job(job)
    wall = _perf() - t0
    # the threads' summed chunk times bound the inline cost from above (they contend for memory
    # and the GIL): they may lower the estimate, never raise it (that would favour this path)
    per = sum(job.busy) / (n * units)
    if est is None or per < est:
        est = _cost[key] = per
    # against what this launch's own data cost: its threads' CPU time (a kernel's work may depend
    # on its data, e.g. digis per module, so the estimate of another launch of the grid misjudges)
    cpu = sum(job.cpu) if _CPU_CLOCK_FINE else 0.0
    r = wall / (cpu if cpu > 0 else est * n * units)
    old = _ratio.get(key)
    # as the estimates: a fast parallel launch shows what the cores give (noise only adds time), so
    # it counts at once (a size made inline while the cores were busy goes parallel on the first
    # retry that finds them free); a slower one moves the ratio a part of the way
    _ratio[key] = r if old is None or r < old else old + (r - old) * EMA
    return est
