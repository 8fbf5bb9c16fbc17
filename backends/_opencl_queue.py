"""OpenCL queues: an in-order ``cl.CommandQueue`` with alpaka's queue semantics (see _gpu_queue)."""

from __future__ import annotations

import _thread
import ctypes
import ctypes.util
import functools
import glob
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pyopencl as cl

from ._gpu_queue import DeviceQueue, Snapshot, wait_polling

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


def _opencl_library() -> Any:
    """The ICD loader pyopencl uses (its bundled ``libOpenCL``, else the system's), or None."""
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


def _find_cl_flush() -> Callable[[Any], None]:
    """``flush(cq)``: ``clFlush`` called without the GIL. pyopencl's ``CommandQueue.flush`` keeps
    the GIL, and a runtime that executes commands in ``clFlush`` (Oclgrind runs the queue there,
    up to a user event) would then block the very thread that must open that event. Used where
    a flush can wait for a gate: a gate's own flush, and every flush on a simulator."""
    lib = _opencl_library()
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


def _find_cl_wait() -> Callable[[Any], None]:
    """``wait(ev)``: ``clWaitForEvents`` through ctypes (which lets go of the GIL in plain C, as
    ``time.sleep`` does: a waiter thread still in it when the interpreter ends is stopped as any
    daemon thread in a blocking call is); pyopencl's ``Event.wait`` where ctypes finds no loader."""
    lib = _opencl_library()
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


def _forget_waiters() -> None:
    """In a forked child: the waiter threads were not copied, so the next wait starts its own."""
    global _waiters
    _waiters = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_waiters)


def wait_event_handed(ev: cl.Event) -> None:
    """:func:`wait_event` for a runtime that runs a command in the thread that waits for it
    (Intel's CPU runtime: a tiny kernel runs inside ``clWaitForEvents``; polled, the command waits
    for a worker thread of the runtime, which other processes on the cores delay by whole time
    slices). First polled for :data:`HANDED_POLL_S` (enough where the runtime's workers have a
    core); then a waiter thread of the calling thread waits with the runtime's own wait; the caller
    sleeps on a lock the waiter releases, woken at once, and a Ctrl-C still reaches it (a lock's
    timed acquire is interrupted by signals; at most :data:`HANDED_SLICE_S` either way). A wait
    interrupted leaves its waiter to finish alone: the next wait gets a fresh one."""
    status = ev.get_info
    clock, t0 = time.perf_counter, time.perf_counter()
    while status(_STATUS) > _COMPLETE and clock() - t0 < HANDED_POLL_S:
        _yield_core()  # where the runtime's workers have a core, they finish a tiny command here
    if status(_STATUS) > _COMPLETE:
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
    if status(_STATUS) < 0:
        ev.wait()  # the runtime's own error for the failed command


def runs_commands_in_waits(device: Any) -> bool:
    """Whether ``device``'s runtime runs a command in the thread that waits for it (Intel's CPU
    OpenCL, built on TBB: the waiting thread joins the work), so that waits are handed to a
    waiter thread (:func:`wait_event_handed`) rather than polled."""
    native = device.native
    return native.platform.name.strip().startswith("Intel") and bool(native.device.type & cl.device_type.CPU)


class _UserEventGate:
    """A marker (the work before the gate) and a user event the queue's later work waits on.

    The barrier on the user event is enqueued by :meth:`hold`, after the worker has the task
    that opens it: a runtime that executes commands as they are enqueued (Oclgrind) blocks in
    that enqueue until the event completes, which then happens instead of a deadlock."""

    __slots__ = ("cq", "marker", "user", "barrier")

    def __init__(self, cq: cl.CommandQueue, context: cl.Context) -> None:
        self.cq = cq
        self.marker = cl.enqueue_marker(cq)
        self.user = cl.UserEvent(context)
        self.barrier: cl.Event | None = None

    def hold(self) -> cl.Event:
        """Make the queue's later work wait for :meth:`open`; returns the barrier's event."""
        try:
            self.barrier = cl.enqueue_barrier(self.cq, wait_for=[self.user])
            _flush(self.cq)
        except BaseException:
            self.open()  # never leave the queue behind a user event no one will complete
            raise
        return self.barrier

    def reached(self) -> None:
        wait_event(self.marker)

    def open(self) -> None:
        """Complete the user event (idempotent: the worker and a failed ``hold`` may both call it)."""
        try:
            if self.user.command_execution_status != _COMPLETE:
                self.user.set_status(_COMPLETE)
        except cl.Error:  # completed by the other caller in between: open either way
            pass


class OpenCLQueue(DeviceQueue):
    """``pk.Queue`` on an OpenCL device: one in-order command queue of the device's context."""

    api = "OpenCL"

    def __init__(self, device: Any, blocking: bool) -> None:
        super().__init__(device, blocking)
        self.context = device.native.context
        self.cq = cl.CommandQueue(self.context, device.native.device)
        # pyopencl's flush (0.4 us, the launch path) holds the GIL; a simulator runs the queue in
        # clFlush, where a gate's worker must be able to run: there every flush is without it
        # (1.2 us). A gate's own flush always is (_UserEventGate.hold).
        self._flush_cq = functools.partial(_flush, self.cq) if device.properties.get("simulator") else self.cq.flush
        self._last: cl.Event | None = None  # the latest command enqueued (for is_idle)
        self.wait_native_event = wait_event_handed if runs_commands_in_waits(device) else wait_event

    def marker(self) -> cl.Event:
        ev = cl.enqueue_marker(self.cq)
        self._flush_cq()
        self._last = ev
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
            self._last = cl.enqueue_barrier(self.cq, wait_for=[snap.native])
        return True

    def finish(self) -> None:
        with self._lock:
            last = self.marker()
        self.wait_native_event(last)  # not cq.finish(): a Ctrl-C must reach a thread waiting for a long kernel

    def make_gate(self) -> _UserEventGate:
        return _UserEventGate(self.cq, self.context)

    def hold_gate(self, gate: _UserEventGate) -> None:
        self._last = gate.hold()

    def after_enqueue(self, *objs: Any) -> None:
        """``objs[0]`` is the event of the command just enqueued; all of ``objs`` stay alive
        until it finished. A blocking queue waits for that event itself: the queue is in order,
        so the command completed means the queue did (no marker, 2.5 us on Intel's runtime)."""
        if objs and isinstance(objs[0], cl.Event):
            if self.blocking:
                self.wait_command(objs[0])
                return
            self._last = objs[0]
        if not self.blocking:
            self._flush_cq()  # so that polling an event (is_idle, pruning) sees progress
        super().after_enqueue(*objs)

    def wait_command(self, ev: cl.Event) -> None:
        """A blocking queue's wait for the command of ``ev``, the last one it enqueued: flushed,
        then waited for (:func:`wait_event` or :func:`wait_event_handed`: its error is raised here)."""
        self._last = ev
        self._flush_cq()
        self.wait_native_event(ev)

    def is_idle(self) -> bool:
        last = self._last
        return last is None or self.native_done(last)

    @property
    def native_handle(self) -> cl.CommandQueue:
        return self.cq
