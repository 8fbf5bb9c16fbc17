"""Worker threads of non-blocking queues, and stopping them cleanly at interpreter exit.

A queue's worker is a daemon thread so that a forgotten queue never keeps a program alive. But
CPython kills daemon threads that are still running when the interpreter finalises; a worker
caught then while it frees a task's last references (a PyTorch tensor, whose destructor
re-acquires the GIL from C++) aborts the whole process ("terminate called without an active
exception"). So every worker is registered here, and an ``atexit`` hook asks each one to stop
and joins it while the interpreter is still whole. Workers also drop each task as soon as it
ran, so no task outlives its work in a worker's frame.

The joins at exit share a short grace (:data:`EXIT_GRACE_S`): time for the tasks that take
milliseconds (a copy, a model's forward pass, a small kernel) to end. A worker still running
then is inside a long task (a CPU kernel, which nothing can preempt; a wait for a device): the
process ends under it, and the OS stops it, instead of Ctrl-C (or the end of the program)
waiting for the task. Such a task's later work is lost, as when a program is killed.
"""

from __future__ import annotations

import atexit
import gc
import queue as _stdqueue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

_STOP = None
_live: weakref.WeakValueDictionary[int, threading.Thread] = weakref.WeakValueDictionary()
_stoppers: dict[int, Callable[[], None]] = {}
_lock = threading.Lock()
#: at exit, how long the queue workers get, all together, to finish their tasks and stop; one
#: still running then is left to the OS (see the module doc). Short on purpose: Ctrl-C returns the
#: prompt within a second even with a long kernel on a queue's worker.
EXIT_GRACE_S = 0.5


class Worker:
    """A started worker: ``put(task)`` hands it a task; ``ident`` is its thread's id."""

    __slots__ = ("tasks", "ident", "put")

    def __init__(self, tasks: _stdqueue.SimpleQueue, ident: int) -> None:
        self.tasks, self.ident = tasks, ident
        self.put = tasks.put


def start_worker(run_task: Callable[[Any], None], name: str, on_stop: Callable[[], None] | None = None) -> Worker:
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
                except Exception:  # noqa: BLE001 - or every later task (and a queue's gates) would wait forever
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


def stop_worker(tasks: _stdqueue.SimpleQueue) -> None:
    """Ask the worker of ``tasks`` to stop once the tasks before this call ran.

    Queues call this from their finalizer: ``SimpleQueue.put`` is documented reentrant (safe in
    ``__del__`` and weakref callbacks), it takes no lock that the interrupted code could hold.
    """
    tasks.put(_STOP)


_before_stop: list[Callable[[], Any]] = []


def before_workers_stop(fn: Callable[[], Any]) -> None:
    """Run ``fn()`` at interpreter exit before the queue workers are stopped and joined (a
    backend gives up its in-flight work there, so the joins do not wait for it). ``fn`` returns
    True when it leaves native work running on threads of its own (a kernel's blocks on a pool):
    the end of the interpreter is then made quick as for a worker left running."""
    _before_stop.append(fn)


@atexit.register
def _stop_all_workers() -> None:
    left_running = False
    for fn in list(_before_stop):
        left_running = bool(fn()) or left_running
    with _lock:
        stoppers = list(_stoppers.values())
        threads = list(_live.values())
    for stop in stoppers:
        stop()
    deadline = time.monotonic() + EXIT_GRACE_S  # a long task, or a stuck wait, never holds exit
    for t in threads:
        if t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
            left_running = left_running or t.is_alive()
    if left_running or isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        _end_quickly()  # a worker is left running, or the program ends on an uncaught Ctrl-C


def _end_quickly() -> None:
    """A worker is left running, or a Ctrl-C ends the program (``sys.last_value``: the uncaught
    KeyboardInterrupt): make the rest of the interpreter's end quick. Its full garbage
    collections walk the whole heap (0.2 s each with numba loaded, 1-7 s in all on a busy
    machine, and the demo's heap with PyTorch takes longer) while a worker's task could end and
    re-take the GIL; frozen, the heap is left to the OS like the worker. Objects reachable only
    through reference cycles then end without their finalizers, as when a program is killed. (A
    program that catches the KeyboardInterrupt and exits can call ``gc.freeze()`` itself, as
    ``alpyka demo`` does.)"""
    gc.disable()
    gc.freeze()
