"""Queues and events of the device backends (OpenCL, CUDA, ROCm), on top of a native queue.

One implementation for every device API: a subclass supplies a handful of primitives on its
native queue (an in-order OpenCL command queue, a CUDA/HIP stream) and this module adds
alpaka's semantics on top:

- blocking queues finish each piece of work before the enqueue returns;
- host functions (``enqueue_host``) run in FIFO order with device work: on a non-blocking queue
  a *gate* is enqueued (an OpenCL user event the queue waits on, a CUDA host function that
  blocks its stream) and a worker thread runs the function once the queue reaches the gate, then
  opens it, so neither the caller nor the native runtime's own threads run user code;
- events follow CUDA re-record semantics: each ``record`` enqueues a fresh native marker and a
  wait waits for the latest marker recorded before it; the cross-backend protocol
  ``snapshot()`` / ``wait_snapshot(token)`` lets a queue of another backend wait for it;
- an exception raised by a host function surfaces at the next ``wait()`` of the queue and at
  waits on events recorded after it (later host functions of the queue are skipped until then);
- Python objects that enqueued work uses (buffers, host arrays) are kept alive until a marker
  after that work completed, so memory is never reused under an asynchronous copy or kernel.
"""

from __future__ import annotations

import collections
import queue as _stdqueue
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from portable._errors import AsyncError
from portable._workers import start_worker, stop_worker

#: how many enqueued operations may hold objects before a marker is recorded to release them
_RETAIN_BATCH = 32


class _ErrorLog:
    """Errors of a queue's host functions, by sequence number. ``wait()`` raises those after
    ``cleared`` and moves it on; events keep seeing the errors of the functions before them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0  # host functions enqueued so far
        self.cleared = 0  # errors of functions up to this one were already raised by a wait
        self.errors: dict[int, BaseException] = {}
        self.skipped = 0

    def first_between(self, lo: int, hi: int) -> BaseException | None:
        with self.lock:
            for s in sorted(self.errors):
                if lo < s <= hi:
                    return self.errors[s]
        return None

    def pending(self) -> bool:
        with self.lock:
            return any(s > self.cleared for s in self.errors)


@dataclass(frozen=True)
class Snapshot:
    """What a wait issued now waits for: a native marker of one queue and the range of that
    queue's host functions whose errors it reports."""

    queue: "DeviceQueue"
    native: Any
    errors_after: int
    errors_upto: int

    def wait(self) -> None:
        self.queue.sync_native(self.native)
        err = self.queue._log.first_between(self.errors_after, self.errors_upto)
        if err is not None:
            raise AsyncError(f"work before this event failed: {err!r}") from err

    def done(self) -> bool:
        return self.queue.native_done(self.native)


class DeviceEvent:
    """The event implementation of the device backends (see the module docstring)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None

    def _set(self, snap: Snapshot) -> None:
        with self._lock:
            self._latest = snap

    # the cross-backend protocol: any queue can wait for a state captured now
    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._latest

    def wait_snapshot(self, token: Snapshot | None, timeout: float | None = None) -> bool:
        if token is not None:
            token.wait()
        return True

    def wait(self) -> None:
        self.wait_snapshot(self.snapshot())

    def is_complete(self) -> bool:
        snap = self.snapshot()
        return snap is None or snap.done()


class _HostTask:
    __slots__ = ("fn", "gate", "seq", "always")

    def __init__(self, fn: Callable[[], None], gate: Any, seq: int, always: bool) -> None:
        self.fn, self.gate, self.seq, self.always = fn, gate, seq, always


def _run_host_task(task: _HostTask, log: _ErrorLog) -> None:
    # The worker holds the gates and the error log, not the queue: a queue dropped with work
    # in flight still finishes it, then its finalizer stops the worker.
    try:
        task.gate.reached()
        if log.pending() and not task.always:
            with log.lock:
                log.skipped += 1
        else:
            task.fn()
    except BaseException as exc:  # surfaced at the next wait()
        with log.lock:
            log.errors[task.seq] = exc
    finally:
        task.gate.open()


class DeviceQueue:
    """Base of the device queues; subclasses implement the native primitives below."""

    #: name of the device API, for messages ("OpenCL", "CUDA", "HIP")
    api = "device"

    def __init__(self, device: Any, blocking: bool) -> None:
        self.device = device
        self.blocking = blocking
        self._lock = threading.RLock()
        self._log = _ErrorLog()
        self._pending_refs: list[Any] = []
        self._inflight: collections.deque[tuple[Any, list[Any]]] = collections.deque()
        self._tasks: _stdqueue.SimpleQueue | None = None

    # ------------------------------------------------------------------ native primitives
    def marker(self) -> Any:
        """A native event that completes when the work enqueued so far has finished."""
        raise NotImplementedError

    def native_done(self, native: Any) -> bool:
        raise NotImplementedError

    def sync_native(self, native: Any) -> None:
        """Block the calling thread until ``native`` (a marker of this API) completed."""
        raise NotImplementedError

    def device_wait(self, snap: Snapshot) -> bool:
        """Make later work of this queue wait for ``snap`` on the device; False when the
        snapshot belongs to a queue this one cannot wait for natively."""
        return False

    def finish(self) -> None:
        """Block until every piece of native work enqueued so far finished."""
        raise NotImplementedError

    def make_gate(self) -> Any:
        """Enqueue a closed gate: an object with ``reached()`` (block until the work before
        it finished) and ``open()`` (let the work after it start)."""
        raise NotImplementedError

    @property
    def native_handle(self) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ keeping memory alive
    def after_enqueue(self, *objs: Any) -> None:
        """Called after each enqueued operation: keep ``objs`` alive until it finished, and
        finish at once on a blocking queue."""
        if self.blocking:
            self.finish()
            return
        if objs:
            with self._lock:
                self._pending_refs.append(objs)
                if len(self._pending_refs) >= _RETAIN_BATCH:
                    self._retire_pending(self.marker())
        self._prune()

    def _retire_pending(self, native: Any) -> None:
        # caller holds the lock; the objects stay referenced until ``native`` completed
        if self._pending_refs:
            self._inflight.append((native, self._pending_refs))
            self._pending_refs = []

    def _prune(self) -> None:
        with self._lock:
            while self._inflight and self.native_done(self._inflight[0][0]):
                self._inflight.popleft()

    # ------------------------------------------------------------------ the queue interface
    def enqueue_host(self, fn: Callable[[], None], *, always: bool = False) -> None:
        """Run ``fn()`` once the work enqueued before it finished; later work waits for it.
        After an error of an earlier host function, ``fn`` is skipped (until the next ``wait()``)
        unless ``always`` (waits for other queues' events always run)."""
        if self.blocking:
            with self._lock:
                self.finish()
                fn()
            return
        with self._lock:
            if self._tasks is None:
                log = self._log
                self._tasks = start_worker(lambda task: _run_host_task(task, log),
                                           f"alpyka-{self.api.lower()}-host")
                weakref.finalize(self, stop_worker, self._tasks)
            with self._log.lock:
                self._log.seq += 1
                seq = self._log.seq
            gate = self.make_gate()
            assert self._tasks is not None
            self._tasks.put(_HostTask(fn, gate, seq, always))

    def record(self, event: DeviceEvent) -> None:
        with self._lock:
            native = self.marker()
            self._retire_pending(native)
            with self._log.lock:
                snap = Snapshot(self, native, self._log.cleared, self._log.seq)
            event._set(snap)
        if self.blocking:
            self.finish()

    def wait_for(self, waitable: Any) -> None:
        """Work enqueued after this waits for ``waitable`` (an event impl) as recorded now."""
        token = waitable.snapshot()
        if token is None:
            return
        if isinstance(token, Snapshot) and self.device_wait(token):
            if self.blocking:
                self.finish()
            return
        # an event of another API or context: wait for it on the host, in queue order
        self.enqueue_host(lambda: waitable.wait_snapshot(token), always=True)

    def wait(self) -> None:
        """Block until all work enqueued so far finished; raise the first error among it."""
        with self._lock:
            upto = self._log.seq
            if self._pending_refs:
                self._retire_pending(self.marker())
        self.finish()  # host functions are gates in the native queue: finish waits for them too
        self._prune()  # work other threads enqueued meanwhile keeps its objects
        log = self._log
        with log.lock:
            errs = [log.errors[s] for s in sorted(log.errors) if log.cleared < s <= upto]
            skipped, log.skipped = log.skipped, 0
            log.cleared = max(log.cleared, upto)
        if errs:
            note = f" ({skipped} later task(s) on this queue were skipped)" if skipped else ""
            raise AsyncError(f"asynchronous work on the {self.api} queue failed: {errs[0]!r}{note}") from errs[0]

    def is_idle(self) -> bool:
        with self._lock:
            native = self.marker()
        return self.native_done(native)
