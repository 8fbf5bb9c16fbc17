"""OpenCL queues: an in-order ``cl.CommandQueue`` with alpaka's queue semantics (see _gpu_queue)."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

import pyopencl as cl

from ._gpu_queue import DeviceQueue, Snapshot, wait_polling
from ._opencl_waits import WaitChoice, opencl_library

_COMPLETE = cl.command_execution_status.COMPLETE
_STATUS = cl.event_info.COMMAND_EXECUTION_STATUS
#: how many kinds of known work (sums of time cells) a queue keeps the wait time of
_WORK_KINDS = 64


def _find_cl_flush() -> Callable[[Any], None]:
    """``flush(cq)``: ``clFlush`` called without the GIL. pyopencl's ``CommandQueue.flush`` keeps
    the GIL, and a runtime that executes commands in ``clFlush`` (Oclgrind runs the queue there,
    up to a user event) would then block the very thread that must open that event. Used where
    a flush can wait for a gate: a gate's own flush, and every flush on a simulator."""
    lib = opencl_library()
    if lib is None:
        return lambda cq: cq.flush()
    fn = lib.clFlush
    fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int32

    def flush(cq: Any, _fn: Any = fn) -> None:
        code = _fn(cq.int_ptr)
        if code != 0:
            raise cl.RuntimeError(f"clFlush failed with error {code}")

    return flush


_flush = _find_cl_flush()


class _UserEventGate:
    """A marker (the work before the gate) and a user event the queue's later work waits on.

    The barrier on the user event is enqueued by :meth:`hold`, after the worker has the task
    that opens it: a runtime that executes commands as they are enqueued (Oclgrind) blocks in
    that enqueue until the event completes, which then happens instead of a deadlock."""

    __slots__ = ("cq", "marker", "user", "barrier", "wait", "simulated")

    def __init__(
        self,
        cq: cl.CommandQueue,
        context: cl.Context,
        wait: Callable[[cl.Event], None],
        simulated: _SimulatorFlush | None = None,
    ) -> None:
        self.cq, self.wait = cq, wait  # (the queue's worker waits: joined, see WaitChoice)
        self.simulated = simulated  # a simulator's queue: its flushes (see _SimulatorFlush)
        self.marker = cl.enqueue_marker(cq)
        self.user = cl.UserEvent(context)
        self.barrier: cl.Event | None = None

    def hold(self) -> cl.Event:
        """Make the queue's later work wait for :meth:`open`; returns the barrier's event."""
        try:
            if self.simulated is not None:
                self.barrier = self.simulated.flush(hold=self.user)
            else:
                self.barrier = cl.enqueue_barrier(self.cq, wait_for=[self.user])
                _flush(self.cq)
        except BaseException:
            self.open()  # never leave the queue behind a user event no one will complete
            raise
        return self.barrier

    def reached(self) -> None:
        self.wait(self.marker)

    def open(self) -> None:
        """Complete the user event (idempotent: the worker and a failed ``hold`` may both call it)."""
        try:
            if self.user.command_execution_status != _COMPLETE:
                self.user.set_status(_COMPLETE)
        except cl.Error:  # completed by the other caller in between: open either way
            pass
        if self.simulated is not None:
            self.simulated.opened(self.user)


def _complete(ev: cl.Event) -> bool:
    return ev.get_info(_STATUS) <= _COMPLETE  # negative: failed, over too


class _SimulatorFlush:
    """The flushes of a simulator's queue. Oclgrind's ``clFlush`` runs the whole queue in the
    calling thread and spins at a gate's barrier until its user event completes (a host function
    of 60 s cost 56 s of CPU, in the thread that enqueued it). So a flush first waits for the
    last gate held to open, polled with sleeps (:func:`~backends._gpu_queue.wait_polling`: a
    Ctrl-C reaches it, a gate opened at once is seen at once); a gate's barrier is enqueued after
    the flush of the work before it; and the worker that opens the last gate flushes the work
    behind it (a barrier left unflushed never completes there)."""

    __slots__ = ("cq", "lock", "user")

    def __init__(self, cq: cl.CommandQueue) -> None:
        self.cq = cq
        self.lock = threading.Lock()  # a barrier is enqueued, and the last gate changes, under it
        self.user: cl.UserEvent | None = None  # the last gate held, until it opened and was flushed

    def flush(self, hold: cl.UserEvent | None = None) -> cl.Event | None:
        """Flush the queue once its last gate is open; with ``hold``, then enqueue a barrier on
        that user event (a new gate) and return its event."""
        while True:
            with self.lock:
                user = self.user
                if user is None or _complete(user):
                    _flush(self.cq)
                    self.user = None
                    if hold is None:
                        return None
                    barrier = cl.enqueue_barrier(self.cq, wait_for=[hold])
                    self.user = hold
                    return barrier
            wait_polling(functools.partial(_complete, user))

    def opened(self, user: cl.UserEvent) -> None:
        """After the gate of ``user`` opened: flush the work behind its barrier where no later
        gate was held (that one's own opening flushes it; behind this one nothing spins)."""
        with self.lock:
            if self.user is user:
                _flush(self.cq)
                self.user = None


class OpenCLQueue(DeviceQueue):
    """``pk.Queue`` on an OpenCL device: one in-order command queue of the device's context."""

    api = "OpenCL"

    def __init__(self, device: Any, blocking: bool) -> None:
        super().__init__(device, blocking)
        self.context = device.native.context
        self.cq = cl.CommandQueue(self.context, device.native.device)
        # pyopencl's flush (0.4 us, the launch path) holds the GIL; a simulator runs the queue in
        # clFlush, where a gate's worker must be able to run: there every flush is without it
        # (1.2 us), after the last gate opened (_SimulatorFlush). A gate's own flush always is
        # (_UserEventGate.hold).
        self._simulated = _SimulatorFlush(self.cq) if device.properties.get("simulator") else None
        self.flush_cq = self._simulated.flush if self._simulated is not None else self.cq.flush
        self.last_event: cl.Event | None = None  # the latest command enqueued (is_idle; fast launchers set it too)
        # what q.wait() waits for: the sum of the ids of the time cells of the known work enqueued
        # since the last wait (fast launches with their last arguments, graph replays), or None
        # once anything else was (its time unknown); the wait's time per sum (:meth:`finish`)
        self._pending: int | None = 0
        self._took_by_work: dict[int, list] = {}
        self.waits = WaitChoice(device)  # how this queue's waits wait (joined, handed or polled)
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
        if not self.blocking:
            self.flush_cq()  # so that polling an event (is_idle, pruning) sees progress
        super().after_enqueue(*objs)

    def after_known(self, took: list | None, ev: cl.Event, *objs: Any) -> None:
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
            self._pending += id(took)
        self.last_event = ev
        self.flush_cq()
        DeviceQueue.after_enqueue(self, ev, *objs)

    def wait_command(self, ev: cl.Event, took: list | None = None) -> None:
        """A blocking queue's wait for the command of ``ev``, the last one it enqueued: flushed,
        then waited for as :class:`~backends._opencl_waits.WaitChoice` says (its error is raised
        here); ``took``: a fast launcher's time of its last run with these arguments (joined in the
        main thread when short), updated."""
        self.last_event = ev
        if took is None:
            self.flush_cq()
            self.wait_native_event(ev)
        else:
            self._wait_timed(ev, took, self.flush_cq)

    def is_idle(self) -> bool:
        last = self.last_event
        return last is None or self.native_done(last)

    @property
    def native_handle(self) -> cl.CommandQueue:
        return self.cq
