"""OpenCL queues: an in-order ``cl.CommandQueue`` with alpaka's queue semantics (see _gpu_queue)."""

from __future__ import annotations

from typing import Any

import pyopencl as cl

from ._gpu_queue import DeviceQueue, Snapshot

_COMPLETE = cl.command_execution_status.COMPLETE


class _UserEventGate:
    """A marker (the work before the gate) and a user event the queue's later work waits on."""

    __slots__ = ("marker", "user", "barrier")

    def __init__(self, cq: "cl.CommandQueue", context: "cl.Context") -> None:
        self.marker = cl.enqueue_marker(cq)
        self.user = cl.UserEvent(context)
        self.barrier = cl.enqueue_barrier(cq, wait_for=[self.user])
        cq.flush()

    def reached(self) -> None:
        self.marker.wait()

    def open(self) -> None:
        self.user.set_status(_COMPLETE)


class OpenCLQueue(DeviceQueue):
    """``pk.Queue`` on an OpenCL device: one in-order command queue of the device's context."""

    api = "OpenCL"

    def __init__(self, device: Any, blocking: bool) -> None:
        super().__init__(device, blocking)
        self.context = device.native.context
        self.cq = cl.CommandQueue(self.context, device.native.device)
        self._last: "cl.Event | None" = None  # the latest command enqueued (for is_idle)

    def marker(self) -> "cl.Event":
        ev = cl.enqueue_marker(self.cq)
        self.cq.flush()
        self._last = ev
        return ev

    def native_done(self, native: "cl.Event") -> bool:
        # negative statuses are errors: the command is over either way
        return native.command_execution_status <= _COMPLETE

    def sync_native(self, native: "cl.Event") -> None:
        native.wait()

    def device_wait(self, snap: Snapshot) -> bool:
        other = snap.queue
        if not isinstance(other, OpenCLQueue) or other.context != self.context:
            return False
        with self._lock:
            self._last = cl.enqueue_barrier(self.cq, wait_for=[snap.native])
        return True

    def finish(self) -> None:
        self.cq.finish()

    def make_gate(self) -> _UserEventGate:
        gate = _UserEventGate(self.cq, self.context)
        self._last = gate.barrier
        return gate

    def after_enqueue(self, *objs: Any) -> None:
        """``objs[0]`` is the event of the command just enqueued; all of ``objs`` stay alive
        until it finished."""
        if objs and isinstance(objs[0], cl.Event):
            self._last = objs[0]
        if not self.blocking:
            self.cq.flush()  # so that polling an event (is_idle, pruning) sees progress
        super().after_enqueue(*objs)

    def is_idle(self) -> bool:
        last = self._last
        return last is None or self.native_done(last)

    @property
    def native_handle(self) -> "cl.CommandQueue":
        return self.cq
