"""The cupy stand-in's CUDA runtime (fake_cupy.py): its error, its state (devices, the per-thread
current device and stream, registered memory ranges, counters), and its streams, graphs and
events, each stream a thread running its work in order (see fake_cupy.py's docstring for what
is emulated how strictly)."""

from __future__ import annotations

import bisect
import ctypes
import queue as _q
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from portable import AlpykaError


class CUDARuntimeError(AlpykaError, RuntimeError):
    """What cupy raises for a CUDA runtime error (cupy's own class is a RuntimeError too)."""


class _Exec:
    """One thread running callables in order (a stream's engine, or the callback thread)."""

    def __init__(self, name: str) -> None:
        self.q: _q.SimpleQueue = _q.SimpleQueue()
        self.pending = 0
        self.cv = threading.Condition()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> None:
        with self.cv:
            self.pending += 1
        self.q.put(fn)

    def stop(self) -> None:
        """End the thread once the work submitted so far ran."""
        self.q.put(None)

    def _run(self) -> None:
        while True:
            fn = self.q.get()
            if fn is None:
                return
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - a device fault: kept, reported on sync
                self.fault = exc
            finally:
                with self.cv:
                    self.pending -= 1
                    self.cv.notify_all()

    def idle(self) -> bool:
        with self.cv:
            return self.pending == 0

    def drain(self) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.pending == 0)


_callbacks = _Exec("fake-cuda-callbacks")  # CUDA runs every host function on one driver thread
_next_ptr = [0x7000]


class _Runtime:
    """One stand-in's state: devices, the per-thread current device, memory, counters."""

    def __init__(self, n_devices: int, is_hip: bool, count_error: str | None) -> None:
        self.n_devices, self.is_hip, self.count_error = n_devices, is_hip, count_error
        self.tls = threading.local()
        self.streams: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.ranges: list[tuple[int, int, str, int]] = []  # sorted (base, end, kind, device)
        self.ranges_lock = threading.Lock()
        # bases of freed memory, from finalizers (which must take no lock): dropped at the next
        # register/span, under the lock (SimpleQueue.put is reentrant)
        self.freed: _q.SimpleQueue[int] = _q.SimpleQueue()
        self.pageable_copies = 0
        self.dlpack_syncs: list[tuple[int, Any]] = []
        self.launches: list[tuple[str, tuple, tuple, int, int]] = []
        self.graph_launches = 0  # Graph.launch calls (stream capture)
        self.kernel_runner: Callable[[str, tuple], None] | None = None
        # runs kernel bodies (fake_cupy_kernels.CppExecutor or OpenCLTwinExecutor): ``prepare(code, name,
        # options)`` when a kernel is loaded, ``run(prepared, grid, block, args, shared_mem)``
        # on the stream's thread; None: bodies do not run
        self.executor: Any = None
        self.sticky: BaseException | None = None  # a failed kernel: every later sync reports it
        # device memory the checks track (memory_checks() true when an allocation is made): per
        # allocation base, one byte per byte, 1 once written (a copy, a memset, a kernel's store)
        self.memory_checks: Callable[[], bool] | None = None
        self.shadows: dict[int, np.ndarray] = {}
        self.ranges_version = 0
        self._table: tuple[int, np.ndarray, list] | None = None

    def check_sticky(self) -> None:
        """Raise the error of a failed kernel, as CUDA does on every later synchronisation."""
        if self.sticky is not None:
            raise CUDARuntimeError(f"cudaErrorLaunchFailure: an earlier kernel failed: {self.sticky!r}")

    def device(self) -> int:
        return getattr(self.tls, "device", 0)

    def set_device(self, i: int) -> None:
        if not 0 <= i < self.n_devices:
            raise CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {i}")
        self.tls.device = i

    def current_stream(self, device: int) -> Any:
        stacks = getattr(self.tls, "streams", None)
        stack = stacks.get(device) if stacks else None
        return stack[-1] if stack else None

    def register(self, base: int, size: int, kind: str, device: int, shadow: np.ndarray | None = None) -> None:
        with self.ranges_lock:
            self._drop_freed()
            bisect.insort(self.ranges, (base, base + size, kind, device))
            if shadow is not None:
                self.shadows[base] = shadow
                self.ranges_version += 1

    def unregister(self, base: int) -> None:
        """Forget the range at ``base`` (called by finalizers: takes no lock, see ``freed``)."""
        self.freed.put(base)

    def _drop_freed(self) -> None:
        """Remove the ranges freed so far; the caller holds ``ranges_lock``."""
        while not self.freed.empty():
            base = self.freed.get_nowait()
            i = bisect.bisect_left(self.ranges, (base,))
            if i < len(self.ranges) and self.ranges[i][0] == base:
                del self.ranges[i]
            if self.shadows.pop(base, None) is not None:
                self.ranges_version += 1

    # ------------------------------------------------------------------ initialisation shadow
    def memory_table(self) -> tuple[np.ndarray, list] | None:
        """The tracked device memory for a checked launch: a uint64 array of rows (base, end,
        address of its shadow) sorted by base, and the shadows it points into (keep them alive
        while the kernel runs); None when nothing is tracked."""
        with self.ranges_lock:
            self._drop_freed()
            if not self.shadows:
                return None
            if self._table is None or self._table[0] != self.ranges_version:
                bases = sorted(self.shadows)
                shadows = [self.shadows[b] for b in bases]
                rows = np.array([(b, b + s.size, s.ctypes.data) for b, s in zip(bases, shadows)], np.uint64)
                self._table = (self.ranges_version, rows, shadows)
            return self._table[1], self._table[2]

    def shadow_at(self, ptr: int, n: int) -> np.ndarray | None:
        """The shadow bytes of ``[ptr, ptr + n)`` where that range is tracked device memory."""
        with self.ranges_lock:
            self._drop_freed()
            i = bisect.bisect_right(self.ranges, (ptr, float("inf"))) - 1
            if i < 0 or not self.ranges[i][0] <= ptr < self.ranges[i][1]:
                return None
            base = self.ranges[i][0]
            shadow = self.shadows.get(base)
        if shadow is None:
            return None
        return shadow[ptr - base : ptr - base + n]

    def poison(self, base: int, size: int) -> None:
        """A fresh allocation: its bytes a poison pattern (0xA5, as fresh shared memory) and its
        shadow unwritten, as initcheck sees memory a kernel reads before anything wrote it."""
        shadow = self.shadow_at(base, size)
        if shadow is not None:
            ctypes.memset(base, 0xA5, size)
            shadow[:] = 0

    def zero_now(self, ptr: int, n: int) -> None:
        """``cupy.zeros``' fill of a fresh allocation: after its poisoning (queued on the current
        stream), then written."""
        stream = self.current_stream(self.device())
        if stream is not None:
            stream.ex.drain()
        ctypes.memset(ptr, 0, n)
        self.mark_written(ptr, n)

    def mark_written(self, dst: int, n: int, src: int | None = None) -> None:
        """After a copy or memset of ``n`` bytes at ``dst``: written, or as initialised as the
        source's bytes where ``src`` is tracked device memory (a copy of garbage stays garbage)."""
        shadow = self.shadow_at(dst, n)
        if shadow is None:
            return
        from_shadow = self.shadow_at(src, n) if src is not None else None
        if from_shadow is not None and from_shadow.size == shadow.size:
            shadow[:] = from_shadow
        else:
            shadow[:] = 1

    def span(self, ptr: int) -> tuple[int, int, str, int] | None:
        """``(base, end, kind, device)`` of the registered range holding ``ptr``, or None."""
        with self.ranges_lock:
            self._drop_freed()
            i = bisect.bisect_right(self.ranges, (ptr, float("inf"))) - 1
            if i >= 0 and self.ranges[i][0] <= ptr < self.ranges[i][1]:
                return self.ranges[i]
        return None

    def where(self, ptr: int) -> tuple[str, int]:
        """("device", i), ("pinned", -1) or ("pageable", -1) for an address."""
        found = self.span(ptr)
        return (found[2], found[3]) if found is not None else ("pageable", -1)


class _Stream:
    """``cupy.cuda.Stream`` of one stand-in (its runtime ``_rt`` and graph class ``_graph`` are set
    by :func:`_make_stream_class`): a thread running its work in order, or recording it while
    capturing."""

    _rt: _Runtime
    _graph: type[_Graph]

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        self.device_id = self._rt.device()
        self.ex = _Exec(f"fake-stream-dev{self.device_id}")
        _next_ptr[0] += 16
        self.ptr = _next_ptr[0]
        self._rt.streams[self.ptr] = self
        self.captured: list | None = None  # the recording while capturing (begin_capture)
        self.capture_error: str | None = None  # what invalidated the capture
        weakref.finalize(self, self.ex.stop)  # cudaStreamDestroy: its thread ends after its work

    def enqueue(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the stream in order, or record it while capturing."""
        if self.captured is not None:
            self.captured.append(fn)
        else:
            self.ex.submit(fn)

    def refuse_in_capture(self, what: str) -> None:
        if self.captured is not None:
            self.capture_error = self.capture_error or what
            raise CUDARuntimeError(
                f"cudaErrorStreamCaptureUnsupported: {what} on a capturing stream (the capture is invalidated)"
            )

    def synchronize(self) -> None:
        self.refuse_in_capture("cudaStreamSynchronize")
        self.ex.drain()
        self._rt.check_sticky()

    @property
    def done(self) -> bool:
        self.refuse_in_capture("cudaStreamQuery")
        return self.ex.idle()

    def wait_event(self, event: Any) -> None:  # events of other devices are allowed
        self.refuse_in_capture("cudaStreamWaitEvent (not emulated in a capture)")
        flag = event.flag
        self.ex.submit(lambda: flag.wait() if flag is not None else None)

    def begin_capture(self, mode: Any = None) -> None:
        if self._rt.is_hip:
            raise RuntimeError("This feature is not supported on HIP")
        if self.captured is not None:
            raise CUDARuntimeError("cudaErrorIllegalState: the stream is capturing already")
        self.captured, self.capture_error = [], None

    def end_capture(self) -> Any:
        if self.captured is None:
            raise CUDARuntimeError("cudaErrorIllegalState: the stream is not capturing")
        nodes, error = self.captured, self.capture_error
        self.captured = self.capture_error = None
        if error is not None:
            raise CUDARuntimeError(f"cudaErrorStreamCaptureInvalidated: {error} during the capture")
        return self._graph.from_nodes(nodes, self.device_id)

    def is_capturing(self) -> int:
        return 0 if self.captured is None else (2 if self.capture_error else 1)

    def launch_host_func(self, callback: Callable[[Any], None], arg: Any) -> None:
        if self._rt.is_hip:
            raise RuntimeError("This feature is not supported on HIP")

        def on_stream() -> None:
            done = threading.Event()
            _callbacks.submit(lambda: (callback(arg), done.set()))
            done.wait()  # the stream waits for the host function, as in CUDA

        self.enqueue(on_stream)  # a host node when capturing (cupy supports it)

    def record(self, event: Any = None) -> Any:
        event = event or self._rt.module.cuda.Event()
        event.record(self)
        return event

    def __enter__(self) -> _Stream:
        stacks = self._rt.tls.__dict__.setdefault("streams", {})
        stacks.setdefault(self.device_id, []).append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._rt.tls.streams[self.device_id].pop()


class _Graph:
    """``cupy.cuda.graph.Graph`` of one stand-in (its runtime ``_rt`` set by
    :func:`_make_stream_class`): made by ``Stream.end_capture`` only; ``launch(stream)`` runs the
    captured nodes in their order on ``stream`` (the current stream by default)."""

    _rt: _Runtime

    def __init__(self, *args: Any, **kw: Any) -> None:
        raise NotImplementedError(
            "currently this class cannot be initiated by the user and must be created via stream capture"
        )

    @classmethod
    def from_nodes(cls, nodes: list, device_id: int) -> _Graph:
        g = cls.__new__(cls)
        g.nodes, g.device_id = tuple(nodes), device_id
        return g

    def _target(self, stream: Any) -> Any:
        stream = stream if stream is not None else self._rt.current_stream(self._rt.device())
        if stream is None:
            raise CUDARuntimeError("fake cupy: a graph launched on the legacy null stream is not emulated")
        if stream.device_id != self.device_id:
            raise CUDARuntimeError(
                f"cudaErrorInvalidValue: graph of device {self.device_id} launched on a "
                f"stream of device {stream.device_id}"
            )
        return stream

    def launch(self, stream: Any = None) -> None:
        stream = self._target(stream)
        if stream.captured is not None:
            raise CUDARuntimeError("fake cupy: a graph launched into a capture (a child graph) is not emulated")
        nodes = self.nodes
        self._rt.graph_launches += 1

        def run() -> None:
            for node in nodes:
                node()

        stream.ex.submit(run)

    def upload(self, stream: Any = None) -> None:
        self._target(stream)


def _make_stream_class(rt: _Runtime) -> tuple[type[_Stream], type[_Graph]]:
    """The ``Stream`` and ``Graph`` classes of the stand-in whose runtime is ``rt``."""

    class Graph(_Graph):
        __doc__ = _Graph.__doc__
        _rt = rt

    class Stream(_Stream):
        __doc__ = _Stream.__doc__
        _rt = rt
        _graph = Graph

    return Stream, Graph


class _HostNullStream:
    """A null-stream handle on the stand-in (see ``ExternalStream``): work "on" it is the host's."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def wait_event(self, event: Any) -> None:
        event.synchronize()


def _make_event_class(rt: _Runtime) -> type:
    class Event:
        def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
            self.device_id = rt.device()
            self.flag: threading.Event | None = None

        def record(self, stream: Any = None) -> None:
            stream = stream or rt.current_stream(rt.device())
            if stream is None:
                raise CUDARuntimeError("fake cupy: recording on the legacy null stream is not emulated")
            stream.refuse_in_capture("cudaEventRecord (not emulated in a capture)")
            if stream.device_id != self.device_id:
                raise CUDARuntimeError(
                    f"cudaErrorInvalidResourceHandle: event of device {self.device_id} "
                    f"recorded on a stream of device {stream.device_id}"
                )
            flag = threading.Event()
            self.flag = flag
            stream.ex.submit(flag.set)

        @property
        def done(self) -> bool:
            return self.flag is None or self.flag.is_set()

        def synchronize(self) -> None:
            if self.flag is not None:
                self.flag.wait()
            rt.check_sticky()

    return Event
