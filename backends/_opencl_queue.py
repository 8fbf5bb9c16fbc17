"""OpenCL queues: an in-order ``cl.CommandQueue`` with alpaka's queue semantics (see _gpu_queue)."""

from __future__ import annotations

import ctypes
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import pyopencl as cl

from ._gpu_queue import DeviceQueue, Snapshot
from ._opencl_native import Waiting, native_module
from ._opencl_simulator import SimulatorLock, simulator_lock
from ._opencl_waits import TimeCell, WaitChoice, opencl_library, time_cell

_clock = time.perf_counter


def _idle_of(ref: Callable[[], Any]) -> Callable[[], bool]:
    """``queue.is_idle`` through a weak reference (a bound method would make a cycle of the queue
    and its :class:`WaitChoice`: a dropped queue, freed by the cycle collector only, reported the
    error no wait() saw that much later)."""

    def idle() -> bool:
        queue = ref()
        return queue is None or queue.is_idle()

    return idle


_COMPLETE = cl.command_execution_status.COMPLETE
_STATUS = cl.event_info.COMMAND_EXECUTION_STATUS
#: how many kinds of known work (sums of time cells' tokens) a queue keeps the wait time of
_WORK_KINDS = 64


def _find_cl_calls() -> tuple[Callable[[Any], None], Callable[[Any], None]]:
    """``flush(cq)`` and ``run_to(ev)``: ``clFlush`` and ``clWaitForEvents`` called without the
    GIL. pyopencl's ``CommandQueue.flush`` keeps the GIL, and a runtime that executes commands in
    ``clFlush`` (Oclgrind runs the queue there) would then stop every other Python thread while it
    runs them. Used for a gate's own flush and for every flush and run of a simulator's queue
    (:class:`_SimulatorRuns`)."""
    lib = opencl_library()
    if lib is None:
        return (lambda cq: cq.flush()), (lambda ev: ev.wait())
    flush_fn, wait_fn = lib.clFlush, lib.clWaitForEvents
    flush_fn.argtypes, flush_fn.restype = [ctypes.c_void_p], ctypes.c_int32
    wait_fn.argtypes, wait_fn.restype = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int32

    def flush(cq: Any, _fn: Any = flush_fn) -> None:
        code = _fn(cq.int_ptr)
        if code != 0:
            raise cl.RuntimeError(f"clFlush failed with error {code}")

    def run_to(ev: Any, _fn: Any = wait_fn) -> None:
        _fn(1, ctypes.byref(ctypes.c_void_p(ev.int_ptr)))  # a failed command: its waiter reads the status

    return flush, run_to


_flush, _run_to = _find_cl_calls()


def _complete(ev: cl.Event) -> bool:
    return ev.get_info(_STATUS) <= _COMPLETE  # negative: failed, over too


class _UserEventGate:
    """A marker (the work before the gate) and a user event the queue's later work waits on.

    The barrier on the user event is enqueued by :meth:`hold`, after the worker has the task
    that opens it, so the event always has a thread that completes it."""

    __slots__ = ("cq", "marker", "user", "barrier", "wait", "simulated")

    def __init__(
        self,
        cq: cl.CommandQueue,
        context: cl.Context,
        wait: Callable[[cl.Event], None],
        simulated: _SimulatorRuns | None = None,
    ) -> None:
        self.cq, self.wait = cq, wait  # (the queue's worker waits: joined, see WaitChoice)
        self.simulated = simulated  # a simulator's queue: where its commands run (see _SimulatorRuns)
        self.marker = cl.enqueue_marker(cq)
        self.user = cl.UserEvent(context)
        self.barrier: cl.Event | None = None

    def hold(self) -> cl.Event:
        """Make the queue's later work wait for :meth:`open`; returns the barrier's event."""
        try:
            if self.simulated is not None:
                self.barrier = self.simulated.hold(self)
            else:
                self.barrier = cl.enqueue_barrier(self.cq, wait_for=[self.user])
                _flush(self.cq)
        except BaseException:
            self.open(holder=True)  # never leave the queue behind a user event no one will complete
            raise
        return self.barrier

    def reached(self) -> None:
        self.wait(self.marker)

    def open(self, holder: bool = False) -> None:
        """Complete the user event (idempotent: the worker and a failed ``hold`` may both call it;
        ``holder``: called by the thread whose ``hold`` failed)."""
        try:
            if self.user.command_execution_status != _COMPLETE:
                self.user.set_status(_COMPLETE)
        except cl.Error:  # completed by the other caller in between: open either way
            pass
        if self.simulated is not None:
            self.simulated.opened(self, holder)


class _SimulatorRuns:
    """Where the commands of a simulator's queue run. Oclgrind runs commands in the thread that
    flushes or waits (``clFlush`` the whole queue, ``clWaitForEvents`` the queue up to that event)
    and spins at a barrier whose user event is not complete: a flush into a gate whose host
    function had not run burnt a core until it had, and hung when that host function enqueued on
    its own queue (its launch waited for the flush, the flush for the host function). So no thread
    runs the queue into a closed gate: while none is closed, a flush runs the queue; a gate's
    barrier is enqueued after the work before it ran; the work enqueued behind a closed gate stays
    queued, and the worker that opens the gate runs it, up to the next closed gate's marker (which
    that gate's task waits for) or to the end. Enqueues take the queue's lock, and so do these
    runs: one :class:`~backends._opencl_simulator.SimulatorLock` for all queues of a simulated
    device, whose :meth:`~backends._opencl_simulator.SimulatorLock.run` makes the main thread's
    runs on a helper thread (a Ctrl-C reaches the main thread during a long simulated kernel)."""

    __slots__ = ("cq", "lock", "closed", "_flush_all")

    def __init__(self, cq: cl.CommandQueue, lock: SimulatorLock) -> None:
        self.cq, self.lock = cq, lock
        self.closed: list[_UserEventGate] = []  # the gates held and not yet opened, in queue order
        self._flush_all = partial(_flush, cq)

    def flush(self) -> None:
        """Run the queue's commands now, unless they wait behind a closed gate."""
        with self.lock:
            if not self.closed:
                self.lock.run(self._flush_all)

    def hold(self, gate: _UserEventGate) -> cl.Event:
        """Enqueue the barrier of ``gate`` (the work before it run first where no gate is
        closed: the gate's marker is then complete); returns the barrier's event."""
        with self.lock:
            if not self.closed:
                self.lock.run(self._flush_all)
            barrier = cl.enqueue_barrier(self.cq, wait_for=[gate.user])
            self.closed.append(gate)
            return barrier

    def opened(self, gate: _UserEventGate, holder: bool = False) -> None:
        """After ``gate`` opened: run the work behind it, up to the next closed gate's marker.
        ``holder``: called by the thread whose :meth:`hold` of it failed, which alone adds it to
        :attr:`closed`, so it looks there without the lock first (which would wait for the run a
        Ctrl-C left going); the worker that opens a gate waits for the lock (the hold of that gate
        may not have added it yet)."""
        if holder and gate not in self.closed:
            return
        with self.lock:
            if gate not in self.closed:
                return  # (never held, or opened twice)
            self.closed.remove(gate)
            if self.closed:
                self.lock.run(partial(_run_to, self.closed[0].marker))
            else:
                self.lock.run(self._flush_all)


class OpenCLQueue(DeviceQueue):
    """``pk.Queue`` on an OpenCL device: one in-order command queue of the device's context."""

    api = "OpenCL"

    def __init__(self, device: Any, blocking: bool) -> None:
        super().__init__(device, blocking)
        self.context = device.native.context
        self.cq = cl.CommandQueue(self.context, device.native.device)
        # pyopencl's flush (0.4 us, the launch path) holds the GIL; a simulator runs the queue in
        # clFlush: there every flush is without it (1.2 us), none runs into a closed gate
        # (_SimulatorRuns), and the main thread's run on a helper thread (SimulatorLock.run: a
        # Ctrl-C reaches it). A gate's own flush always is without it (_UserEventGate.hold).
        simulator = device.properties.get("simulator")
        if simulator:  # one lock for every queue of the context: Oclgrind's state is the device's
            self._lock = simulator_lock(self.context)
            self.shares_lock = True
        self._simulated = _SimulatorRuns(self.cq, self._lock) if simulator else None
        self.flush_cq = self._simulated.flush if self._simulated is not None else self.cq.flush
        self.last_event: cl.Event | None = None  # the latest command enqueued (is_idle; fast launchers set it too)
        # what q.wait() waits for: the sum of the tokens of the time cells of the known work enqueued
        # since the last wait (fast launches with their last arguments, graph replays, transfers), or None
        # once anything else was (its time unknown); the wait's time per sum (:meth:`finish`)
        self._pending: int | None = 0
        self._took_by_work: dict[int, list] = {}
        self._took_by_transfer: dict[tuple, TimeCell] = {}
        self.waits = WaitChoice(device)  # how this queue's waits wait (joined, handed or polled)
        if not device.properties.get("simulator"):  # (its waits hand over to the native library's waiters)
            native_module(build=False)  # (loaded now where it is cached, not in a wait; built by a blocking launch)
        self.waits.queue_idle = _idle_of(weakref.ref(self))  # (the main thread joins known work on an idle queue only)
        self.wait_native_event = self.waits.wait
        self._wait_timed = self.waits.wait_timed

    def marker(self) -> cl.Event:
        ev = cl.enqueue_marker(self.cq)
        self.flush_cq()
        self.last_event = ev
        return ev

    @staticmethod
    def event_done(obj: Any) -> bool:
        # negative statuses are errors: the command is over either way
        return not isinstance(obj, cl.Event) or obj.command_execution_status <= _COMPLETE

    def sync_native(self, native: cl.Event) -> None:
        self.wait_native_event(native)

    def device_wait(self, snap: Snapshot) -> bool:
        other = snap.queue
        if not isinstance(other, OpenCLQueue) or other.context != self.context:
            return False
        if self._simulated is not None and not _complete(snap.native):
            # a simulator runs this queue's barrier on it by running the other queue up to it,
            # into a gate of that queue not yet open: there a host wait, in queue order
            return False
        with self._lock:
            self.last_event = cl.enqueue_barrier(self.cq, wait_for=[snap.native])
            self._pending = None  # (waits for another queue's work)
        return True

    def finish(self) -> None:
        """Wait for the queue (not ``cq.finish()``: a Ctrl-C must reach the main thread waiting for
        a long kernel): joined where the same known work was waited for within the join limit
        before (:meth:`~backends._opencl_waits.WaitChoice.wait_timed`), else as :meth:`wait_native_event`."""
        with self._lock:
            last = self.marker()
            pending, self._pending = self._pending, 0
        try:
            if pending is None:
                self.wait_native_event(last)
            else:
                took = self._took_by_work.get(pending)
                if took is None:
                    if len(self._took_by_work) >= _WORK_KINDS:
                        self._took_by_work.clear()
                    took = self._took_by_work[pending] = [None]
                self._wait_timed(last, took, self.flush_cq)
        except BaseException:  # (a Ctrl-C): the work may still run
            self._pending = None
            raise

    def make_gate(self) -> _UserEventGate:
        return _UserEventGate(self.cq, self.context, self.wait_native_event, self._simulated)

    def hold_gate(self, gate: _UserEventGate) -> None:
        self.last_event = gate.hold()
        self._pending = None

    def enqueue_native(self, fn: Callable[[], None], *keep: Any) -> None:
        """Run ``fn()``, which enqueues on :attr:`native_handle`, and keep ``keep`` alive until its
        work finished: a marker behind that work is the queue's last event, so the queue is not
        idle while it runs (before, ``is_idle()`` was True at once, and a known short launch after
        it could join behind it)."""
        with self.lock:
            try:
                fn()
                marker = cl.enqueue_marker(self.cq)
            except BaseException:  # (what fn enqueued before it raised: unknown work)
                self.lost_command()
                raise
            self.after_enqueue(marker, *keep)

    def after_enqueue(self, *objs: Any) -> None:
        """``objs[0]`` is the event of the command just enqueued; all of ``objs`` stay alive
        until it finished. A blocking queue waits for that event itself: the queue is in order,
        so the command completed means the queue did (no marker, 2.5 us on Intel's runtime)."""
        if objs and isinstance(objs[0], cl.Event):
            if self.blocking:
                self.wait_command(objs[0])
                return
            self.last_event = objs[0]
        self._pending = None  # (a blocking queue's finish below waits for it interruptibly)
        super().after_enqueue(*objs)  # (its objects kept alive first: a Ctrl-C in the flush keeps them)
        if not self.blocking:
            self.flush_cq()  # so that polling an event (is_idle, pruning) sees progress

    #: a new time cell for known work (:func:`~backends._opencl_waits.time_cell`)
    time_cell = staticmethod(time_cell)

    def lost_command(self) -> None:
        """After an enqueue whose command this queue was not told of (a Ctrl-C is raised as the
        enqueue returns, its event then lost): the last event a marker behind that command, and
        the work since the last wait unknown, so that no wait takes the queue for idle or its
        work for known (and joins, uninterruptibly, behind a command that may run for long).
        The caller holds the queue's lock; it re-raises what it caught (a refused enqueue, for
        which the marker is only extra: a marker the queue refuses too is left out, so that the
        runtime's error for the enqueue is the one raised)."""
        self._pending = None
        try:
            self.last_event = cl.enqueue_marker(self.cq)
        except cl.Error:
            pass

    def after_known(self, took: TimeCell | None, ev: cl.Event, *objs: Any) -> None:
        """:meth:`after_enqueue` for the command of ``ev`` whose time a fast launcher or a graph
        keeps in ``took`` (its last run with the same arguments; None: unknown): a blocking queue
        waits for it (:meth:`wait_command`), a non-blocking one counts it known for ``q.wait()``.
        The caller holds the queue's lock."""
        if self.blocking:
            self.wait_command(ev, took)
            return
        if took is None:
            self._pending = None
        elif self._pending is not None:
            self._pending += took.token  # (not id(took): a freed cell's id is given again)
        self.last_event = ev
        DeviceQueue.after_enqueue(self, ev, *objs)  # (its objects kept alive first, as above)
        self.flush_cq()

    def transfer_took(self, kind: str, nbytes: int) -> TimeCell:
        """The time cell of this queue's transfers of ``kind`` ("h2d", "d2h", "d2d", "fill") and
        size: known work for :meth:`after_known`, as a fast launch with its last arguments is (a
        transfer's time follows its size, where a kernel's follows its arguments)."""
        key = (kind, nbytes)
        took = self._took_by_transfer.get(key)
        if took is None:
            if len(self._took_by_transfer) >= _WORK_KINDS:
                self._took_by_transfer.clear()
            took = self._took_by_transfer[key] = time_cell()
        return took

    def wait_command(self, ev: cl.Event, took: list | None = None) -> None:
        """A blocking queue's wait for the command of ``ev``, the last one it enqueued: flushed,
        then waited for as :class:`~backends._opencl_waits.WaitChoice` says (its error is raised
        here); ``took``: a fast launcher's time of its last run with these arguments (joined in the
        main thread when short), updated."""
        if took is None:
            self.last_event = ev
            self.flush_cq()
            self.wait_native_event(ev)
        else:  # (chosen while last_event names the command before it: work left ahead of it?)
            t0, how = _clock(), self.waits.choose(took[0])
            self.last_event = ev
            self.waits.wait_chosen(how, ev, took, self.flush_cq, t0)

    def is_idle(self) -> bool:
        last = self.last_event
        return last is None or (type(last) is not Waiting and self.native_done(last))

    @property
    def native_handle(self) -> cl.CommandQueue:
        return self.cq
