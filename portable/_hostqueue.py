"""Queues and events for work that the host runs itself (the CPU backends).

A blocking queue runs each task inline on the caller's thread under the queue's lock; a
non-blocking queue hands tasks to one worker thread that runs them in FIFO order (alpaka's
``QueueCpuBlocking`` / ``QueueCpuNonBlocking``). Events follow CUDA re-record semantics: a wait
waits for the most recent ``record`` made before it, never for a later one.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable

from ._errorlog import ErrorLog
from ._errors import AsyncError
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

    def _next_generation(self) -> int:
        with self._cv:
            self._recorded += 1
            return self._recorded

    def _complete(self, generation: int, error: BaseException | None = None) -> None:
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
    if err is not None:
        warnings.warn(f"alpyka: a {what} was dropped with an error no wait() reported: {err!r}",
                      RuntimeWarning, stacklevel=1)


def check_not_own_worker(worker: Worker | None, what: str) -> None:
    """Refuse a wait from a task of the same queue: it would wait for itself forever."""
    if worker is not None and threading.get_ident() == worker.ident:
        raise RuntimeError(f"wait() on a {what} from inside one of its own tasks would wait for itself "
                           "forever; record an event instead, or wait outside the task")


class _HostQueueState:
    """Counters and the error log of a non-blocking host queue (shared with its worker, which
    must not keep the queue itself alive)."""

    def __init__(self) -> None:
        self.cv = threading.Condition(threading.Lock())
        self.submitted = 0
        self.done = 0
        self.log = ErrorLog()

    def run_task(self, task: tuple[Callable[[Any], None], int, bool]) -> None:
        fn, seq, is_marker = task
        log = self.log
        try:
            if is_marker:
                fn(log.first_pending())
            elif log.pending():
                log.skip()
            else:
                fn(None)
        except BaseException as exc:  # surfaced at the next wait()
            log.add(seq, exc)
        finally:
            with self.cv:
                self.done += 1
                self.cv.notify_all()


class HostQueue:
    """The queue implementation of the CPU backends (see the module docstring)."""

    def __init__(self, blocking: bool) -> None:
        self.blocking = blocking
        self._lock = threading.RLock()
        self._state = _HostQueueState()
        self._worker: Worker | None = None

    # --------------------------------------------------------------- submission
    def _submit(self, fn: Callable[[Any], None], is_marker: bool) -> None:
        if self.blocking:
            with self._lock:
                fn(None)
            return
        st = self._state
        if self._worker is None:
            with self._lock:
                if self._worker is None:
                    # the worker owns the state, not the queue: a queue dropped with work in
                    # flight still finishes that work, then its finalizer stops the worker
                    self._worker = start_worker(st.run_task, "alpyka-queue",
                                                on_stop=lambda: warn_unseen(st.log, "queue"))
                    weakref.finalize(self, stop_worker, self._worker.tasks)
        with st.cv:  # numbered and handed over in one step: the worker runs them in this order
            st.submitted += 1
            seq = st.log.next_seq()
            self._worker.put((fn, seq, is_marker))

    def enqueue_host(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` in queue order (inline for a blocking queue)."""
        self._submit(lambda _err: fn(), False)

    def record(self, event: HostEvent) -> None:
        gen = event._next_generation()
        self._submit(lambda err: event._complete(gen, err), True)

    def wait_for(self, waitable: Any) -> None:
        """Work enqueued after this waits for ``waitable`` (an event impl) as recorded now."""
        if isinstance(waitable, HostEvent):
            gen = waitable.generation()
            self._submit(lambda _err: waitable.wait_generation(gen), False)
        else:  # an event of another backend: block the worker (or caller) on it
            token = waitable.snapshot()
            self._submit(lambda _err: waitable.wait_snapshot(token), False)

    # --------------------------------------------------------------- completion
    def wait(self) -> None:
        """Block until every task enqueued so far has run; raise the first error among them
        that no wait finished before this one started."""
        if self.blocking:
            with self._lock:
                return
        check_not_own_worker(self._worker, "queue")
        st = self._state
        with st.cv:
            target = st.submitted
            lo, _ = st.log.wait_range()
            st.cv.wait_for(lambda: st.done >= target)
        st.log.finish_wait(lo, target, "queue")

    def is_idle(self) -> bool:
        if self.blocking:
            return True
        st = self._state
        with st.cv:
            return st.done >= st.submitted

    @property
    def native_handle(self) -> Any:
        """The queue of tasks its worker thread runs (None until the first enqueue)."""
        return None if self._worker is None else self._worker.tasks
