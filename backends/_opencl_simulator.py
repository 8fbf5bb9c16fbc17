"""The lock of a simulated OpenCL device's queues (Oclgrind), and the helper thread that runs their
commands for the main thread, so that a Ctrl-C reaches it during a long simulated kernel."""

from __future__ import annotations

import _thread
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: how long the main thread sleeps at most between looks at a Ctrl-C while the runner runs its
#: commands (it is woken at once when they ran; a signal interrupts the sleep on POSIX anyway)
RUN_SLICE_S = 0.1

_acquire = _thread.RLock.acquire
_get_ident, _allocate_lock = _thread.get_ident, _thread.allocate_lock


def _locked() -> Any:
    lock = _allocate_lock()
    lock.acquire()
    return lock


class SimulatorLock(_thread.RLock):
    """The lock of every queue of one simulated device: enqueues on them and runs of their
    commands take it (Oclgrind's state is the device's, without a lock of its own).

    Oclgrind runs commands inside the native call of the thread that flushes or waits, for as long
    as they take (a kernel: its whole simulation), and a thread inside a native call runs no
    Python: a Ctrl-C's KeyboardInterrupt would wait for the simulation's end. So the main thread
    has its runs (:meth:`run`) made by a helper thread of the lock (the runner) and sleeps on a
    lock that a Ctrl-C interrupts. A simulation cannot be cancelled: an interrupted run goes on in
    the runner, and whoever takes the lock next first waits for its end (interruptibly, as long as
    it takes), so the queues stay usable and nothing enqueues into a queue being simulated.
    Other threads run the commands themselves (no Ctrl-C is raised there)."""

    __slots__ = ("_job", "_wake", "_runner")

    def __init__(self) -> None:
        super().__init__()
        #: (fn, done, errors, claim): handed to the runner, not yet run to its end (claim: taken by
        #: the runner that runs it, so that a second runner, started where a Ctrl-C hit the first's
        #: start, never runs it again)
        self._job: tuple | None = None
        self._wake = _locked()  # released to wake the runner (a plain lock: no Python code inside)
        self._runner: threading.Thread | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock; where this thread did not hold it already, wait for the end of a run
        the main thread handed over and was interrupted in (:meth:`settle`; not bounded by
        ``timeout``; a non-blocking acquire fails instead). Never left held by an exception
        raised in it (a Ctrl-C just as the lock was taken included)."""
        owned = self._is_owned()  # (a Ctrl-C raised here: nothing taken yet)
        try:
            # a KeyboardInterrupt inside the try comes after the acquire returned, or from its wait
            if not _acquire(self, blocking, timeout):
                return False
            if not owned and self._job is not None:
                if not blocking:
                    self.release()
                    return False
                self.settle()
        except BaseException:
            if owned or self._is_owned():  # taken in this call (recursively: always)
                self.release()
            raise
        return True

    def __enter__(self) -> bool:
        return self.acquire()

    def settle(self) -> None:
        """Return once no run handed to the runner is going on (interruptibly)."""
        job = self._job
        if job is None:
            return
        self._poke()  # (handed over, perhaps not yet woken: a Ctrl-C right after the hand-over)
        done = job[1]
        while not done.acquire(timeout=RUN_SLICE_S):
            if sys.is_finalizing():  # (the runner, a daemon thread, may never come back)
                return
        done.release()

    def run(self, fn: Callable[[], None]) -> None:
        """Call ``fn()``, a native call that runs simulated commands; the caller holds the lock.
        In the main thread the runner calls it, and the main thread sleeps until it returned (a
        Ctrl-C raises there, the run going on); ``fn``'s error is raised here either way."""
        self.settle()  # (a run this thread was interrupted in while it held the lock)
        if _get_ident() != threading.main_thread().ident or sys.is_finalizing() or not self._has_runner():
            fn()  # (no Ctrl-C to let through; or the interpreter ends: its daemon threads may stop)
            return
        done = _allocate_lock()
        done.acquire()
        errors: list[BaseException] = []
        self._job = (fn, done, errors, _allocate_lock())  # one store: from here on whoever takes the lock waits for it
        self._poke()
        while not done.acquire(timeout=RUN_SLICE_S):
            pass
        if errors:
            raise errors[0]

    def _has_runner(self) -> bool:
        """Whether the runner runs (started here where it does not; False where no thread can
        be started: the interpreter's end)."""
        if self._runner is None or not self._runner.is_alive():
            runner = threading.Thread(target=self._serve, name="alpyka-simulator-runner", daemon=True)
            self._runner = runner  # (before start: a Ctrl-C in start's wait leaves it known, not a second one)
            try:
                runner.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown"
                self._runner = None
                return False
        return True

    def forget_runner(self) -> None:
        """In a forked child: the runner thread was not copied, nor is its run going on."""
        self._job, self._runner, self._wake = None, None, _locked()

    def _poke(self) -> None:
        """Wake the runner (it then looks for a job)."""
        try:
            self._wake.release()
        except RuntimeError:  # (awake already)
            pass

    def _serve(self) -> None:
        """The runner: call each job's ``fn`` as it is handed over, then mark it done."""
        wake = self._wake
        while True:
            wake.acquire()
            job = self._job
            if job is None or not job[3].acquire(False):  # none, or claimed by another runner
                continue
            fn, done, errors, _ = job
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - raised in the thread that handed it over
                errors.append(exc)
            finally:
                self._job = None
                done.release()


#: a simulator's context (by its address: contexts live as long as their device) -> the lock of
#: all its queues; two queues of one device, each run by its own host-function worker, gave
#: wrong sums without it
_SIMULATOR_LOCKS: dict[int, SimulatorLock] = {}


def simulator_lock(context: Any) -> SimulatorLock:
    """The :class:`SimulatorLock` of the simulated device whose context is ``context``."""
    lock = _SIMULATOR_LOCKS.get(context.int_ptr)
    if lock is None:
        lock = _SIMULATOR_LOCKS.setdefault(context.int_ptr, SimulatorLock())
    return lock


def _forget_runners() -> None:
    for lock in _SIMULATOR_LOCKS.values():
        lock.forget_runner()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_runners)
