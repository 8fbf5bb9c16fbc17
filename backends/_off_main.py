"""A native call that cannot be interrupted, made for the main thread by a helper thread, so that a
Ctrl-C reaches the main thread at once: an OpenCL program's build.

``clBuildProgram`` runs the runtime's compiler inside the calling thread (PoCL: its LLVM, linked
into the runtime, no child process), and pyopencl offers no way to abandon it; a thread inside
a native call runs no Python, so a Ctrl-C's KeyboardInterrupt waited for the build's end (1.7-2.4
s for the kernels of the examples on PoCL, the whole build for a large program). Here the main
thread hands the call to a daemon thread and sleeps on a lock that a Ctrl-C interrupts; the call
goes on to its end in that thread (its result dropped), as it would have in the main thread, and
ends with the process where the KeyboardInterrupt ends the program: no process is left behind
(the compiler is the runtime's own code, in this process), and pyopencl's program cache is
written under its lock as before. A call names what it makes (``key``: an OpenCL program's
context, devices, source and options): a program that caught the Ctrl-C and asks for the same
program again waits for the call left running, and gets its result or its error, instead of
starting a second build beside it. Other threads make the call themselves (no Ctrl-C is raised
there), as does the main thread while the interpreter ends.

A call left running must not return while the interpreter finalises: its thread, coming back
from the native call, finds the interpreter gone and is ended by ``pthread_exit``, whose unwind
through pybind11's C++ frames calls ``std::terminate`` (``alpyka info`` interrupted during a
device probe's build: 1 run in 20 ended by SIGABRT, "terminate called without an active
exception"). So at exit (``atexit``, after the program's end), while such a call still runs, a
program that an uncaught Ctrl-C ends ends at once, killed by SIGINT as it would have ended
(the atexit hooks registered before this module's, such as logging's, and the interpreter's
finalisation are skipped: the price of a Ctrl-C within 1 s during a build); a program that
caught the interrupt, or an interactive session, waits for the call, saying so, as it would
have waited in the main thread, and a second Ctrl-C then ends it at once. A build made by another
thread (a daemon thread launching a kernel the first time) is waited for the same way: the
program's end would otherwise cut it short the same way.
"""

from __future__ import annotations

import _thread
import atexit
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from portable.cli import die_by_sigint

T = TypeVar("T")

#: how long the main thread sleeps at most between looks at a Ctrl-C (woken at once when the call
#: returned; a signal interrupts the sleep on POSIX anyway)
WAIT_SLICE_S = 0.1


def call_off_main(fn: Callable[[], T], name: str = "alpyka-build", key: Hashable | None = None) -> T:
    """``fn()``; on the main thread called by a daemon thread named ``name`` while the main thread
    waits interruptibly (a Ctrl-C raises KeyboardInterrupt here at once, the call going on).
    ``fn``'s exception is raised here, with its traceback. A ``key`` names what the call makes
    (an OpenCL program: its context, devices, source and options): while a call of that key runs
    in a helper thread (one a caught Ctrl-C left running), a request of the same key, in any
    thread, waits for it and gets its result, or its exception, instead of making it again."""
    if sys.is_finalizing():
        return fn()
    if threading.current_thread() is not threading.main_thread():
        return _tracked(lambda: _outcome(_call_for(fn, name, key)))
    return _outcome(_call_for(fn, name, key))  # (no local holds the call: see _outcome)


class _Call:
    """One call of ``fn``: its ``result`` or ``failure`` once ``done`` is released (held while the
    call runs); ``helper``, the thread making it for the main thread (None: the caller's own)."""

    def __init__(self, fn: Callable[[], object], key: Hashable | None) -> None:
        self.fn: Callable[[], object] | None = fn
        self.key = key
        self.result: object = None
        self.failure: BaseException | None = None
        self.helper: threading.Thread | None = None
        self.done = _thread.allocate_lock()
        self.done.acquire()

    def run(self, keyed: bool = False) -> None:
        """Make the call (in the thread that runs this), then release ``done``; ``keyed``: known
        by its key in :data:`_keyed` while it runs (unless a call of that key runs already)."""
        if keyed and self.key is not None:
            _keyed.setdefault(self.key, self)  # (by the call itself: no entry outlives it)
        try:
            self.result = self.fn()  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - raised in the threads that wait for it
            self.failure = exc
        finally:
            self.fn = None  # (what it held goes with the call's end)
            if self.key is not None and _keyed.get(self.key) is self:
                del _keyed[self.key]
            self.done.release()
            del self  # (no cycle from the failure's traceback through this frame back to it)

    def wait(self) -> None:
        """Until the call ended; interruptible on the main thread (a signal interrupts the sleep)."""
        while not self.done.acquire(timeout=WAIT_SLICE_S):
            pass
        self.done.release()


#: keyed calls running in a helper thread, by key (each removed as it ends)
_keyed: dict[Hashable, _Call] = {}


def _call_for(fn: Callable[[], object], name: str, key: Hashable | None) -> _Call:
    """The call this request waits for: the running call of ``key``; else, on the main thread, a
    new call started in a helper thread; in any other thread, a new call made here."""
    joined = _keyed.get(key) if key is not None else None
    if joined is not None:
        return joined
    call = _Call(fn, key)
    if threading.current_thread() is not threading.main_thread():
        call.run()
        return call
    call.helper = threading.Thread(target=call.run, args=(True,), name=name, daemon=True)
    try:  # (the call names its key itself once it runs: a call that never started is waited for by none)
        call.helper.start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        call.helper = None
        call.run()
    except BaseException:  # a Ctrl-C while it starts: the call may run on
        _left_running.append(call.helper)
        raise
    return call


def _outcome(call: _Call) -> Any:
    """``call``'s result once it ended, or its exception, raised here with its traceback; where a
    Ctrl-C ends the wait, the helper making the call is left to :func:`_at_exit`. No frame the
    exception passes through keeps the call (or the exception) alive: that cycle would keep a
    failed build's program and context until the garbage collector ran."""
    try:
        call.wait()
    except BaseException:
        if call.helper is not None and call.helper not in _left_running:
            _left_running.append(call.helper)  # (its end is waited for, or cut short, at exit)
        raise
    failure, result = call.failure, call.result
    del call
    if failure is not None:
        try:
            raise failure
        finally:
            del failure
    return result


#: helper threads whose caller left (a Ctrl-C) while their call ran
_left_running: list[threading.Thread] = []
#: calls running in threads other than the main one (a daemon thread's build), each a lock
#: released when it returns: at exit they are waited for as the helpers are
_in_flight: set = set()


def _tracked(fn: Callable[[], T]) -> T:
    """``fn()`` in the calling thread, known to :func:`_at_exit` while it runs."""
    done = _thread.allocate_lock()
    done.acquire()
    _in_flight.add(done)
    try:
        return fn()
    finally:
        _in_flight.discard(done)
        done.release()


def _at_exit() -> None:
    """While a call left running (or a thread's build) still runs: a program that an uncaught
    Ctrl-C ends ends now, killed by SIGINT as it would have ended (stdout and stderr flushed;
    the atexit hooks registered before this one and the interpreter's finalisation do not run);
    any other (one that caught the interrupt, an interactive session) waits for the call, saying
    so in one line; a Ctrl-C during that wait ends it at once by SIGINT."""
    running = [t for t in _left_running if t.is_alive()]
    pending = list(_in_flight)  # (a daemon thread's build, which the program did not wait for)
    if not running and not pending:
        return
    if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt) and not _interactive():
        die_by_sigint()  # (a session's last_value is any exception it printed and went on from)
    if running:
        print("waiting for an OpenCL build left running by Ctrl-C (Ctrl-C again ends now)", file=sys.stderr, flush=True)
    try:
        for t in running:
            while t.is_alive():
                t.join(WAIT_SLICE_S)
        for done in pending:
            while not done.acquire(timeout=WAIT_SLICE_S):  # (the GIL is released while it runs on)
                pass
            done.release()
    except KeyboardInterrupt:
        die_by_sigint()  # (finalising under the running build would abort the process)


def _interactive() -> bool:
    """Whether a session went on after the program (``python -i``, a REPL, IPython)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "IPython" in sys.modules


atexit.register(_at_exit)
