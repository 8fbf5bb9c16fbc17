"""Queues and events of the device backends (OpenCL, CUDA, ROCm), on top of a native queue.

One implementation for every device API: a subclass supplies a handful of primitives on its
native queue (an in-order OpenCL command queue, a CUDA/HIP stream) and this module adds
alpaka's semantics on top:

- blocking queues finish each piece of work before the enqueue returns;
- host functions (``enqueue_host``) run in FIFO order with device work: on a non-blocking
  OpenCL queue a *gate* is enqueued (a user event the queue waits on) and a worker thread runs
  the function once the queue reaches the gate, then opens it; CUDA/HIP queues hold the work
  enqueued after a host function on the host until it ran (:mod:`backends._cupy_queue`), so
  neither the caller nor the native runtime's own threads run user code;
- events follow CUDA re-record semantics: each ``record`` enqueues a fresh native marker and a
  wait waits for the latest marker recorded before it; the cross-backend protocol
  ``snapshot()`` / ``wait_snapshot(token)`` lets a queue of another backend wait for it;
- an exception raised by a host function surfaces at the next ``wait()`` of the queue and at
  waits on events recorded after it (later host functions of the queue are skipped until then);
- Python objects that enqueued work uses (buffers, host arrays) are kept alive until a marker
  after that work completed, so memory is never reused under an asynchronous copy or kernel.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from portable import AsyncError
from portable.spi import ErrorLog, Worker, check_not_own_worker, start_worker, stop_worker, warn_unseen

from ._retention import Retained, track

#: how many enqueued operations may hold objects before a marker is recorded to release them
_RETAIN_BATCH = 32
#: a wait for a native event polls it, yielding the core between polls, for about this long ...
POLL_YIELD_S = 2e-3
#: ... then sleeps between polls, at most this long: a Ctrl-C waits at most about this long for the waiter
POLL_MAX_S = 0.005
#: ``os.sched_yield`` (it releases the GIL), where the OS has it
_sched_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def wait_polling(done: Callable[[], bool]) -> None:
    """Return once ``done()`` (a native event's or queue's status query) is true.

    Polled, never the runtime's blocking wait (``clWaitForEvents``, ``cudaEventSynchronize``): a
    thread inside it runs no Python, so the main thread could not raise the KeyboardInterrupt of
    a Ctrl-C until a long kernel ended, and a queue's worker waiting there when the interpreter
    finalises would re-take the GIL from native code as the event completes. Up to
    :data:`POLL_YIELD_S` the polls have a ``sched_yield`` between them, never a plain spin: the
    thread that completes the work may need this core (an OpenCL CPU runtime's worker placed on
    it: a 50 us spin made a tiny blocking launch 9-11x ``clFinish``, yielding ~2x, with the two
    threads on one core) or the GIL (the GPU emulator's stream threads), and a timer's sleep
    lasts ~60 us. Then the thread sleeps between polls, a quarter of the time waited so far (a
    wait ends at most ~25% late) up to :data:`POLL_MAX_S`, so at exit a worker is in
    ``time.sleep``. A Ctrl-C is raised between polls. Callers then call the runtime's own
    wait, which returns at once and raises the error of a failed command."""
    if done():
        return
    clock, yield_core = time.perf_counter, _sched_yield
    t0 = clock()
    while clock() - t0 < POLL_YIELD_S:
        yield_core()
        if done():
            return
    while not done():
        time.sleep(min(POLL_MAX_S, 0.25 * (clock() - t0)))


@dataclass(frozen=True)
class Snapshot:
    """What a wait issued now waits for: a native marker of one queue and the range of that
    queue's host functions whose errors it reports."""

    queue: DeviceQueue
    native: Any
    errors_after: int
    errors_upto: int

    def wait(self) -> None:
        self.queue.sync_native(self.native)
        self.queue.log.resolve(self.errors_upto)
        err = self.queue.log.first_between(self.errors_after, self.errors_upto)
        if err is not None:
            raise AsyncError(f"work before this event failed: {err!r}") from err

    def done(self) -> bool:
        return self.queue.native_done(self.native)

    def may_fail(self) -> bool:
        """True when host functions of the queue before the marker could report an error, so a
        native wait alone (which sees only device work) would lose it."""
        if self.errors_upto <= self.errors_after:
            return False  # no host function in range
        if not self.done():
            return True  # they may still fail
        return self.queue.log.first_between(self.errors_after, self.errors_upto) is not None


class DeviceEvent:
    """The event implementation of the device backends (see the module docstring)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None

    def set_latest(self, snap: Snapshot) -> None:
        """Make ``snap`` the state waits on this event wait for (``DeviceQueue.record``)."""
        with self._lock:
            self._latest = snap

    # the cross-backend protocol: any queue can wait for a state captured now
    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._latest

    def wait_snapshot(self, token: Snapshot | None, timeout: float | None = None) -> bool:
        if token is not None:
            token.wait()
        return True

    def wait(self) -> None:
        self.wait_snapshot(self.snapshot())

    def is_complete(self) -> bool:
        snap = self.snapshot()
        return snap is None or snap.done()


class _HostTask:
    __slots__ = ("fn", "gate", "seq", "always")

    def __init__(self, fn: Callable[[], None], gate: Any, seq: int, always: bool) -> None:
        self.fn, self.gate, self.seq, self.always = fn, gate, seq, always


def run_host_function(
    log: ErrorLog, seq: int, fn: Callable[[], None], always: bool, reached: Callable[[], None]
) -> None:
    """A device queue's host function ``seq``, on the queue's worker: wait until the native
    queue reached it (``reached``), take in the errors of other queues' events waited for
    before it, then run ``fn`` unless an earlier error is pending and ``always`` is false
    (then count it skipped). Its error goes to ``log``, surfaced at the next ``wait()``."""
    try:
        reached()
        log.resolve(seq)  # waits for other queues' events before this task
        if not always and log.pending():
            log.skip()
        else:
            fn()
    except BaseException as exc:  # noqa: BLE001 - surfaced at the next wait()
        log.add(seq, exc)


def _run_host_task(task: _HostTask, log: ErrorLog) -> None:
    # The worker holds the gates and the error log, not the queue: a queue dropped with work
    # in flight still finishes it, then its finalizer stops the worker.
    try:
        run_host_function(log, task.seq, task.fn, task.always, task.gate.reached)
    finally:
        task.gate.open()


class DeviceQueue:
    """Base of the device queues; subclasses implement the native primitives below."""

    #: name of the device API, for messages ("OpenCL", "CUDA", "HIP")
    api = "device"
    #: whether the queue's lock is one of several queues (a simulator's: every queue of its
    #: device, backends/_opencl_simulator.py): a blocking queue's host function then runs after
    #: the queue's work without it, as it may wait for another queue of the device (an event,
    #: ``wait_for``'s host wait), whose work only a thread that takes that lock runs
    shares_lock = False

    def __init__(self, device: Any, blocking: bool) -> None:
        self.device = device
        self.blocking = blocking
        self._lock = threading.RLock()
        self._log = ErrorLog()
        self._retained = Retained(self.event_done)
        track(self._retained, self)  # buried, never destroyed under pending work, when collected
        self._worker: Worker | None = None

    @property
    def lock(self) -> threading.RLock:
        """The queue's lock: held while work is enqueued on the native queue, so that what one
        enqueue sets up (a ``cl.Kernel``'s arguments, a replayed graph's commands) is not
        interleaved with another thread's (the launchers and recorders take it)."""
        return self._lock

    @property
    def log(self) -> ErrorLog:
        """The queue's :class:`ErrorLog` (which wait reports which asynchronous error): read by
        snapshots of the queue that other queues wait for, and by the queue's worker tasks."""
        return self._log

    # ------------------------------------------------------------------ native primitives
    def marker(self) -> Any:
        """A native event that completes when the work enqueued so far has finished."""
        raise NotImplementedError

    @staticmethod
    def event_done(obj: Any) -> bool:
        """True when ``obj`` is a native event (or marker) of this API that completed, or is not
        one; must not refer to the queue (the reaper calls it after the queue is gone)."""
        raise NotImplementedError

    def native_done(self, native: Any) -> bool:
        """True when ``native`` (a marker of this queue) completed."""
        return self.event_done(native)

    def sync_native(self, native: Any) -> None:
        """Block the calling thread until ``native`` (a marker of this API) completed."""
        raise NotImplementedError

    def device_wait(self, snap: Snapshot) -> bool:
        """Make later work of this queue wait for ``snap`` on the device; False when the
        snapshot belongs to a queue this one cannot wait for natively."""
        return False

    def finish(self) -> None:
        """Block until every piece of native work enqueued so far finished."""
        raise NotImplementedError

    def make_gate(self) -> Any:
        """A gate at the current end of the queue: an object with ``reached()`` (block until
        the work before it finished) and ``open()`` (let the work after it start)."""
        raise NotImplementedError

    def hold_gate(self, gate: Any) -> None:
        """Make the work enqueued after this wait for ``gate.open()``."""
        raise NotImplementedError

    @property
    def native_handle(self) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ keeping memory alive
    def after_enqueue(self, *objs: Any) -> None:
        """Called after each enqueued operation: keep ``objs`` alive until it finished, and
        finish at once on a blocking queue. The objects of completed batches are let go once
        per batch (a native status query per launch cost more than the launch's own Python
        work) and at each ``wait()``."""
        if self.blocking:
            self.finish()
            return
        with self._lock:
            if objs and self._retained.keep(objs) >= _RETAIN_BATCH:
                self.retire_batch()

    def retire_batch(self) -> None:
        """Put the kept objects behind a marker, and let go of those of completed markers
        (caller holds ``_lock``)."""
        retained = self._retained
        retained.retire(self.marker())
        retained.prune()

    def enqueue_native(self, fn: Callable[[], None], *keep: Any) -> None:
        """Run ``fn()`` (it enqueues on the native queue, in order after the host-function
        gates) now, and keep ``keep`` alive until its work finished."""
        fn()
        self.after_enqueue(*keep)

    def _prune(self) -> None:
        with self._lock:
            self._retained.prune()

    # ------------------------------------------------------------------ the queue interface
    def enqueue_host(self, fn: Callable[[], None], *, always: bool = False) -> None:
        """Run ``fn()`` once the work enqueued before it finished; later work waits for it.
        After an error of an earlier host function, ``fn`` is skipped (until the next ``wait()``)
        unless ``always`` (waits for other queues' events always run)."""
        if self.blocking:
            with self._lock:
                self.finish()
                if not self.shares_lock:
                    fn()
                    return
            fn()  # (the lock of every queue of the device: see shares_lock; another thread's launch may run beside it)
            return
        self._enqueue_gated(fn, always)

    def _enqueue_gated(self, fn: Callable[[], None], always: bool) -> None:
        """The non-blocking path of :meth:`enqueue_host`: a gate in the native queue that the
        worker opens after running ``fn`` (OpenCL's user events). Queues whose API cannot hold
        a stream on a host condition without a host function (CUDA, HIP) override this."""
        with self._lock:
            if self._worker is None:
                log, what = self._log, f"{self.api} queue"
                self._worker = start_worker(
                    lambda task: _run_host_task(task, log),
                    f"alpyka-{self.api.lower()}-host",
                    on_stop=lambda: warn_unseen(log, what),
                )
                weakref.finalize(self, stop_worker, self._worker.tasks)
            seq = self._log.next_seq()
            gate = self.make_gate()
            try:
                self._worker.put(_HostTask(fn, gate, seq, always))
            except BaseException:  # (a KeyboardInterrupt): the gate must not stay closed
                gate.open()
                raise
            self.hold_gate(gate)  # only now: the worker that opens it has the task

    def record(self, event: DeviceEvent) -> None:
        with self._lock:
            native = self.marker()
            self._retained.retire(native)  # its objects stay referenced until it completed
            with self._log.lock:
                snap = Snapshot(self, native, self._log.cleared, self._log.seq)
            event.set_latest(snap)
        if self.blocking:
            self.finish()

    def wait_for(self, waitable: Any) -> None:
        """Work enqueued after this waits for ``waitable`` (an event impl) as recorded now."""
        token = waitable.snapshot()
        if token is None:
            return
        if isinstance(token, Snapshot) and self.device_wait(token):
            if token.may_fail():
                # the native wait sees device work only: errors of the other queue's host
                # functions become this queue's once its work has passed the wait
                with self._lock:
                    self._log.add_import(lambda: token.queue.log.first_between(token.errors_after, token.errors_upto))
            if self.blocking:
                self.finish()
                self._log.resolve(self._log.seq)
                self._log.finish_wait(*self._log.wait_range(), f"{self.api} queue")
            return
        # an event of another API or context: wait for it on the host, in queue order
        self.enqueue_host(lambda: waitable.wait_snapshot(token), always=True)

    def in_own_task(self) -> bool:
        """True on the thread running this queue's host functions (its worker)."""
        worker = self._worker
        return worker is not None and worker.ident == threading.get_ident()

    def wait(self) -> None:
        """Block until all work enqueued so far finished; raise the first error among it."""
        check_not_own_worker(self._worker, f"{self.api} queue")
        retained = self._retained
        with self._lock:
            lo, upto = self._log.wait_range()
            held, retained.pending = retained.pending, []  # no marker: the finish below covers them
        try:
            self.finish()  # host functions are gates in the native queue: finish waits for them too
        except BaseException:  # (a Ctrl-C while polling): the work may still run, keep its objects
            # without the lock, which may be held for a while (a simulator's queue: by a run a
            # Ctrl-C left going on, backends/_opencl_simulator.py): one slice assignment, atomic
            # under the GIL, into whichever list ``pending`` is now (one another thread put behind
            # a marker, or took for its own wait, is released after that later work, which is
            # after this; the queue is in order)
            if held:
                retained.pending[:0] = held
            raise
        del held  # their work finished
        self._prune()  # work other threads enqueued meanwhile keeps its objects
        self._log.resolve(upto)
        self._log.finish_wait(lo, upto, f"{self.api} queue")

    def is_idle(self) -> bool:
        with self._lock:
            native = self.marker()
        return self.native_done(native)
