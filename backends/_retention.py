"""Keeping alive what enqueued device work uses, and letting it go without ever blocking.

A device queue keeps the Python objects of each enqueued operation (buffers, host arrays,
pyopencl's transfer events) until a marker after that operation completed (:class:`Retained`).
Some of those objects wait for their command in their destructor (a pyopencl ``NannyEvent``
blocks, holding the GIL, until its transfer finished). So they must never be destroyed while
their command is pending, least of all by the garbage collector, which runs wherever the
program happens to be (a pytest report, an unrelated allocation):

- a queue collected with work in flight hands its :class:`Retained` to the *graveyard* from its
  finalizer: one lock-free ``deque.append`` (no lock, no native call from the collector);
- a daemon *reaper* thread, started with the first queue, drops each buried :class:`Retained`
  once every command it refers to has completed; one that never completes (a runtime that
  failed) is kept, not waited for;
- at interpreter exit whatever is still pending is leaked on purpose, so the interpreter's
  teardown destroys nothing that would wait.

An object counts as pending only where its operation's native event says so: every OpenCL
operation's objects carry one; on CUDA/HIP only those already behind a marker do (at most 31
operations' objects of a collected queue are released at once; cupy's destructors do not wait).
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

#: how often the reaper looks at the graveyard (seconds), while it holds something / while empty
REAP_INTERVAL_S = 0.25
IDLE_INTERVAL_S = 1.0


class Retained:
    """The objects of one queue's enqueued work: ``pending`` (not yet behind a marker) and
    ``inflight`` (``(marker, objects)`` pairs, oldest first). ``done(obj)`` says whether a
    native event has completed (True for an object that is not an event)."""

    __slots__ = ("pending", "inflight", "done", "__weakref__")

    def __init__(self, done: Callable[[Any], bool]) -> None:
        self.pending: list[tuple] = []
        self.inflight: collections.deque[tuple[Any, list[tuple]]] = collections.deque()
        self.done = done

    def keep(self, objs: tuple) -> int:
        """Keep ``objs`` (those of one operation); returns how many operations are pending."""
        self.pending.append(objs)
        return len(self.pending)

    def retire(self, marker: Any) -> None:
        """The pending objects are now behind ``marker``: released once it completed."""
        if self.pending:
            self.inflight.append((marker, self.pending))
            self.pending = []

    def prune(self) -> None:
        """Release the objects of every completed marker, oldest first."""
        while self.inflight and self.done(self.inflight[0][0]):
            self.inflight.popleft()

    def settled(self) -> bool:
        """True when every command these objects belong to has completed (nothing waits)."""
        done = self.done
        return all(done(marker) for marker, _ in self.inflight) and all(done(objs[0]) for objs in self.pending if objs)


_graveyard: collections.deque[Retained] = collections.deque()
_live: weakref.WeakSet[Retained] = weakref.WeakSet()
_reaper: threading.Thread | None = None
_start_lock = threading.Lock()
_leaked: list[Retained] = []


def track(retained: Retained, owner: Any) -> None:
    """Bury ``retained`` when ``owner`` (its queue) is collected; start the reaper if needed.
    Call from ordinary code (a queue's constructor), never from a finalizer."""
    global _reaper
    _live.add(retained)
    weakref.finalize(owner, _graveyard.append, retained)
    if _reaper is None:
        with _start_lock:
            if _reaper is None:
                _reaper = threading.Thread(target=_reap_forever, name="alpyka-device-reaper", daemon=True)
                _reaper.start()


def reap() -> int:
    """Drop every buried :class:`Retained` whose commands completed; returns how many remain."""
    for _ in range(len(_graveyard)):
        try:
            r = _graveyard.popleft()
        except IndexError:
            break
        try:
            settled = r.settled()
        except Exception:  # noqa: BLE001 - a runtime that cannot say: keep it, never wait for it
            settled = False
        if not settled:
            _graveyard.append(r)
        del r  # a settled one is destroyed here, on the reaper's thread, and waits for nothing
    return len(_graveyard)


def _reap_forever() -> None:
    while True:  # a finalizer cannot wake it (no lock there): it looks, briefly, once a second when idle
        time.sleep(REAP_INTERVAL_S if _graveyard else IDLE_INTERVAL_S)
        reap()


@atexit.register
def _leak_pending_at_exit() -> None:
    """Keep what still waits for a command out of the interpreter's teardown (see the module
    docstring): referenced from a list whose reference count never drops to zero."""
    reap()
    pending = [r for r in list(_graveyard) + list(_live) if not _safe_settled(r)]
    if pending:
        _leaked.extend(pending)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_leaked))


def _safe_settled(r: Retained) -> bool:
    try:
        return r.settled()
    except Exception:  # noqa: BLE001
        return False
