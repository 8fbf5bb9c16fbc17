"""The handle of a request in flight: wait on it, read it, or chain it into a queue."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import portable as pk

from ._errors import RemoteTimeout


class RemoteFuture:
    """Completion of one ``RemoteModel.forward_async`` call (SONIC's async ``acquire``/``produce``).

    ``wait()`` blocks until the outputs are in the output collection (or raises the request's
    error); ``done()`` polls; ``result()`` returns the outputs as numpy arrays; ``event`` is a
    ``pk.Event`` on the host that completes with the request, so any queue can wait for it:
    ``q.wait_for(fut.event)`` (or ``fut.enqueue_wait(q)``), and work enqueued after that sees
    the outputs. A failed request leaves the output collection unchanged; its error is raised by
    ``wait()`` and by the next ``wait()`` of a queue chained to it.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._done = False
        self._error: BaseException | None = None
        self._outputs: dict[str, np.ndarray] | None = None
        self._callbacks: list[Callable[[RemoteFuture], None]] = []
        self._event: Any = None
        self._event_generation = 0

    # ------------------------------------------------------------------ completion
    def finish(self, outputs: dict[str, np.ndarray] | None, error: BaseException | None) -> None:
        """Complete the request with its ``outputs``, or its ``error``: for the code that sent it
        (``RemoteModel``, ``RemotePipeline``), not for a waiting caller. A second call changes
        nothing."""
        with self._cv:
            if self._done:
                return
            self._done, self._outputs, self._error = True, outputs, error
            callbacks, self._callbacks = self._callbacks, []
            event, gen = self._event, self._event_generation
            self._cv.notify_all()
        if event is not None:
            event.complete_external(gen, error)
        for cb in callbacks:
            cb(self)

    # ------------------------------------------------------------------ public
    def done(self) -> bool:
        with self._cv:
            return self._done

    def wait(self, timeout: float | None = None) -> None:
        """Block until the request finished; raise its error if it failed."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._done, timeout):
                raise RemoteTimeout(f"the request did not complete within {timeout} s")
            error = self._error
        if error is not None:
            raise error

    def result(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """The outputs (numpy, batch first), once the request finished."""
        self.wait(timeout)
        assert self._outputs is not None
        return self._outputs

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with self._cv:
            self._cv.wait_for(lambda: self._done, timeout)
            return self._error

    def add_done_callback(self, fn: Callable[[RemoteFuture], None]) -> None:
        """Call ``fn(future)`` once the request finished (at once if it already has)."""
        with self._cv:
            if not self._done:
                self._callbacks.append(fn)
                return
        fn(self)

    @property
    def event(self) -> Any:
        """A ``pk.Event`` of the host device that completes (or fails) with this request."""
        with self._cv:
            if self._event is None:
                ev = pk.Event(pk.host())
                self._event_generation = ev.record_external()
                self._event = ev
                if self._done:
                    ev.complete_external(self._event_generation, self._error)
            return self._event

    def enqueue_wait(self, queue: Any) -> None:
        """Make ``queue`` wait for this request: work enqueued later runs after the outputs landed."""
        queue.wait_for(self.event)

    # the cross-backend waitable protocol of portable's host queues
    def snapshot(self) -> int:
        return 0

    def wait_snapshot(self, token: int, timeout: float | None = None) -> bool:
        self.wait(timeout)
        return True

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error else "done")
        return f"<RemoteFuture {state}>"
