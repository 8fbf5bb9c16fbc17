"""The errors of a queue's asynchronous tasks, and which ``wait()`` reports them.

Shared by every queue implementation (host queues and device queues), so that an error behaves
the same on every backend:

- each task that can fail gets a sequence number; its exception is kept under that number;
- while an error is pending (not yet reported by a finished ``wait()``), later tasks are
  skipped (counted) and records of events carry the error;
- ``wait()`` reports the first error among the tasks it waited for that no wait finished before
  it started: two threads waiting at once both see it; a wait that starts after one has
  reported it does not, and the queue is usable again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ._errors import AsyncError


class ErrorLog:
    """Errors of one queue's tasks by sequence number (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0  # tasks numbered so far
        self.cleared = 0  # errors of tasks up to this one were reported by a finished wait
        self.errors: dict[int, BaseException] = {}
        self.skipped = 0
        #: waits for other queues' events, by sequence number: ``() -> error or None``, asked
        #: once the queue's own work has passed that point (see :meth:`resolve`)
        self.imports: dict[int, Callable[[], BaseException | None]] = {}

    def next_seq(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq

    def add_import(self, resolver: Callable[[], BaseException | None]) -> int:
        """Number a wait for another queue's event whose errors this queue must report."""
        with self.lock:
            self.seq += 1
            self.imports[self.seq] = resolver
            return self.seq

    def resolve(self, upto: int) -> None:
        """Turn the imports numbered up to ``upto`` into errors of this queue. Call it only once
        the queue's work up to there finished (the other queue's work before the event too)."""
        if not self.imports:
            return
        with self.lock:
            due = sorted(s for s in self.imports if s <= upto)
            resolvers = [(s, self.imports.pop(s)) for s in due]
        for s, resolver in resolvers:
            err = resolver()
            if err is not None:
                wrapped = AsyncError(f"work before an event this queue waited for failed: {err!r}")
                wrapped.__cause__ = err
                self.add(s, wrapped)

    def add(self, seq: int, error: BaseException) -> None:
        with self.lock:
            self.errors[seq] = error

    def skip(self) -> None:
        with self.lock:
            self.skipped += 1

    def first_between(self, lo: int, hi: int) -> BaseException | None:
        """The error of the first failed task numbered in ``(lo, hi]``."""
        with self.lock:
            hits = [s for s in self.errors if lo < s <= hi]
            return self.errors[min(hits)] if hits else None

    def first_pending(self) -> BaseException | None:
        """The first error no finished wait reported yet."""
        if not self.errors:  # the common case, without the lock (a dict read is atomic)
            return None
        with self.lock:
            hits = [s for s in self.errors if s > self.cleared]
            return self.errors[min(hits)] if hits else None

    def pending(self) -> bool:
        return self.first_pending() is not None

    def wait_range(self) -> tuple[int, int]:
        """``(lo, hi)`` for a wait starting now: it reports errors of tasks in ``(lo, hi]``."""
        with self.lock:
            return self.cleared, self.seq

    def finish_wait(self, lo: int, hi: int, what: str) -> None:
        """Close a wait over ``(lo, hi]``: raise the first error among those tasks. Errors are
        kept (events recorded before them still report them); the queue runs tasks again."""
        with self.lock:
            hits = [s for s in self.errors if lo < s <= hi]
            err = self.errors[min(hits)] if hits else None
            skipped = self.skipped
            if hi > self.cleared:
                self.cleared = hi
                self.skipped = 0
        if err is not None:
            note = f" ({skipped} later task(s) on this queue were skipped)" if skipped else ""
            raise AsyncError(f"asynchronous work on the {what} failed: {err!r}{note}") from err
