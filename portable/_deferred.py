"""Work that garbage-collector callbacks hand over to the next safe point.

A ``weakref.finalize`` callback or a ``__del__`` runs in the middle of whatever the thread was
doing when the last reference went away, or when the cyclic collector ran (which any allocation
can trigger): inside the allocator's lock, inside a queue's or an event's lock, inside a wait.
Work that takes a lock or calls into a queue must therefore never run there. Such callbacks only
:func:`defer` the work; it runs at the next :func:`run_deferred`, which alpyka calls at points
where it holds no lock of its own: the start of an allocation, an explicit free, a queue or
event wait, reading allocator statistics.

The hand-off is a :class:`queue.SimpleQueue`, whose ``put`` is documented reentrant (safe from
``__del__`` and weakref callbacks, even when the interrupted code was inside ``put``/``get``).
"""

from __future__ import annotations

import queue as _stdqueue
import warnings
from collections.abc import Callable
from typing import Any

_pending: _stdqueue.SimpleQueue[tuple[Callable[..., Any], tuple]] = _stdqueue.SimpleQueue()


def defer(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` at the next safe point. Safe to call from finalizers: takes no lock."""
    _pending.put((fn, args))


def run_deferred() -> None:
    """Run the work deferred so far (and any that it defers in turn). Call it holding no lock.

    An exception in one piece of work becomes a :class:`RuntimeWarning` (as an exception in a
    finalizer is reported, not raised) and does not stop the others.
    """
    if _pending.empty():  # the common case: nothing collected since the last safe point
        return
    while True:
        try:
            fn, args = _pending.get_nowait()
        except _stdqueue.Empty:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - reported, as a finalizer's error would be
            warnings.warn(
                f"alpyka: deferred cleanup {getattr(fn, '__qualname__', fn)} failed: {exc!r}",
                RuntimeWarning,
                stacklevel=2,
            )


def pending() -> int:
    """How many pieces of work wait for the next safe point (approximate under concurrency)."""
    return _pending.qsize()
