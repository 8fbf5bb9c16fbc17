"""A host-memory stand-in for the part of cupy's API the cuda/rocm backends use, so their
runtime logic (streams, events, host tasks, pools, copies, arrays, launches) runs without a GPU.

It is as strict as cupy 14 on CUDA or HIP where alpyka's correctness depends on it:

- the current device is per thread (``runtime.setDevice`` on one thread leaves the others
  alone), and so is cupy's current stream, per device (``with stream:``);
- each stream is a thread running its operations in FIFO order; events complete when their
  stream reaches them; an event records only on a stream of the device it was created on;
- ``get_default_memory_pool()`` has one arena per device and, inside it, per stream: a freed
  block is reused only by allocations on the same stream (stream-ordered reuse);
  ``total_bytes``/``free_all_blocks`` act on the *current* device's arena only;
- ``memcpyAsync`` with pageable (not page-locked) host memory returns only once the copy is
  complete, as CUDA's does (counted in ``runtime.pageable_copies``);
- the HIP personality (``is_hip=True``) refuses ``Stream.launch_host_func`` with cupy's own
  message and its arrays have no ``__cuda_array_interface__``;
- stream capture (CUDA graphs): ``stream.begin_capture()`` makes the stream record its kernels,
  copies, fills and host functions instead of running them, ``stream.end_capture()`` returns a
  ``cuda.graph.Graph`` whose ``launch(stream)`` runs the recording on ``stream`` in order (one
  graph launch, counted in ``rt.graph_launches``); ``stream.is_capturing()`` and
  ``runtime.streamIsCapturing``. As in CUDA, synchronising or querying a capturing stream, a
  copy with pageable host memory, an event record or a stream wait on it fail with
  ``cudaErrorStreamCaptureUnsupported`` and invalidate the capture (``end_capture`` then raises
  ``cudaErrorStreamCaptureInvalidated``); the HIP personality refuses ``begin_capture`` (cupy's
  docs: not supported on HIP);
- ``__dlpack__(stream=s)`` synchronises like cupy: unless ``s == -1`` (no synchronisation) or
  ``s`` is the current stream, an event of the current stream is waited for on ``s``
  (recorded in ``dlpack_syncs``);
- ``cuda.ExternalStream(ptr)`` finds the stand-in's stream of that handle; the null stream's
  handles (0, 1, 2) stand for the host: waiting on one there waits for the event on the host;
- ``RawModule``/``RawKernel`` record the options cupy would pass to NVRTC (``-ftz=true``
  appended on CUDA); a launch checks the arguments against the kernel's C signature as cupy
  packs them (a numpy scalar by its own dtype, a pointer as 8 bytes), the pointers against
  the launching device, the current stream against the device and the dynamic shared memory
  against the kernel's limit (48 KB unless raised, at most the opt-in limit).
- kernel bodies run only with an executor (``rt.executor``, set by
  :func:`fake_cupy_kernels.enable_execution`): by default the CUDA/HIP text itself, compiled for
  the CPU (cuda_on_cpu.py), else its OpenCL C twin on an OpenCL CPU device; one launch at a time
  on the stream's thread, over the stand-in's device memory (host memory, used in place); the
  CUDA/HIP text is also compiled by NVRTC where it is installed. A failed kernel is sticky: every
  later synchronisation raises. Without an executor the body does not run; ``kernel_runner``
  (``fn(name, args)``, on the stream's thread) can emulate one.
"""

from __future__ import annotations

import bisect
import ctypes
import queue as _q
import re
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from portable import AlpykaError

from .thread_limit import max_threads_per_block


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


def _nothing() -> None:
    """A kernel whose body does not run (no executor)."""


_callbacks = _Exec("fake-cuda-callbacks")  # CUDA runs every host function on one driver thread
_next_ptr = [0x7000]
_C_TYPES = {
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f32": "float32",
    "f64": "float64",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "bool": "uint8",
    "char": "int8",
    "long long": "int64",
    "unsigned int": "uint32",
    "unsigned long long": "uint64",
}
#: what ``getDeviceProperties(i)["name"]`` says, by ``is_hip`` (alpyka info and str(device) show it)
DEVICE_NAME = {
    False: "CUDA emulated on the CPU (ALPYKA_EMULATE)",
    True: "ROCm (HIP) emulated on the CPU (ALPYKA_EMULATE)",
}
_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')


class _Runtime:
    """One stand-in's state: devices, the per-thread current device, memory, counters."""

    def __init__(self, n_devices: int, is_hip: bool, count_error: str | None) -> None:
        self.n_devices, self.is_hip, self.count_error = n_devices, is_hip, count_error
        self.tls = threading.local()
        self.streams: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.ranges: list[tuple[int, int, str, int]] = []  # sorted (base, end, kind, device)
        self.ranges_lock = threading.Lock()
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

    def register(self, base: int, size: int, kind: str, device: int) -> None:
        with self.ranges_lock:
            bisect.insort(self.ranges, (base, base + size, kind, device))

    def unregister(self, base: int) -> None:
        with self.ranges_lock:
            i = bisect.bisect_left(self.ranges, (base,))
            if i < len(self.ranges) and self.ranges[i][0] == base:
                del self.ranges[i]

    def span(self, ptr: int) -> tuple[int, int, str, int] | None:
        """``(base, end, kind, device)`` of the registered range holding ``ptr``, or None."""
        with self.ranges_lock:
            i = bisect.bisect_right(self.ranges, (ptr, float("inf"))) - 1
            if i >= 0 and self.ranges[i][0] <= ptr < self.ranges[i][1]:
                return self.ranges[i]
        return None

    def where(self, ptr: int) -> tuple[str, int]:
        """("device", i), ("pinned", -1) or ("pageable", -1) for an address."""
        found = self.span(ptr)
        return (found[2], found[3]) if found is not None else ("pageable", -1)


def _make_stream_class(rt: _Runtime) -> type:
    class Stream:
        def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
            self.device_id = rt.device()
            self.ex = _Exec(f"fake-stream-dev{self.device_id}")
            _next_ptr[0] += 16
            self.ptr = _next_ptr[0]
            rt.streams[self.ptr] = self
            self._captured: list | None = None  # the recording while capturing (begin_capture)
            self._capture_error: str | None = None  # what invalidated the capture
            weakref.finalize(self, self.ex.stop)  # cudaStreamDestroy: its thread ends after its work

        def enqueue(self, fn: Callable[[], Any]) -> None:
            """Run ``fn`` on the stream in order, or record it while capturing."""
            if self._captured is not None:
                self._captured.append(fn)
            else:
                self.ex.submit(fn)

        def _refuse_in_capture(self, what: str) -> None:
            if self._captured is not None:
                self._capture_error = self._capture_error or what
                raise CUDARuntimeError(
                    f"cudaErrorStreamCaptureUnsupported: {what} on a capturing stream (the capture is invalidated)"
                )

        def synchronize(self) -> None:
            self._refuse_in_capture("cudaStreamSynchronize")
            self.ex.drain()
            rt.check_sticky()

        @property
        def done(self) -> bool:
            self._refuse_in_capture("cudaStreamQuery")
            return self.ex.idle()

        def wait_event(self, event: Any) -> None:  # events of other devices are allowed
            self._refuse_in_capture("cudaStreamWaitEvent (not emulated in a capture)")
            flag = event._flag
            self.ex.submit(lambda: flag.wait() if flag is not None else None)

        def begin_capture(self, mode: Any = None) -> None:
            if rt.is_hip:
                raise RuntimeError("This feature is not supported on HIP")
            if self._captured is not None:
                raise CUDARuntimeError("cudaErrorIllegalState: the stream is capturing already")
            self._captured, self._capture_error = [], None

        def end_capture(self) -> Any:
            if self._captured is None:
                raise CUDARuntimeError("cudaErrorIllegalState: the stream is not capturing")
            nodes, error = self._captured, self._capture_error
            self._captured = self._capture_error = None
            if error is not None:
                raise CUDARuntimeError(f"cudaErrorStreamCaptureInvalidated: {error} during the capture")
            return Graph._from_nodes(nodes, self.device_id)

        def is_capturing(self) -> int:
            return 0 if self._captured is None else (2 if self._capture_error else 1)

        def launch_host_func(self, callback: Callable[[Any], None], arg: Any) -> None:
            if rt.is_hip:
                raise RuntimeError("This feature is not supported on HIP")

            def on_stream() -> None:
                done = threading.Event()
                _callbacks.submit(lambda: (callback(arg), done.set()))
                done.wait()  # the stream waits for the host function, as in CUDA

            self.enqueue(on_stream)  # a host node when capturing (cupy supports it)

        def record(self, event: Any = None) -> Any:
            event = event or rt.module.cuda.Event()
            event.record(self)
            return event

        def __enter__(self) -> Stream:
            stacks = rt.tls.__dict__.setdefault("streams", {})
            stacks.setdefault(self.device_id, []).append(self)
            return self

        def __exit__(self, *exc: Any) -> None:
            rt.tls.streams[self.device_id].pop()

    class Graph:
        """``cupy.cuda.graph.Graph``: made by ``Stream.end_capture`` only; ``launch(stream)``
        runs the captured nodes in their order on ``stream`` (the current stream by default)."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            raise NotImplementedError(
                "currently this class cannot be initiated by the user and must be created via stream capture"
            )

        @classmethod
        def _from_nodes(cls, nodes: list, device_id: int) -> Graph:
            g = cls.__new__(cls)
            g._nodes, g._device_id = tuple(nodes), device_id
            return g

        def _target(self, stream: Any) -> Any:
            stream = stream if stream is not None else rt.current_stream(rt.device())
            if stream is None:
                raise CUDARuntimeError("fake cupy: a graph launched on the legacy null stream is not emulated")
            if stream.device_id != self._device_id:
                raise CUDARuntimeError(
                    f"cudaErrorInvalidValue: graph of device {self._device_id} launched on a "
                    f"stream of device {stream.device_id}"
                )
            return stream

        def launch(self, stream: Any = None) -> None:
            stream = self._target(stream)
            if stream._captured is not None:
                raise CUDARuntimeError("fake cupy: a graph launched into a capture (a child graph) is not emulated")
            nodes = self._nodes
            rt.graph_launches += 1

            def run() -> None:
                for node in nodes:
                    node()

            stream.ex.submit(run)

        def upload(self, stream: Any = None) -> None:
            self._target(stream)

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
            self._flag: threading.Event | None = None

        def record(self, stream: Any = None) -> None:
            stream = stream or rt.current_stream(rt.device())
            if stream is None:
                raise CUDARuntimeError("fake cupy: recording on the legacy null stream is not emulated")
            stream._refuse_in_capture("cudaEventRecord (not emulated in a capture)")
            if stream.device_id != self.device_id:
                raise CUDARuntimeError(
                    f"cudaErrorInvalidResourceHandle: event of device {self.device_id} "
                    f"recorded on a stream of device {stream.device_id}"
                )
            flag = threading.Event()
            self._flag = flag
            stream.ex.submit(flag.set)

        @property
        def done(self) -> bool:
            return self._flag is None or self._flag.is_set()

        def synchronize(self) -> None:
            if self._flag is not None:
                self._flag.wait()
            rt.check_sticky()

    return Event


# ---------------------------------------------------------------------- memory
class _Chunk:
    def __init__(self, rt: _Runtime, n: int, device: int) -> None:
        self.size = n
        self.raw = np.zeros(n + 512, np.uint8)
        self.base = self.raw.ctypes.data + (-self.raw.ctypes.data) % 512
        rt.register(self.base, n, "device", device)
        weakref.finalize(self, rt.unregister, self.base)


class PooledMemory:
    """An allocation of the pool; back to its stream's arena when collected (as in cupy)."""

    def __init__(self, chunk: _Chunk, arena: list, device_id: int) -> None:
        self.chunk, self.arena, self.device_id = chunk, arena, device_id
        self.ptr, self.size = chunk.base, chunk.size

    def __del__(self) -> None:
        self.arena.append(self.chunk)


class _DevicePool:
    """One device's arena: free blocks per stream, reused on that stream only."""

    def __init__(self, rt: _Runtime, device: int) -> None:
        self.rt, self.device = rt, device
        self.free: dict[int, list[_Chunk]] = {}
        self.total = 0
        self.lock = threading.Lock()
        self.mallocs: list[int] = []  # the stream pointer of each allocation

    def malloc(self, n: int) -> MemoryPointer:
        n = -(-max(n, 1) // 512) * 512
        stream = self.rt.current_stream(self.device)
        sp = stream.ptr if stream is not None else 0
        self.mallocs.append(sp)
        with self.lock:
            arena = self.free.setdefault(sp, [])
            for i, c in enumerate(arena):
                if c.size == n:
                    chunk = arena.pop(i)
                    break
            else:
                chunk = _Chunk(self.rt, n, self.device)
                self.total += n
        return MemoryPointer(PooledMemory(chunk, arena, self.device), 0)

    def free_all_blocks(self) -> None:
        with self.lock:
            for arena in self.free.values():
                self.total -= sum(c.size for c in arena)
                arena.clear()

    def free_bytes(self) -> int:
        return sum(c.size for arena in self.free.values() for c in arena)


class MemoryPool:
    """cupy's default pool: every call acts on the current device's arena."""

    def __init__(self, rt: _Runtime) -> None:
        self.rt = rt
        self.pools = [_DevicePool(rt, i) for i in range(max(rt.n_devices, 1))]

    def _pool(self) -> _DevicePool:
        return self.pools[self.rt.device()]

    def malloc(self, n: int) -> MemoryPointer:
        return self._pool().malloc(n)

    def total_bytes(self) -> int:
        return self._pool().total

    def free_bytes(self) -> int:
        return self._pool().free_bytes()

    def free_all_blocks(self, stream: Any = None) -> None:
        self._pool().free_all_blocks()


class MemoryPointer:
    def __init__(self, mem: Any, offset: int) -> None:
        self.mem, self.offset = mem, offset
        self.ptr = mem.ptr + offset
        self.device_id = getattr(mem, "device_id", -1)

    def __add__(self, n: int) -> MemoryPointer:
        return MemoryPointer(self.mem, self.offset + n)


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class PinnedMemory(bytearray):
    """Page-locked host memory (registered as such while it lives)."""


class _DataPtr:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class FakeDeviceArray(np.ndarray):
    """A numpy array over "device" memory with cupy's ``get()``, ``data.ptr``, the CUDA array
    interface (not on HIP) and cupy's DLPack stream handshake."""

    _rt: _Runtime | None = None

    def get(self) -> np.ndarray:
        return np.array(self)

    @property
    def data(self) -> _DataPtr:  # type: ignore[override]
        return _DataPtr(self.ctypes.data)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self._rt is not None and self._rt.is_hip:
            raise AttributeError("HIP/ROCm does not support cuda array interface")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ctypes.data, False),
            "strides": self.strides,
            "version": 3,
        }

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        rt = self._rt
        if rt is not None and stream != -1:
            cur = rt.current_stream(rt.device())
            cur_ptr = cur.ptr if cur is not None else 0
            if stream is None or stream != cur_ptr:
                rt.dlpack_syncs.append((cur_ptr, stream))  # cupy: event on current, wait on ``stream``
        return np.asarray(self).view(np.ndarray).__dlpack__()


def _array(rt: _Runtime, cls: type, shape: Any, dtype: Any, memptr: MemoryPointer, strides: Any = None) -> np.ndarray:
    dtype = np.dtype(dtype)
    size = max(getattr(memptr.mem, "size", 0) - memptr.offset, 1)
    buf = (ctypes.c_uint8 * size).from_address(memptr.ptr)
    buf._keep = memptr  # type: ignore[attr-defined] - the memory's owner lives as long as the array
    return cls(shape, dtype, buffer=buf, strides=strides)


# ---------------------------------------------------------------------- kernels
def _parse_params(code: str, name: str) -> list[str]:
    for m in _SIGNATURE.finditer(code):
        if m.group(1) == name:
            return [p.strip() for p in m.group(2).split(",") if p.strip()]
    raise CUDARuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol {name!r} not found")


def _make_raw(rt: _Runtime) -> tuple[type, type]:
    default_dyn = 48 * 1024
    optin = 64 * 1024 if rt.is_hip else 232448

    class RawKernel:
        def __init__(self, module: Any, name: str) -> None:
            self.module, self.name = module, name
            self.params = _parse_params(module.code, name)
            # the kernel's own limit, estimated from its registers (thread_limit.py), as
            # cudaFuncGetAttributes answers it on a GPU
            self.max_threads_per_block = max_threads_per_block(module.code, rt.is_hip)
            self._dyn = default_dyn if not rt.is_hip else optin
            # compiled (and its OpenCL twin built) at load, as cupy does on first use
            self.prepared = rt.executor.prepare(module.code, name, module.options) if rt.executor else None

        @property
        def max_dynamic_shared_size_bytes(self) -> int:
            return self._dyn

        @max_dynamic_shared_size_bytes.setter
        def max_dynamic_shared_size_bytes(self, value: int) -> None:
            if value > optin:
                raise CUDARuntimeError(
                    f"cudaErrorInvalidValue: {value} bytes of dynamic shared memory above the opt-in limit {optin}"
                )
            self._dyn = int(value)

        def _check_arg(self, i: int, decl: str, value: Any, device: int) -> None:
            ctype = decl.rsplit(None, 1)[0].replace("const ", "").strip()
            if ctype.endswith("*"):
                if not (isinstance(value, np.generic) and value.dtype.itemsize == 8 and value.dtype.kind in "ui"):
                    raise TypeError(f"kernel {self.name}: argument {i} ({decl}) is a pointer; got {value!r}")
                kind, dev = rt.where(int(value))
                if kind == "device" and dev != device:
                    raise CUDARuntimeError(
                        f"cudaErrorIllegalAddress: kernel {self.name} on device {device} given "
                        f"memory of device {dev} (argument {i}: {decl})"
                    )
                return
            want = _C_TYPES.get(ctype)
            if want is None:
                raise TypeError(f"kernel {self.name}: fake cupy does not know C type {ctype!r}")
            if not isinstance(value, np.generic) or value.dtype != np.dtype(want):
                got = value.dtype if isinstance(value, np.generic) else type(value).__name__
                raise TypeError(f"kernel {self.name}: argument {i} ({decl}) is {want}; cupy would pack {got}")

        def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, **kw: Any) -> None:
            device = rt.device()
            stream = rt.current_stream(device)
            if stream is None:
                raise CUDARuntimeError(
                    f"fake cupy: kernel {self.name} launched on the legacy null stream of "
                    f"device {device} (no current stream for it on this thread)"
                )
            if len(args) != len(self.params):
                raise TypeError(f"kernel {self.name} takes {len(self.params)} arguments; got {len(args)}")
            for i, (decl, value) in enumerate(zip(self.params, args)):
                self._check_arg(i, decl, value, device)
            if shared_mem > self._dyn:
                raise CUDARuntimeError(
                    f"cudaErrorInvalidValue: {shared_mem} bytes of dynamic shared memory; "
                    f"the kernel's limit is {self._dyn} (cudaFuncSetAttribute to raise it)"
                )
            rt.launches.append((self.name, tuple(grid), tuple(block), shared_mem, stream.ptr))
            runner, name, prepared = rt.kernel_runner, self.name, self.prepared
            if prepared is not None:
                executor = rt.executor

                def execute() -> None:
                    try:
                        executor.run(prepared, tuple(grid), tuple(block), args, shared_mem)
                    except BaseException as exc:  # a device fault: sticky, reported on sync
                        rt.sticky = rt.sticky or exc
                        raise

                stream.enqueue(execute)
            elif runner is not None:
                stream.enqueue(lambda: runner(name, args))
            else:
                stream.enqueue(_nothing)

    class RawModule:
        def __init__(self, code: str = "", options: tuple = (), **kw: Any) -> None:
            self.code = code
            # what cupy hands the compiler: NVRTC gets -ftz=true appended; hiprtc flushes by default
            self.options = tuple(options) + (() if rt.is_hip else ("-ftz=true",))

        def get_function(self, name: str) -> RawKernel:
            return RawKernel(self, name)

    return RawKernel, RawModule


# ---------------------------------------------------------------------- the module
def make_fake_cupy(n_devices: int = 2, is_hip: bool = False, count_error: str | None = None) -> Any:
    """A module object standing in for ``cupy`` (see the module docstring)."""
    rt = _Runtime(n_devices, is_hip, count_error)
    pool = MemoryPool(rt)
    (Stream, Graph), Event = _make_stream_class(rt), _make_event_class(rt)
    RawKernel, RawModule = _make_raw(rt)
    array_cls = type("ndarray", (FakeDeviceArray,), {"_rt": rt})

    def get_device_count() -> int:
        if count_error:
            raise CUDARuntimeError(count_error)
        return n_devices

    def props(i: int) -> dict:
        p = {
            "name": DEVICE_NAME[is_hip].encode(),
            "maxThreadsPerBlock": 1024,
            "maxThreadsDim": (1024, 1024, 64),
            "maxGridSize": (2**31 - 1, 65535, 65535),
            "warpSize": 64 if is_hip else 32,
            "multiProcessorCount": 4,
            "major": 9,
            "minor": 0,
            "totalGlobalMem": 1 << 30,
        }
        if is_hip:
            p.update(sharedMemPerBlock=65536, gcnArchName=b"gfx90a:sramecc+:xnack-")
        else:
            p.update(sharedMemPerBlock=49152, sharedMemPerBlockOptin=232448)
        return p

    def stream_of(ptr: int) -> Any:
        s = rt.streams.get(ptr)
        if s is None:
            raise CUDARuntimeError("fake cupy: the legacy null stream is not emulated")
        return s

    def external_stream(ptr: int, device_id: int = -1) -> Any:
        """``cupy.cuda.ExternalStream``: a stream by its handle. The stand-in's streams are its
        own; the null stream's handles (0, CUDA's 1 and 2: legacy and per-thread default) stand
        for the host, which reads the stand-in's memory at once: waiting on one waits on the host."""
        s = rt.streams.get(ptr)
        if s is not None:
            return s
        if ptr in (0, 1, 2):
            return _HostNullStream(ptr)
        raise CUDARuntimeError(f"cudaErrorInvalidResourceHandle: fake cupy has no stream {ptr:#x}")

    def memcpy_async(dst: int, src: int, n: int, kind: int, stream_ptr: int) -> None:
        s = stream_of(stream_ptr)
        pageable = "pageable" in (rt.where(dst)[0], rt.where(src)[0])
        if pageable:
            s._refuse_in_capture("cudaMemcpyAsync with pageable host memory")
        s.enqueue(lambda: ctypes.memmove(dst, src, n))
        if pageable:
            rt.pageable_copies += 1
            s.synchronize()  # CUDA: a copy to/from pageable memory returns once complete

    def memset_async(ptr: int, value: int, n: int, stream_ptr: int) -> None:
        stream_of(stream_ptr).enqueue(lambda: ctypes.memset(ptr, value, n))

    def stream_is_capturing(stream_ptr: int) -> int:
        return stream_of(stream_ptr).is_capturing()

    def alloc_pinned(n: int) -> PinnedMemory:
        mem = PinnedMemory(n)
        base = np.frombuffer(mem, np.uint8).ctypes.data if n else 0
        rt.register(base, n, "pinned", -1)
        weakref.finalize(mem, rt.unregister, base)
        return mem

    def empty(shape: Any, dtype: Any = np.float64) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        mp = pool.malloc(int(np.prod(shape)) * dtype.itemsize)
        return _array(rt, array_cls, shape, dtype, mp)

    def zeros(shape: Any, dtype: Any = np.float64) -> np.ndarray:
        a = empty(shape, dtype)
        ctypes.memset(a.ctypes.data, 0, a.nbytes)
        return a

    runtime = types.SimpleNamespace(
        is_hip=is_hip,
        getDeviceCount=get_device_count,
        getDeviceProperties=props,
        getDevice=rt.device,
        setDevice=rt.set_device,
        memcpyAsync=memcpy_async,
        memsetAsync=memset_async,
        runtimeGetVersion=lambda: 13000,
        driverGetVersion=lambda: 13000,
        CUDARuntimeError=CUDARuntimeError,
        streamIsCapturing=stream_is_capturing,
        streamCaptureModeGlobal=0,
        streamCaptureModeThreadLocal=1,
        streamCaptureModeRelaxed=2,
        streamCaptureStatusNone=0,
        streamCaptureStatusActive=1,
        streamCaptureStatusInvalidated=2,
    )
    cuda = types.SimpleNamespace(
        runtime=runtime,
        Stream=Stream,
        Event=Event,
        UnownedMemory=UnownedMemory,
        MemoryPointer=MemoryPointer,
        alloc_pinned_memory=alloc_pinned,
        get_current_stream=lambda: rt.current_stream(rt.device()),
        ExternalStream=external_stream,
        Graph=Graph,
        graph=types.SimpleNamespace(Graph=Graph),
    )
    mod = types.SimpleNamespace(
        __version__="14.fake",
        cuda=cuda,
        get_default_memory_pool=lambda: pool,
        ndarray=lambda shape, dtype, memptr, strides=None: _array(rt, array_cls, shape, dtype, memptr, strides),
        empty=empty,
        zeros=zeros,
        int32=np.int32,
        RawModule=RawModule,
        RawKernel=RawKernel,
        pool=pool,
        rt=rt,
    )
    rt.module = mod  # type: ignore[attr-defined]
    return mod
