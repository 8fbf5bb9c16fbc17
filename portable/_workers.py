"""Worker threads of non-blocking queues, and stopping them cleanly at interpreter exit.

A queue's worker is a daemon thread so that a forgotten queue never keeps a program alive. But
CPython kills daemon threads that are still running when the interpreter finalises; a worker
caught then while it frees a task's last references (a PyTorch tensor, whose destructor
re-acquires the GIL from C++) aborts the whole process ("terminate called without an active
exception"). So every worker is registered here, and an ``atexit`` hook asks each one to stop
and joins it while the interpreter is still whole. Workers also drop each task as soon as it
ran, so no task outlives its work in a worker's frame.
"""

from __future__ import annotations

import atexit
import queue as _stdqueue
import threading
import time
import weakref
from typing import Any, Callable

_STOP = None
_live: "weakref.WeakValueDictionary[int, threading.Thread]" = weakref.WeakValueDictionary()
_stoppers: dict[int, Callable[[], None]] = {}
_lock = threading.Lock()
JOIN_TIMEOUT_S = 10.0


class Worker:
    """A started worker: ``put(task)`` hands it a task; ``ident`` is its thread's id."""

    __slots__ = ("tasks", "ident", "put")

    def __init__(self, tasks: "_stdqueue.SimpleQueue", ident: int) -> None:
        self.tasks, self.ident = tasks, ident
        self.put = tasks.put


def start_worker(run_task: Callable[[Any], None], name: str,
                 on_stop: Callable[[], None] | None = None) -> Worker:
    """Start a daemon thread calling ``run_task(task)`` for each task put on the worker, in FIFO
    order, until it is stopped (:func:`stop_worker`, or the interpreter exits); then it calls
    ``on_stop()`` on its own thread."""
    tasks: _stdqueue.SimpleQueue = _stdqueue.SimpleQueue()

    def loop() -> None:
        try:
            while True:
                task = tasks.get()
                if task is _STOP:
                    break
                try:
                    run_task(task)  # reports its own errors; one that escapes must not end the worker,
                except Exception:  # or every later task (and a queue's gates) would wait forever
                    import traceback

                    traceback.print_exc()
                del task  # free the task's references now, not at shutdown
            if on_stop is not None:
                on_stop()
        finally:
            with _lock:
                _stoppers.pop(threading.get_ident(), None)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    with _lock:
        _live[thread.ident] = thread  # type: ignore[index]
        _stoppers[thread.ident] = lambda: tasks.put(_STOP)  # type: ignore[index]
    return Worker(tasks, thread.ident)  # type: ignore[arg-type]


def stop_worker(tasks: "_stdqueue.SimpleQueue") -> None:
    """Ask the worker of ``tasks`` to stop once the tasks before this call ran.

    Queues call this from their finalizer: ``SimpleQueue.put`` is documented reentrant (safe in
    ``__del__`` and weakref callbacks), it takes no lock that the interrupted code could hold.
    """
    tasks.put(_STOP)


_before_stop: list[Callable[[], None]] = []


def before_workers_stop(fn: Callable[[], None]) -> None:
    """Run ``fn()`` at interpreter exit before the queue workers are stopped and joined (a
    backend gives up its in-flight work there, so the joins do not wait for it)."""
    _before_stop.append(fn)


@atexit.register
def _stop_all_workers() -> None:
    for fn in list(_before_stop):
        fn()
    with _lock:
        stoppers = list(_stoppers.values())
        threads = list(_live.values())
    for stop in stoppers:
        stop()
    deadline = time.monotonic() + JOIN_TIMEOUT_S  # a worker stuck on a wait cannot hold exit long
    for t in threads:
        if t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
