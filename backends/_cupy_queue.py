"""Queues of the cuda and rocm backends: one non-blocking cupy stream each, host functions
without host callbacks in the stream.

CUDA forbids a host function (``cudaLaunchHostFunc``) that waits for other outstanding work, and
cupy refuses host functions on HIP altogether. A host function here is therefore never put in
the stream:

- ``enqueue_host(fn)`` records an event on the stream and hands ``fn`` to the queue's worker
  thread, which waits for that event (``cudaEventSynchronize``, an ordinary thread), runs
  ``fn`` and then submits the work enqueued after it;
- while a host function is outstanding, the queue *defers*: native work enqueued after it
  (kernels, copies, fills, event records, stream waits) is kept in a host-side backlog in
  order and submitted by the worker once the host function ran; with no host function
  outstanding, work goes to the stream at once (the common path costs one flag test);
- a marker recorded while deferring completes only after it was submitted; another queue that
  waits for such a marker waits on the host, in its own queue order, until it was submitted.

The current device is per thread (CUDA's and HIP's rule): :class:`DeviceScope` saves the
previous device in the scope object of one ``with``, so nested scopes and several threads
never restore each other's device.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Any

from portable.spi import start_worker, stop_worker, warn_unseen

from ._gpu_queue import _RETAIN_BATCH, DeviceQueue, Snapshot, run_host_function, wait_polling


class DeviceScope:
    """``with DeviceScope(cupy, i):`` makes device ``i`` current on this thread, and restores
    the thread's previous device after. One object per ``with`` (it holds that use's state)."""

    __slots__ = ("runtime", "index", "prev")

    def __init__(self, cupy: Any, index: int) -> None:
        self.runtime, self.index, self.prev = cupy.cuda.runtime, index, -1

    def __enter__(self) -> None:
        cur = self.runtime.getDevice()
        if cur != self.index:
            self.prev = cur
            self.runtime.setDevice(self.index)

    def __exit__(self, *exc: Any) -> None:
        if self.prev >= 0:
            self.runtime.setDevice(self.prev)


class Marker:
    """A native event of one queue; ``recorded`` once it is in the stream (deferred markers
    are recorded by the worker after the host functions before them ran)."""

    __slots__ = ("event", "recorded")

    def __init__(self, event: Any) -> None:
        self.event, self.recorded = event, False


class _Op:
    """Native work held back while a host function is outstanding."""

    __slots__ = ("op", "keep", "seq")

    def __init__(self, op: Callable[[], None], keep: tuple, seq: int) -> None:
        self.op, self.keep, self.seq = op, keep, seq


class _Host:
    """A host function held back behind an earlier one."""

    __slots__ = ("fn", "seq", "always")

    def __init__(self, fn: Callable[[], None], seq: int, always: bool) -> None:
        self.fn, self.seq, self.always = fn, seq, always


class _Task:
    """What the worker runs: wait for ``marker``, run the host function, release the backlog.
    It holds the queue until it ran (a dropped queue with work in flight finishes it first)."""

    __slots__ = ("queue", "host", "marker")

    def __init__(self, queue: CupyQueue, host: _Host, marker: Marker) -> None:
        self.queue, self.host, self.marker = queue, host, marker


def _run_task(task: _Task) -> None:
    q = task.queue
    try:
        _run_host(task.marker, task.host, q.log)
    finally:
        q.release_backlog()
        # an error's traceback (kept by the queue's log) holds this frame through the failing
        # frame's f_back: leave no reference to the queue in it, or a dropped queue would live
        # on until the next cyclic collection (and its worker never stop to warn of the error)
        del q, task


def _run_host(marker: Marker, host: _Host, log: Any) -> None:
    """Wait for the marker, run the host function; an error goes to the log. (A frame of its
    own, without the queue: see :func:`_run_task`.) The event is waited for on alpyka's
    worker, an ordinary thread that may wait."""
    run_host_function(log, host.seq, host.fn, host.always, lambda: _synchronize(marker.event))


def _synchronize(native: Any) -> None:
    """``native.synchronize()`` (a cupy Event or Stream) after polling ``native.done``: a thread
    inside the runtime's wait runs no Python, Ctrl-C would wait for the kernel (see
    :func:`~backends._gpu_queue.wait_polling`); the call then returns at once, raising any error."""
    wait_polling(lambda: native.done)
    native.synchronize()


class CupyQueue(DeviceQueue):
    """``pk.Queue`` on a CUDA/HIP device: one non-blocking cupy stream (module docstring)."""

    def __init__(self, device: Any, blocking: bool) -> None:
        super().__init__(device, blocking)
        self.cupy = device.native
        self.api = "HIP" if device.backend_name == "rocm" else "CUDA"
        self._cond = threading.Condition(self._lock)
        self._backlog: collections.deque | None = None  # not None while deferring
        self._draining = False  # the worker is submitting the backlog (it holds the lock)
        self._ticket = 0  # host functions and deferred operations enqueued so far
        self._done = 0  # of those, how many ran (host functions) or were submitted
        self._get_device = self.cupy.cuda.runtime.getDevice  # this thread's current device
        self._index = device.index
        #: the device is current on every thread: the only one there is (no per-launch check)
        self._only_device = self.cupy.cuda.runtime.getDeviceCount() == 1
        with self.scope:
            self.stream = self.cupy.cuda.Stream(non_blocking=True)

    @property
    def scope(self) -> DeviceScope:
        """A fresh scope making this queue's device current (``with queue.scope:``)."""
        return DeviceScope(self.cupy, self.device.index)

    # ------------------------------------------------------------------ submitting work
    def submit(self, op: Callable[[], None], *keep: Any) -> None:
        """Put native work ``op()`` (it enqueues on ``self.stream``) in queue order: now, with
        the queue's device current, or after the outstanding host functions ran. ``keep``
        stays alive until the work finished (see ``after_enqueue``)."""
        with self._lock:
            if self._backlog is not None and not self._draining:
                self._ticket += 1
                self._backlog.append(_Op(op, keep, self._log.next_seq()))
                return
            if self._only_device or self._get_device() == self._index:  # no scope object when current
                op()
            else:
                with self.scope:
                    op()
            if self.blocking:  # after_enqueue, inline on the launch path
                self.finish()
            elif keep and self._retained.keep(keep) >= _RETAIN_BATCH:
                self.retire_batch()

    def submit_kernel(self, fn: Any, grid: tuple, block: tuple, values: tuple, dyn: int, keep: tuple) -> None:
        """:meth:`submit` of one kernel call, ``fn(grid, block, values, shared_mem=dyn, stream=...)``
        on the queue's stream (a cupy ``RawKernel``, given the stream rather than made current):
        the fast launchers' path, in one frame where nothing is deferred and the queue's device
        is current (else through :meth:`submit`)."""
        with self._lock:
            if (self._backlog is None or self._draining) and (self._only_device or self._get_device() == self._index):
                fn(grid, block, values, shared_mem=dyn, stream=self.stream)  # (no `with stream`: 0.3-0.4 us less)
                if self.blocking:
                    self.finish()
                    return
                pending = self._retained.pending  # Retained.keep, inline
                pending.append(keep)
                if len(pending) >= _RETAIN_BATCH:
                    self.retire_batch()
                return
        stream = self.stream

        def op() -> None:
            fn(grid, block, values, shared_mem=dyn, stream=stream)

        self.submit(op, *keep)

    def submit_reported(self, op: Callable[[], None], *keep: Any) -> None:
        """:meth:`submit` for work whose errors belong to the queue, not to the caller (a model's
        forward pass): a failure is reported by the next ``wait()`` as an AsyncError whether
        the work ran now or behind a host function, as on the queues of the other backends."""

        def reported() -> None:
            try:
                op()
            except BaseException as exc:  # noqa: BLE001 - reported at the next wait()
                log.add(seq, exc)

        log = self._log
        seq = log.next_seq()
        self.submit(reported, *keep)

    #: ``pk.Queue.enqueue_native``: errors are the queue's, reported by the next wait()
    enqueue_native = submit_reported

    def _enqueue_gated(self, fn: Callable[[], None], always: bool) -> None:
        with self._lock:
            if self._worker is None:
                log, what = self._log, f"{self.api} queue"
                self._worker = start_worker(
                    _run_task, f"alpyka-{self.api.lower()}-host", on_stop=lambda: warn_unseen(log, what)
                )
                weakref.finalize(self, stop_worker, self._worker.tasks)
            self._ticket += 1
            host = _Host(fn, self._log.next_seq(), always)
            if self._backlog is not None and not self._draining:
                self._backlog.append(host)
                return
            marker = self._record_now()
            self._backlog = collections.deque()
            self._worker.put(_Task(self, host, marker))

    def _record_now(self) -> Marker:
        with self.scope:
            m = Marker(self.cupy.cuda.Event(block=False, disable_timing=True))
            m.event.record(self.stream)
        m.recorded = True
        return m

    def release_backlog(self) -> None:
        """On the worker, after a host function: submit the backlog up to the next host
        function (handed to the worker in turn) or to its end (the queue stops deferring)."""
        with self._lock:
            self._done += 1
            self._draining = True
            try:
                backlog = self._backlog
                while backlog:
                    item = backlog.popleft()
                    if isinstance(item, _Host):
                        self._worker.put(_Task(self, item, self._record_now()))  # type: ignore[union-attr]
                        return
                    self._done += 1
                    try:
                        with self.scope:
                            item.op()
                        self.after_enqueue(*item.keep)
                    except BaseException as exc:  # noqa: BLE001 - a failed launch or copy: the next wait() reports it
                        self._log.add(item.seq, exc)
                self._backlog = None
            finally:
                self._draining = False
                self._cond.notify_all()

    # ------------------------------------------------------------------ native primitives
    def marker(self) -> Marker:
        if self._backlog is None or self._draining:
            with self._lock:
                if self._backlog is None or self._draining:
                    return self._record_now()
        with self.scope:
            m = Marker(self.cupy.cuda.Event(block=False, disable_timing=True))

        def record() -> None:
            m.event.record(self.stream)
            m.recorded = True

        self.submit(record)
        return m

    @staticmethod
    def event_done(obj: Any) -> bool:
        return not isinstance(obj, Marker) or (obj.recorded and bool(obj.event.done))

    def sync_native(self, native: Marker) -> None:
        if not native.recorded:
            with self._cond:
                self._cond.wait_for(lambda: native.recorded)
        _synchronize(native.event)

    def device_wait(self, snap: Snapshot) -> bool:
        other = snap.queue
        if not isinstance(other, CupyQueue) or other.device.backend_name != self.device.backend_name:
            return False
        m: Marker = snap.native
        if not m.recorded:
            return False  # not in its stream yet: wait on the host, in this queue's order
        stream = self.stream
        self.submit(lambda: stream.wait_event(m.event))  # an event of another device is fine
        return True

    def hand_off(self, stream: int | None = None) -> int:
        """For a consumer outside alpyka (``Buffer.__dlpack__``, ``__cuda_array_interface__``):
        put the work enqueued so far into this queue's stream (waiting on the host for host
        functions still ahead of it) and, when ``stream`` (the consumer's native stream handle)
        is given, make that stream wait for it on the device. Returns this queue's stream
        handle. From one of this queue's own host functions nothing is waited for: the work
        before it finished, the work after it is not in the stream yet."""
        own = self.native_handle
        if self._worker is not None and self._worker.ident == threading.get_ident():
            return own
        m = self.marker()
        if not m.recorded:
            with self._cond:
                self._cond.wait_for(lambda: m.recorded)
        if stream is not None and stream != own:
            with self.scope:
                self.cupy.cuda.ExternalStream(stream).wait_event(m.event)
        return own

    def finish(self) -> None:
        """Block until the work enqueued so far was submitted (host functions ran) and finished."""
        with self._lock:
            target = self._ticket
            if self._done < target:
                self._cond.wait_for(lambda: self._done >= target)
        _synchronize(self.stream)

    def make_gate(self) -> Any:  # pragma: no cover - CUDA/HIP queues never gate their stream
        raise NotImplementedError("CUDA/HIP queues defer work behind host functions instead")

    def is_idle(self) -> bool:
        with self._lock:
            if self._backlog is not None:
                return False
        return bool(self.stream.done)

    @property
    def native_handle(self) -> int:
        """The ``cudaStream_t`` (``hipStream_t``) as an int, for torch/cupy ``ExternalStream``."""
        return int(self.stream.ptr)
