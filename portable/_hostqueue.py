"""Queues and events for work that the host runs itself (the CPU backends).

A blocking queue runs each task inline on the caller's thread under the queue's lock; a
non-blocking queue runs its tasks in FIFO order on one worker thread (alpaka's
``QueueCpuBlocking`` / ``QueueCpuNonBlocking``), except that a ``wait()`` which finds nobody
running them runs the tasks up to its target itself, in the same order: handing each task to a
thread and its completion back costs two thread wake-ups, more than a small kernel
(docs/runtime.md, "Queues"). Events follow CUDA re-record semantics: a wait waits for the most
recent ``record`` made before it, never for a later one.
"""

from __future__ import annotations

import _thread
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ._errorlog import ErrorLog
from ._errors import AsyncError, StateError
from ._workers import Worker, start_worker, stop_worker


class HostEvent:
    """An event completed by the host: a record counter and a completion counter."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._recorded = 0
        # generations may complete out of order (records on different queues): every
        # generation <= _low completed, and so did those in _done
        self._low = 0
        self._done: set[int] = set()
        self._errors: dict[int, BaseException] = {}

    def next_generation(self) -> int:
        """Count a new record: the generation that :meth:`complete` marks done."""
        with self._cv:
            self._recorded += 1
            return self._recorded

    def complete(self, generation: int, error: BaseException | None = None) -> None:
        """Mark ``generation`` done (with ``error``: the waits on it raise AsyncError from it)."""
        with self._cv:
            if error is not None:
                self._errors[generation] = error
            self._done.add(generation)
            while self._low + 1 in self._done:
                self._low += 1
                self._done.discard(self._low)
            self._cv.notify_all()

    def _is_done(self, generation: int) -> bool:
        return generation <= self._low or generation in self._done

    def generation(self) -> int:
        """The generation a wait issued now must see complete."""
        with self._cv:
            return self._recorded

    def wait_generation(self, generation: int, timeout: float | None = None) -> bool:
        with self._cv:
            done = self._cv.wait_for(lambda: self._is_done(generation), timeout)
            error = self._errors.get(generation)
        if error is not None:
            raise AsyncError(f"work before this event failed: {error!r}") from error
        return done

    # points completed by outside code (``pk.Event.record_external``)
    record_external = next_generation
    complete_external = complete

    # the cross-backend protocol: any queue can wait for a state captured now
    snapshot = generation
    wait_snapshot = wait_generation

    def wait(self) -> None:
        self.wait_generation(self.generation())

    def is_complete(self) -> bool:
        with self._cv:
            return self._is_done(self._recorded)


def warn_unseen(log: ErrorLog, what: str) -> None:
    """Warn about an error that no ``wait()`` reported (its queue was dropped or the program is
    ending): run by the queue's worker as it stops, never by a finalizer."""
    err = log.first_pending()
    if err is not None and not isinstance(err, KeyboardInterrupt):  # Ctrl-C was seen already
        warnings.warn(
            f"alpyka: a {what} was dropped with an error no wait() reported: {err!r}", RuntimeWarning, stacklevel=1
        )


def check_not_own_worker(worker: Worker | None, what: str) -> None:
    """Refuse a wait from a task of the same queue: it would wait for itself forever."""
    if worker is not None and threading.get_ident() == worker.ident:
        raise StateError(
            f"wait() on a {what} from inside one of its own tasks would wait for itself "
            "forever; record an event instead, or wait outside the task"
        )


class _HostQueueState:
    """Tasks, progress and the error log of a non-blocking host queue (shared with its worker,
    which must not keep the queue itself alive).

    Tasks wait in ``pending`` (FIFO) until they finished; whoever holds ``run_lock`` runs them:
    the queue's worker, woken by a token when it sleeps, or a thread in ``wait()`` that finds
    nobody running them (it would only sleep until the worker is done, so it runs them itself
    and saves two thread wake-ups; see :meth:`HostQueue.wait`). One holder at a time keeps the
    FIFO order. ``done`` is the sequence number of the last task that finished (tasks finish in
    order), so a runner interrupted anywhere (Ctrl-C in a waiting thread) never loses a task nor
    runs one twice: a task stays at the head of ``pending`` until ``done`` covers it."""

    def __init__(self) -> None:
        self.cv = threading.Condition(threading.Lock())  # waiters sleep on it until ``done`` moves
        self.sleepers = 0  # threads asleep on ``cv`` (counted under it): nobody asleep, no notify
        self.done = 0
        self.log = ErrorLog()  # ``log.seq``: the tasks submitted so far (numbered under its lock)
        self.pending: deque = deque()
        self.run_lock = _thread.allocate_lock()
        self.runner = 0  # ident of the thread running tasks now (0: none)
        #: the worker sleeps (or is about to) on its wake-up queue: the next task hands it a
        #: token. While it is awake no tokens pile up (a stale token would keep it competing for
        #: the GIL and the run turn with a waiter about to run the task itself).
        self.asleep = True

    def run_next(self, helping: bool) -> None:
        """Run the task at the head of ``pending`` (``run_lock`` held), unless an interrupted
        runner finished it already; a waiting thread that helps lets Ctrl-C through."""
        fn, args, seq, is_marker = self.pending[0]
        if seq > self.done:
            log = self.log
            try:
                if is_marker:
                    fn(*args, log.first_pending())
                elif log.errors and log.pending():
                    log.skip()
                else:
                    fn(*args)
            except BaseException as exc:  # surfaced at the next wait()
                log.add(seq, exc)
                if helping and not isinstance(exc, Exception):
                    self.finished(seq)
                    raise  # KeyboardInterrupt / SystemExit reach the waiting thread, as when blocking
            self.finished(seq)
        self.pending.popleft()

    def finished(self, seq: int) -> None:
        self.done = seq
        cv = self.cv
        with cv:  # under the lock: a waiter between its check and its sleep is not missed
            if self.sleepers:
                cv.notify_all()

    def run_pending(self, _token: Any = None) -> None:
        """The worker's loop body: run every task waiting now. When a waiter holds the turn, the
        worker goes back to sleep at once (no wake-up for the waiter to pay when it is done):
        the waiter hands the worker a new token if it leaves tasks behind."""
        pending, run_lock = self.pending, self.run_lock
        while True:
            if pending and run_lock.acquire(False):
                self.runner = _thread.get_ident()
                try:
                    while pending:
                        self.run_next(False)
                finally:
                    self.runner = 0
                    run_lock.release()
            self.asleep = True
            # a task queued between the drain and the flag saw the worker awake: take it now
            # (unless a waiter runs tasks: it hands back a token for what it leaves)
            if not (pending and not run_lock.locked()):
                return
            self.asleep = False

    def stop(self) -> None:
        """The worker stops (queue dropped, or the interpreter exits): run what is left, then
        warn about an error no wait reported."""
        self.run_pending()
        warn_unseen(self.log, "queue")


def _call_keeping(fn: Callable[[], None], keep: tuple) -> None:
    fn()


class HostQueue:
    """The queue implementation of the CPU backends (see the module docstring). ``lock`` orders a
    blocking queue's work: a backend running work in place on a blocking queue holds it."""

    def __init__(self, blocking: bool) -> None:
        self.blocking = blocking
        self.lock = threading.RLock()
        self._state = _HostQueueState()
        self._worker: Worker | None = None

    # --------------------------------------------------------------- submission
    def _submit(self, fn: Callable[..., None], args: tuple, is_marker: bool) -> None:
        if self.blocking:
            with self.lock:
                if is_marker:
                    fn(*args, None)
                else:
                    fn(*args)
            return
        st = self._state
        if self._worker is None:
            with self.lock:
                if self._worker is None:
                    # the worker owns the state, not the queue: a queue dropped with work in
                    # flight still finishes that work, then its finalizer stops the worker
                    self._worker = start_worker(st.run_pending, "alpyka-queue", on_stop=st.stop)
                    weakref.finalize(self, stop_worker, self._worker.tasks)
        log = st.log
        with log.lock:  # numbered and queued in one step: tasks run in this order
            log.seq = seq = log.seq + 1
            st.pending.append((fn, args, seq, is_marker))
        if st.asleep:  # a token wakes it (None, the stop token, is never one)
            st.asleep = False
            self._worker.put(True)

    def enqueue_host(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` in queue order (inline for a blocking queue)."""
        self._submit(fn, (), False)

    def enqueue_call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in queue order (no closure to build per task)."""
        self._submit(fn, args, False)

    def enqueue_native(self, fn: Callable[[], None], *keep: Any) -> None:
        """Run ``fn()`` in queue order: the host's native work is a task (``keep``: held by it).
        A blocking queue runs it here, under its lock (``keep`` is held by this call until
        ``fn`` returned): no task tuple, no extra frames around work that is often a model's
        forward pass, where every frame between the caller and the work runs with caches the
        work evicted (measured: each layer costs several times its cost in a warm loop)."""
        if self.blocking:
            with self.lock:
                fn()
            return
        self._submit(_call_keeping, (fn, keep), False)

    def record(self, event: HostEvent) -> None:
        self._submit(event.complete, (event.next_generation(),), True)

    def wait_for(self, waitable: Any) -> None:
        """Work enqueued after this waits for ``waitable`` (an event impl) as recorded now."""
        if isinstance(waitable, HostEvent):
            self._submit(waitable.wait_generation, (waitable.generation(),), False)
        else:  # an event of another backend: block the worker (or caller) on it
            self._submit(waitable.wait_snapshot, (waitable.snapshot(),), False)

    def in_own_task(self) -> bool:
        """True on the thread running this queue's tasks now: its worker, or a waiter that runs them."""
        me = _thread.get_ident()
        return self._state.runner == me or (self._worker is not None and self._worker.ident == me)

    # --------------------------------------------------------------- completion
    def wait(self) -> None:
        """Block until every task enqueued so far has run; raise the first error among them
        that no wait finished before this one started.

        A waiter that finds nobody running the queue's tasks runs them itself, up to its target,
        instead of sleeping while the worker runs them: handing a task to the worker and the
        completion back costs two thread wake-ups (tens of us on a loaded 2-core machine), more
        than a small kernel. Tasks still run one at a time and in order (``run_lock``)."""
        if self.blocking:
            with self.lock:
                return
        if self.in_own_task():
            raise StateError(
                "wait() on a queue from inside one of its own tasks would wait for itself "
                "forever; record an event instead, or wait outside the task"
            )
        st, me = self._state, _thread.get_ident()
        lo, target = st.log.wait_range()  # (cleared, tasks submitted so far)
        run_lock, pending, cv = st.run_lock, st.pending, st.cv
        while st.done < target:
            if pending and run_lock.acquire(False):
                st.runner = me
                try:
                    while st.done < target and pending:
                        st.run_next(True)
                finally:
                    st.runner = 0
                    run_lock.release()
                    if pending and self._worker is not None:  # later tasks: back to the worker
                        st.asleep = False
                        self._worker.put(True)
                continue
            with cv:  # the worker (or another waiter) runs them: sleep until it finished ours
                if st.done < target and (run_lock.locked() or not pending):
                    st.sleepers += 1
                    try:
                        cv.wait(0.05)  # woken at each task's end; the timeout re-checks the turn
                    finally:
                        st.sleepers -= 1
        st.log.finish_wait(lo, target, "queue")

    def is_idle(self) -> bool:
        if self.blocking:
            return True
        st = self._state
        return st.done >= st.log.seq

    @property
    def native_handle(self) -> Any:
        """The wake-up queue of the worker thread that runs its tasks (None until the first enqueue)."""
        return None if self._worker is None else self._worker.tasks
