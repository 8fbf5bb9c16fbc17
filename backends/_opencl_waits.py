"""Waits for OpenCL events: polled, handed to a waiter thread, or joined (the runtime's own wait
in the calling thread), and which one a queue's wait takes (:class:`WaitChoice`)."""

from __future__ import annotations

import _thread
import ctypes
import ctypes.util
import functools
import glob
import os
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pyopencl as cl

from ._gpu_queue import wait_polling
from ._other_load import OtherLoad

_COMPLETE = cl.command_execution_status.COMPLETE
_STATUS = cl.event_info.COMMAND_EXECUTION_STATUS


def wait_event(ev: cl.Event) -> None:
    """Block until ``ev`` (flushed) completed, raising its error if it failed: polled, so that
    Ctrl-C reaches a thread waiting for a long kernel (:func:`~backends._gpu_queue.wait_polling`).
    (``get_info`` directly: pyopencl's ``command_execution_status`` property adds a Python call.)"""
    status = ev.get_info
    wait_polling(lambda: status(_STATUS) <= _COMPLETE)  # negative: failed, over too
    if status(_STATUS) < 0:
        ev.wait()  # the runtime's own error for the failed command


@functools.cache
def opencl_library() -> Any:
    """The ICD loader pyopencl uses (its bundled ``libOpenCL``, else the system's), or None; looked
    for once a process (``find_library`` runs the compiler and the linker)."""
    candidates = sorted(glob.glob(os.path.join(os.path.dirname(cl.__file__), ".libs", "libOpenCL*.so*")))
    found = ctypes.util.find_library("OpenCL")
    for path in candidates + ([found] if found else []):
        try:
            lib = ctypes.CDLL(path)
            lib.clFlush, lib.clWaitForEvents  # noqa: B018 (both must be there)
        except (OSError, AttributeError):
            continue
        return lib
    return None


def _find_cl_wait() -> Callable[[Any], None]:
    """``wait(ev)``: ``clWaitForEvents`` through ctypes (which lets go of the GIL in plain C, as
    ``time.sleep`` does: a waiter thread still in it when the interpreter ends is stopped as any
    daemon thread in a blocking call is); pyopencl's ``Event.wait`` where ctypes finds no loader."""
    lib = opencl_library()
    if lib is None:
        return lambda ev: ev.wait()
    fn = lib.clWaitForEvents
    fn.argtypes, fn.restype = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int32

    def wait(ev: Any, _fn: Any = fn) -> None:
        _fn(1, ctypes.byref(ctypes.c_void_p(ev.int_ptr)))  # a failure: the caller reads the status

    return wait


_native_wait = _find_cl_wait()
#: how long the thread that waits sleeps at most between looks at a Ctrl-C (it is woken at once
#: when the command completes; a signal interrupts the sleep on POSIX anyway)
HANDED_SLICE_S = 0.1
#: a handed wait first polls this long, yielding the core between polls: about what a blocking tiny
#: launch takes where the runtime's workers have a core (then no hand-over is needed)
HANDED_POLL_S = 30e-6
_yield_core = getattr(os, "sched_yield", lambda: None)
#: an idle waiter looks this often whether the thread it waits for still runs (and ends if not)
WAITER_IDLE_S = 5.0


class _Waiter:
    """A daemon thread that waits for events with the runtime's own wait, one at a time, for one
    Python thread (:func:`wait_event_handed`). It holds no lock and runs no user code."""

    __slots__ = ("requests", "busy")

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.busy = False  # set and cleared by the owner thread only
        owner = threading.current_thread()
        threading.Thread(target=self._run, args=(owner,), name="alpyka-opencl-waiter", daemon=True).start()

    def _run(self, owner: threading.Thread) -> None:
        get = self.requests.get
        while True:
            try:
                item = get(timeout=WAITER_IDLE_S)
            except queue.Empty:
                if owner.is_alive():
                    continue
                return  # the thread it waited for has ended: no one will hand it a wait
            if item is None:  # retired, after the wait it was in
                return
            ev, done = item
            try:
                _native_wait(ev)
            finally:
                del ev
                done.release()


_waiters = threading.local()


#: the main thread's ident (where a Ctrl-C's KeyboardInterrupt is raised)
_main_ident = threading.main_thread().ident


def _forget_waiters() -> None:
    """In a forked child: the waiter threads were not copied, so the next wait starts its own;
    the thread that forked is the child's main thread."""
    global _waiters, _main_ident
    _waiters = threading.local()
    _main_ident = threading.main_thread().ident


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_waiters)


def wait_event_handed(ev: cl.Event, poll_s: float | None = None) -> None:
    """:func:`wait_event` for a runtime that runs a command in the thread that waits for it (Intel's
    CPU runtime: a tiny kernel runs inside ``clWaitForEvents``; polled, the command waits for a
    worker thread of the runtime, which other processes on the cores delay by whole time
    slices). First polled for ``poll_s`` (default :data:`HANDED_POLL_S`: enough where the
    runtime's workers have a core; 0 on busy cores); then a waiter thread waits with the
    runtime's own wait (the native library's, :func:`use_native_hand_over`, else one of the
    calling thread in Python); the caller sleeps until the waiter wakes it, at once, and a
    Ctrl-C still reaches it (its sleep is interrupted by signals; at most
    :data:`HANDED_SLICE_S` either way).
    A wait interrupted leaves its waiter to finish alone: the next wait gets another."""
    status = ev.get_info
    clock, t0 = time.perf_counter, time.perf_counter()
    poll_s = HANDED_POLL_S if poll_s is None else poll_s
    while status(_STATUS) > _COMPLETE and clock() - t0 < poll_s:
        _yield_core()  # where the runtime's workers have a core, they finish a tiny command here
    if status(_STATUS) > _COMPLETE:
        hand_over = _hand_over
        if hand_over is not None:
            if _wait_handed_natively(hand_over(ev.int_ptr)) != 0 and status(_STATUS) > _COMPLETE:
                ev.wait()  # the runtime's wait failed, its command still runs: pyopencl's wait
        else:
            _hand_to_python_waiter(ev)
    if status(_STATUS) < 0:
        ev.wait()  # the runtime's own error for the failed command


def use_native_hand_over(hand_over: Callable[[int], Any]) -> None:
    """Hand waits to the native library's ``hand_over(event)`` from now on
    (backends/_opencl_native.c: a waiter thread that never takes the GIL; on busy cores each GIL
    hand-over between a Python waiter and the caller can wait for a preempted thread: Intel, 2
    spinners on 2 cores, a launch with a scalar never seen, ~200 us -> 34 us). The library calls
    it once it is loaded (an OpenCL queue loads a cached build when it is made, the first
    blocking launch builds it: backends/_opencl_native.py); until then, and where it cannot be
    built, a Python waiter thread waits."""
    global _hand_over
    _hand_over = hand_over


#: the native library's ``hand_over`` (:func:`use_native_hand_over`), None: a Python waiter thread
_hand_over: Any = None


def _wait_handed_natively(handed: Any) -> int:
    """Wait out a native hand-over a slice at a time (back in Python between slices: a Ctrl-C,
    or an exception another thread raises here, is raised at once); its ``clWaitForEvents``
    answer. A wait interrupted gives its waiter up (it finishes alone)."""
    try:
        while (err := handed.wait(HANDED_SLICE_S)) is None:
            pass
    except BaseException:
        handed.give_up()
        raise
    return err


def _hand_to_python_waiter(ev: cl.Event) -> None:
    """The hand-over where no native library is built: this thread's :class:`_Waiter`."""
    waiter = getattr(_waiters, "waiter", None)
    if waiter is None or waiter.busy:
        if waiter is not None:
            waiter.requests.put(None)  # it ends after the wait it is in
        waiter = _waiters.waiter = _Waiter()
    done = _thread.allocate_lock()
    done.acquire()
    waiter.busy = True
    waiter.requests.put((ev, done))
    while not done.acquire(timeout=HANDED_SLICE_S):
        pass
    waiter.busy = False


def runs_commands_in_waits(device: Any) -> bool:
    """Whether ``device``'s runtime runs a command in the thread that waits for it (Intel's CPU
    OpenCL, built on TBB: the waiting thread joins the work), so that waits are handed to a
    waiter thread (:func:`wait_event_handed`) rather than polled."""
    native = device.native
    return native.platform.name.strip().startswith("Intel") and bool(native.device.type & cl.device_type.CPU)


def wait_event_joined(ev: cl.Event) -> None:
    """Block until ``ev`` (flushed) completed, raising its error if it failed: the runtime's own
    wait in the calling thread (``clWaitForEvents`` through ctypes, without the GIL). As fast as
    ``clFinish`` on a busy machine (Intel's runtime runs the command in this thread; PoCL wakes it
    from a condition variable), but a Ctrl-C reaches the thread only once the wait returned: used
    where no Ctrl-C has to (a thread other than the main one) or the wait is known to be short
    (:class:`WaitChoice`). At interpreter exit a daemon thread still inside it is stopped as one in
    ``time.sleep`` is: the GIL is taken back in plain C, never from the runtime's C++."""
    _native_wait(ev)
    if ev.get_info(_STATUS) < 0:
        ev.wait()  # the runtime's own error for the failed command


#: a wait of the main thread joins the runtime (:func:`wait_event_joined`) only for work whose last
#: wait (the same launcher with the same objects and scalar values, or the same mix of such work
#: on one queue) ended within this long; a Ctrl-C then waits for at most about this long unless
#: such work runs far longer than the last time (its data alone decides). Not lower: a tiny wait
#: of a thread preempted on busy cores took 50+ ms now and then, and each then went back to the
#: interruptible wait, ms a launch there (Intel, 4 spinners on 2 cores: 3.7x raw at 50 ms)
JOIN_LIMIT_S = 0.2


#: how busy other processes keep the cores, shared by every queue of the process
other_load = OtherLoad()
#: a known launch whose last wait took less than this is tiny: on free cores (:class:`WaitChoice`)
#: any thread waits for it interruptibly, whose first polls (yielding the core) see a worker of
#: the runtime end it on another core sooner than the runtime's own wait returns; a longer one is
#: joined (its wait's end is then exact, and the waiting thread spends no CPU)
TINY_WAIT_S = 100e-6
#: a wait for a tiny command chosen for free cores that takes longer than this stalled: the cores
#: count as busy for a while (:meth:`~backends._other_load.OtherLoad.stalled`)
STALLED_S = 1e-3


class TimeCell(list):
    """The time cell of a kind of known work (a fast launcher's runs with one set of arguments, a
    graph's replays, a queue's transfers of a kind and size): ``[seconds its last wait took, or
    None]``, a one-item list as the native launch takes it, with a :attr:`token` that stands for
    the work in a queue's sums of known work (``OpenCLQueue.after_known``). Not ``id()``: a cell
    made after another was freed may get its id, and its new work was then taken for the mix the
    old work was learned in (a joined, uninterruptible wait for a long kernel)."""

    __slots__ = ("token",)


#: the tokens' source (seeded from the OS): a random 64-bit token is never a freed cell's, and sums
#: of a few tokens of different mixes of work are equal only with a chance of about 2**-64
_tokens = random.Random()


def time_cell() -> TimeCell:
    """A new :class:`TimeCell`: no time known, a token of its own."""
    cell = TimeCell((None,))
    cell.token = _tokens.getrandbits(64)
    return cell


#: :meth:`WaitChoice.choose`'s answers: the runtime's own wait (joined), an interruptible wait for
#: a tiny command on free cores, an interruptible wait, a wait for known short or tiny work behind
#: an unfinished command of its queue (interruptible in the main thread, joined in others; its
#: time, the work ahead's too, is not learned)
JOINED, TINY_FREE, INTERRUPTIBLE, BEHIND = 0, 1, 2, 3


class WaitChoice:
    """How an OpenCL queue waits for an event (a device's choice, made once per queue).

    A thread other than the main one joins the runtime (:func:`wait_event_joined`): Python raises
    a Ctrl-C's KeyboardInterrupt in the main thread only. The main thread joins only for a launch
    known to be short (:meth:`wait_timed`: pyopencl's ``Event.wait``, 2-3 us less than through
    ctypes and safe there, as the thread that runs the interpreter's end waits in none);
    otherwise it waits interruptibly: handed to a waiter thread where the runtime runs commands in
    the thread that waits (:func:`wait_event_handed`, Intel's CPU runtime), polled elsewhere
    (:func:`wait_event`) on free cores (:attr:`on_free_cores`), and on busy cores handed at once
    to a waiter thread whatever the runtime (:meth:`wait_interruptibly`). A tiny known launch
    (:data:`TINY_WAIT_S`) is joined only while other processes keep the cores busy (:attr:`load`,
    :class:`~backends._other_load.OtherLoad`); on free cores any thread waits for it
    interruptibly. Known work behind an unfinished command of its queue (:data:`BEHIND`) is
    waited for as :meth:`wait` waits, and its time is not learned. A simulator (Oclgrind) always
    polls."""

    __slots__ = ("interruptible", "on_free_cores", "joins", "load", "queue_idle")

    def __init__(self, device: Any) -> None:
        simulator = bool(device.properties.get("simulator"))
        handed = not simulator and runs_commands_in_waits(device)
        self.on_free_cores: Callable[[cl.Event], None] = wait_event_handed if handed else wait_event
        self.interruptible: Callable[[cl.Event], None] = self.wait_interruptibly
        self.joins = not simulator
        self.load = other_load  # (.busy: other processes leave too few free cores)
        #: whether the queue has no command unfinished (its queue sets it): known work joins in the
        #: main thread only behind none (a kernel a caught Ctrl-C left running, another thread's)
        self.queue_idle: Callable[[], bool] = _always

    def wait_interruptibly(self, ev: cl.Event) -> None:
        """Wait for ``ev`` (flushed) so that a Ctrl-C reaches the waiting thread: on busy cores a
        waiter thread at once (no polling first: each ``sched_yield`` of a busy core can give it
        to another process for a whole time slice; Intel, 2 spinners on 2 cores, a launch with a
        changed scalar: 7.8 ms -> 0.2 ms), else :attr:`on_free_cores`. The wait's time counts
        towards the load's next reading, as a known wait's does (:meth:`choose`)."""
        load, t0 = self.load, _clock()
        if load.busy and self.joins:
            wait_event_handed(ev, 0.0)
        else:
            self.on_free_cores(ev)
        now = _clock()
        load.left -= now - t0
        if load.left < 0.0:
            load.used_up(now)

    def wait(self, ev: cl.Event) -> None:
        """Wait for ``ev`` (flushed): joined outside the main thread, interruptibly in it."""
        if self.joins and _get_ident() != _main_ident:
            wait_event_joined(ev)
        else:
            self.interruptible(ev)

    def wait_timed(self, ev: cl.Event, took: list, flush: Callable[[], None]) -> None:
        """Wait for ``ev`` (not flushed: ``flush()`` flushes its queue), the end of the known
        work since the queue's last wait (``q.wait()``), whose last wait took ``took[0]`` seconds
        (None: unknown), and store this one's time there: :meth:`choose`, then
        :meth:`wait_chosen` (``ev`` is the queue's last command: no idle queue is asked for)."""
        self.wait_chosen(self.choose(took[0], False), ev, took, flush, _clock())

    def choose(self, last: float | None, behind: bool = True) -> int:
        """How to wait for the command of a launch whose last run with the same objects and scalar
        values took ``last`` seconds (None: unknown), decided before it is enqueued (on PoCL a
        0.6 us delay between the enqueue and the wait cost up to 1.3x in some runs on busy cores;
        asked after the enqueue instead, no faster in an A/B): :data:`TINY_FREE` (interruptibly:
        that run was tiny and the cores are free, :attr:`load` read once such waits took ~0.02 s;
        :data:`BEHIND` where, ``behind``, another command of the queue is unfinished: the wait's
        time would be that work's too, learned as the run's and taken for a stall), else
        :data:`JOINED` outside the main thread (the runtime's wait flushes the queue itself) and
        in it where that run ended within :data:`JOIN_LIMIT_S` and (``behind``: the command is
        enqueued behind the queue's others) no other command of the queue is unfinished (else
        :data:`BEHIND`, in any thread: joined outside the main thread, but that wait's time is
        the work ahead's too), else :data:`INTERRUPTIBLE`."""
        if last is not None and self.joins:
            if last < TINY_WAIT_S:
                load = self.load  # (OtherLoad.busy_at, inlined: ~0.2 us less a launch)
                load.left -= last
                if load.left < 0.0:
                    load.used_up(_clock())
                if not load.busy:
                    return TINY_FREE if not behind or self.queue_idle() else BEHIND
            if last < JOIN_LIMIT_S:
                return JOINED if not behind or self.queue_idle() else BEHIND
        if self.joins and _get_ident() != _main_ident:
            return JOINED
        return INTERRUPTIBLE

    def wait_chosen(self, how: int, ev: cl.Event, took: list, flush: Callable[[], None], t0: float) -> None:
        """Wait for ``ev`` as :meth:`choose` said (``how``), and store in ``took[0]`` the time
        since ``t0`` (None where the wait is interrupted or the command failed; unchanged for
        :data:`BEHIND`: that time was the work ahead's too, waited for as :meth:`wait` waits)."""
        try:
            if how == JOINED:
                if _get_ident() == _main_ident:
                    ev.wait()  # (raises the runtime's error for a failed command)
                else:
                    wait_event_joined(ev)
            else:
                flush()
                if how == BEHIND:
                    self.wait(ev)  # (joined outside the main thread: no Ctrl-C reaches it there)
                else:
                    self.interruptible(ev)
        except BaseException:
            took[0] = None  # an interrupted or failed wait leaves the launch unknown
            raise
        if how == BEHIND:
            return
        took[0] = t = _clock() - t0
        if how == TINY_FREE and t > STALLED_S:  # the cores were busy after all (this process's own threads?)
            self.load.stalled(t0 + t)


_clock, _get_ident = time.perf_counter, _thread.get_ident


def _always() -> bool:
    return True
