"""Queues and events: ordered, possibly asynchronous work on one device (alpaka semantics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._deferred import run_deferred
from ._device import Device
from ._errors import ArgumentTypeError, AsyncError, DeviceMismatch
from ._graph import active as _capturing
from ._graph import refuse
from ._handoff import note_queue
from ._hostqueue import HostQueue
from ._launch import _DEBUG, _environ, checked_launch
from ._streamcheck import active as _stream_active
from ._streamcheck import note_event_done, note_queue_done, note_record, note_wait_for
from ._workdiv import WorkDiv


def _checked_device(device: Any, what: str) -> Device:
    if not isinstance(device, Device):
        raise ArgumentTypeError(f"{what} needs a pk.Device (from pk.device(...)), got {type(device).__name__}")
    return device


def _checked_flag(value: Any, what: str) -> bool:
    """``value`` as a bool; ArgumentTypeError for anything but True/False (numpy's bools too):
    ``blocking="no"`` would otherwise be a blocking queue, silently."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{what} takes True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def _inline_lock(impl: Any) -> Any:
    """The lock of a blocking host queue whose ``enqueue_native`` is :class:`HostQueue`'s own
    (it runs the work in place under that lock); None for every other implementation."""
    if getattr(impl, "blocking", False) and type(impl).enqueue_native is HostQueue.enqueue_native:
        return impl.lock
    return None


class Event:
    """A marker in a queue: ``q.record(ev)``, then ``ev.wait()`` / ``other_q.wait_for(ev)``.

    Re-recording follows CUDA: a wait waits for the latest ``record`` made before the wait.
    An event never recorded counts as complete.
    """

    def __init__(self, device: Device) -> None:
        self.device = _checked_device(device, "Event")
        self._impl = device.backend.create_event(device)

    @property
    def impl(self) -> Any:
        """The backend's implementation of this event (a :class:`portable.spi.EventImpl`, what
        ``Backend.create_event`` made): for the core and backends, not for users' code."""
        return self._impl

    def wait(self) -> None:
        """Block until the work before the latest record has finished; raise its error if any."""
        run_deferred()  # a safe point: hand collected buffers back before blocking
        try:
            self._impl.wait()
        finally:
            if "_sc_clock" in self.__dict__:  # the "stream" check's bookkeeping
                note_event_done(self)

    def is_complete(self) -> bool:
        done = self._impl.is_complete()
        if done and "_sc_clock" in self.__dict__:
            note_event_done(self)
        return done

    def record_external(self) -> Any:
        """Record a point that outside code completes (a network request, another runtime):
        waits issued from now on, ``ev.wait()`` and ``q.wait_for(ev)``, wait until
        :meth:`complete_external` is called with the token returned here. Events of the host
        device support it; others raise TypeError."""
        record = getattr(self._impl, "record_external", None)
        if record is None:
            raise ArgumentTypeError(
                f"events of {self.device.backend_name} cannot be completed by outside code; use an event of pk.host()"
            )
        return record()

    def complete_external(self, token: Any, error: BaseException | None = None) -> None:
        """Complete the point :meth:`record_external` returned ``token`` for; with ``error``,
        the waits on it raise :class:`~portable.AsyncError` from it. Thread-safe; call it once."""
        self._impl.complete_external(token, error)

    def __repr__(self) -> str:
        state = "complete" if self.is_complete() else "pending"
        return f"<Event on {self.device}: {state}>"


class Queue:
    """A queue of work on one device.

    Non-blocking (default): enqueueing returns at once and work runs in order (a worker thread
    on CPU backends, a stream or in-order command queue on GPUs). ``blocking=True``: every
    enqueue finishes before it returns. An exception raised by asynchronous work is raised by
    the next ``wait()`` of the queue (and by waits on events recorded after it); the queue stays
    usable.
    """

    def __init__(self, device: Device, blocking: bool = False) -> None:
        self.device = _checked_device(device, "Queue")
        self.blocking = _checked_flag(blocking, "Queue blocking")
        self._impl = device.backend.create_queue(device, self.blocking)
        #: the lock under which the queue runs native work in place (a blocking host queue), so
        #: that ``enqueue_native`` runs it with no call into the implementation: a model's
        #: forward pass, where each Python step costs several times its warm cost (it runs with
        #: caches the model evicted); None elsewhere
        self._inline_lock = _inline_lock(self._impl)
        #: the fast path's record of this queue's launches: kernel -> work division -> site
        #: (portable/_launch.py)
        self.launch_sites: dict[Any, Any] = {}

    @property
    def impl(self) -> Any:
        """The backend's implementation of this queue (a :class:`portable.spi.QueueImpl`, what
        ``Backend.create_queue`` made; backends reach it through ``portable.spi.queue_impl``):
        for the core and backends, not for users' code."""
        return self._impl

    def enqueue(self, task: Any, *args: Any) -> None:
        """``q.enqueue(fn)`` runs a host function in queue order;
        ``q.enqueue(workdiv, kernel, *args)`` launches a kernel (like ``pk.exec``)."""
        if not args and callable(task) and not hasattr(task, "__alpyka_kernel__"):
            self.enqueue_host(task)
            return
        if not args:
            raise ArgumentTypeError("enqueue takes a host function, or a work division, a kernel and its arguments")
        exec(self, task, *args)

    def enqueue_host(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the host once the work enqueued before it has finished."""
        if _capturing:  # not inside pk.capture (portable/_graph.py)
            refuse(self, "enqueue_host()")
        self._impl.enqueue_host(fn)

    def enqueue_native(self, fn: Callable[[], None], *keep: Any) -> None:
        """Put the work that ``fn()`` enqueues on :attr:`native_handle` (a CUDA stream, an OpenCL
        command queue; torch or cupy work, say) in this queue's order: after the work enqueued
        before, host functions included, and before the work enqueued after. ``fn`` runs at once
        where the native queue keeps that order itself (OpenCL), else once the host functions
        before it ran (CUDA, HIP); on the CPU backends it runs in queue order like a host
        function. The objects ``keep`` (memory the work reads or writes) stay alive until the
        work finished; a blocking queue finishes it before returning. An error of ``fn`` is
        raised here or by the next :meth:`wait`. Interchange consumers of the buffers and
        collections among ``keep`` (DLPack, the CUDA array interface) are ordered after it."""
        if _capturing:
            refuse(self, "enqueue_native()")
        lock = self._inline_lock
        if lock is not None:  # what HostQueue.enqueue_native does on a blocking queue, one call fewer
            with lock:
                fn()
            return
        self._impl.enqueue_native(fn, *keep)
        if not self.blocking:  # a blocking queue's work has finished: nothing to order after it
            note_queue(self, keep)

    def record(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise ArgumentTypeError(f"record() takes a pk.Event, got {type(event).__name__}")
        if not self.device.can_access(event.device):
            raise DeviceMismatch(
                f"event of {event.device} cannot be recorded on a queue of {self.device}; "
                f"record it on a queue of {event.device}, or make an event of this queue's device"
            )
        if _capturing:
            refuse(self, "record()")
        self._impl.record(event.impl)
        if _stream_active(self):  # the "stream" check (portable/_streamcheck.py)
            note_record(self, event)
        else:
            event.__dict__.pop("_sc_clock", None)

    def wait_for(self, event: Event) -> None:
        """Work enqueued after this call starts only once ``event`` (as recorded now) completed."""
        if not isinstance(event, Event):
            raise ArgumentTypeError(f"wait_for() takes a pk.Event, got {type(event).__name__}")
        if _capturing:
            refuse(self, "wait_for()")
        self._impl.wait_for(event.impl)
        if "_sc_clock" in event.__dict__:
            note_wait_for(self, event)

    def wait(self) -> None:
        """Block until all work enqueued so far finished; raise the first error it raised that
        no wait finished before this one started (a wait from one of the queue's own tasks
        raises RuntimeError: it would wait for itself)."""
        if _capturing:
            refuse(self, "wait()")
        run_deferred()  # a safe point: hand collected buffers back before blocking
        try:
            self._impl.wait()
        except AsyncError:  # the work finished, with an error (a wait from its own task did not)
            if "_sc" in self.__dict__:
                note_queue_done(self)
            raise
        if "_sc" in self.__dict__:  # the "stream" check's bookkeeping
            note_queue_done(self)

    def is_idle(self) -> bool:
        idle = self._impl.is_idle()
        if idle and "_sc" in self.__dict__:
            note_queue_done(self)
        return idle

    @property
    def native_handle(self) -> Any:
        """The backend's own queue object (cupy Stream, pyopencl CommandQueue, worker thread)."""
        return self._impl.native_handle

    def __repr__(self) -> str:
        mode = "blocking" if self.blocking else "non-blocking"
        return f"<Queue {mode} on {self.device}>"


def exec(queue: Queue, workdiv: WorkDiv, kernel: Any, *args: Any) -> None:
    """Enqueue ``kernel(acc, *args)`` over ``workdiv`` on ``queue``.

    The work division and the arguments are checked before anything is enqueued.
    """
    # a launch like an earlier one: its fast launcher's guard (portable/_launch.py's docstring)
    try:
        site = queue.launch_sites[kernel].peek(id(workdiv))  # (a read, not a use: see _remember)
    except (AttributeError, KeyError, TypeError):
        site = None
    if site is not None and site.workdiv is workdiv and not _capturing and site.debug is _environ.get(_DEBUG):
        for fast in site.fast:
            if fast(args):
                return
    if not isinstance(queue, Queue):
        raise ArgumentTypeError(f"exec needs a pk.Queue first, got {type(queue).__name__}")
    checked_launch(queue, workdiv, kernel, args, site)
