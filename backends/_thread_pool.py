"""cpu_threads' thread pool: persistent daemon workers that run the chunks of a parallel launch
together with the calling thread (the counterpart of alpaka's ``core/ThreadPool.hpp``; one per
process, shared by every queue and host thread).

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
* Ctrl-C: the calling thread notices it between chunks and while it waits; the launch's
  remaining chunks are skipped and ``KeyboardInterrupt`` propagates. Chunks still running on
  workers finish in the background; the next cpu_threads launch waits for them first
  (:meth:`_Pool.before_launch`), so queue order holds.
* After ``fork`` the child starts with a fresh, empty pool.

Nothing here runs from the garbage collector (no finalizers), and no lock is held while a
kernel runs.
"""

from __future__ import annotations

import _thread
import itertools
import os
import threading
import time
from collections import deque
from typing import Any

from portable import StateError
from portable.spi import before_workers_stop

#: how long a calibration round waits for its worker
CALIBRATE_WAIT_S = 0.05

_perf = time.perf_counter
#: this thread's CPU time (a thread preempted or waiting for a core does not advance it)
_thread_cpu = time.thread_time
_get_ident = _thread.get_ident
_MAIN = threading.main_thread().ident
_EXIT_MESSAGE = (
    "cpu_threads: kernel launch given up: the program ended (atexit) without waiting for its queue; "
    "call q.wait() before the program ends"
)


def main_ident() -> int:
    """The main thread's ident (the one Ctrl-C reaches; after a fork, the forking thread)."""
    return _MAIN


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _median(values: list[float]) -> float:
    """The median of ``values`` (not empty); ``statistics`` is not imported for this alone (with
    ``fractions`` and ``decimal``: ~2 ms at a process's first cpu_threads device)."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _release(lock: Any) -> None:
    """Release ``lock`` unless it is released already (completion and exit may both try)."""
    try:
        lock.release()
    except RuntimeError:
        pass


class _Job:
    """One parallel launch: chunk ``c`` is blocks ``[bounds[c], bounds[c+1])``."""

    __slots__ = (
        "fn",
        "call",
        "bounds",
        "chunks",
        "take",
        "fin",
        "done",
        "complete",
        "cancel",
        "errors",
        "busy",
        "cpu",
        "active",
    )

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
        self.cpu: list[float] = []  # CPU seconds each participating thread spent in run() (its chunks)
        self.active: set[int] = set()  # pool workers inside run() (never the caller)

    def run(self) -> None:
        """Take chunks and run them until none is left (the caller and workers alike)."""
        take, chunks, bounds, fn, call = self.take, self.chunks, self.bounds, self.fn, self.call
        busy, cpu0 = 0.0, _thread_cpu()
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
                    except BaseException as exc:  # noqa: BLE001 - raised by the caller once all chunks ended
                        self.errors.append(exc)
                        self.cancel = True
                    busy += _perf() - t0
                if self.fin() == chunks:
                    self.complete = True
                    _release(self.done)
        finally:
            self.busy.append(busy)
            self.cpu.append(_thread_cpu() - cpu0)


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

    def calibrate(self, rounds: int = 15) -> bool:
        """Measure what handing work to a worker costs (:attr:`overhead_s`): a one-chunk launch
        that does nothing, run by a worker while the caller sleeps (a wake-up each way, the GIL
        hand-over). Done by a launch that finds the pool idle (other launches would be measured
        too, or keep the worker away); if that changes, or the worker does not come, it is left
        to a later launch. True when this call measured it."""
        if not self.calibrate_lock.acquire(False):
            return False
        try:

            def noop(lo: int, hi: int) -> None:
                return None

            times = []
            for _ in range(rounds):
                if self.inflight or self.calibrated:
                    return False
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
                    return False
                times.append(_perf() - t0)
            self.overhead_s = _median(times)
            self.calibrated = True
            return True
        finally:
            self.calibrate_lock.release()

    # ------------------------------------------------------------------ launches
    def before_launch(self) -> None:
        """Wait for the chunks an interrupted launch left running (queue order after Ctrl-C);
        refuse a queue's launch once the program ended (nobody waits for it)."""
        if self.abandoned:
            self.drain()
        if self.exiting and _get_ident() != _MAIN:
            raise StateError(_EXIT_MESSAGE)

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
            raise StateError(_EXIT_MESSAGE)

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

    def at_exit(self) -> bool:
        """Every user thread has ended: give up the queues' launches still waiting for chunks
        (and, from now on, those a queue worker starts; the main thread's, made by later atexit
        hooks, still run). True when a worker still runs a chunk (left to the OS at exit)."""
        self.exiting = True
        for job in list(self.inflight):
            job.cancel = True
            _release(job.done)
        return any(job.active for job in list(self.inflight) + list(self.abandoned))

    def after_fork(self) -> None:
        """The child of a fork has none of the workers: start again from nothing."""
        global _MAIN
        _MAIN = _get_ident()  # the forking thread is the child's main thread
        self._reset()


#: the process's pool (never replaced: after a fork it is reset in place)
_pool = _Pool()
before_workers_stop(_pool.at_exit)  # before the queue workers are joined at exit
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.after_fork)
