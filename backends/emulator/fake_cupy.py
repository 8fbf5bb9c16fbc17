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

import ctypes
import os
import re
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .fake_cupy_memory import FakeDeviceArray, MemoryPointer, MemoryPool, PinnedMemory, UnownedMemory, _array
from .fake_cupy_runtime import CUDARuntimeError, _HostNullStream, _make_event_class, _make_stream_class, _Runtime
from .thread_limit import max_threads_per_block

__all__ = ["DEVICE_NAME", "CUDARuntimeError", "FakeDeviceArray", "make_fake_cupy"]


def _nothing() -> None:
    """A kernel whose body does not run (no executor)."""


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
#: the lanes of a warp, by ``is_hip``: CUDA's 32, a CDNA wavefront's 64 (the OpenCL twins run as many)
WARP_SIZE = {False: 32, True: 64}
#: what ``getDeviceProperties(i)["name"]`` says, by ``is_hip`` (alpyka info and str(device) show it)
DEVICE_NAME = {
    False: "CUDA emulated on the CPU (ALPYKA_EMULATE)",
    True: "ROCm (HIP) emulated on the CPU (ALPYKA_EMULATE)",
}
_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')


# ---------------------------------------------------------------------- kernels
def _parse_params(code: str, name: str) -> list[str]:
    for m in _SIGNATURE.finditer(code):
        if m.group(1) == name:
            return [p.strip() for p in m.group(2).split(",") if p.strip()]
    raise CUDARuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol {name!r} not found")


#: dynamic shared memory a kernel may use unless raised (cudaFuncSetAttribute), on CUDA
_DEFAULT_DYNAMIC_SHARED = 48 * 1024


class _RawKernel:
    """``cupy.RawKernel`` of one stand-in (its runtime ``_rt`` and opt-in limit of dynamic shared
    memory ``_optin`` are set by :func:`_make_raw`): checks a launch as cupy and CUDA would and
    queues the kernel's body on the current stream."""

    _rt: _Runtime
    _optin: int

    def __init__(self, module: Any, name: str) -> None:
        rt = self._rt
        self.module, self.name = module, name
        self.params = _parse_params(module.code, name)
        # the kernel's own limit, estimated from its registers (thread_limit.py), as
        # cudaFuncGetAttributes answers it on a GPU
        self.max_threads_per_block = max_threads_per_block(module.code, rt.is_hip)
        self._dyn = _DEFAULT_DYNAMIC_SHARED if not rt.is_hip else self._optin
        # compiled (and its OpenCL twin built) at load, as cupy does on first use
        self.prepared = rt.executor.prepare(module.code, name, module.options) if rt.executor else None

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._dyn

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        if value > self._optin:
            raise CUDARuntimeError(
                f"cudaErrorInvalidValue: {value} bytes of dynamic shared memory above the opt-in limit {self._optin}"
            )
        self._dyn = int(value)

    def _check_arg(self, i: int, decl: str, value: Any, device: int) -> None:
        ctype = decl.rsplit(None, 1)[0].replace("const ", "").strip()
        if ctype.endswith("*"):
            self._check_pointer(i, decl, value, device)
            return
        want = _C_TYPES.get(ctype)
        if want is None:
            raise TypeError(f"kernel {self.name}: fake cupy does not know C type {ctype!r}")
        if not isinstance(value, np.generic) or value.dtype != np.dtype(want):
            got = value.dtype if isinstance(value, np.generic) else type(value).__name__
            raise TypeError(f"kernel {self.name}: argument {i} ({decl}) is {want}; cupy would pack {got}")

    def _check_pointer(self, i: int, decl: str, value: Any, device: int) -> None:
        if not (isinstance(value, np.generic) and value.dtype.itemsize == 8 and value.dtype.kind in "ui"):
            raise TypeError(f"kernel {self.name}: argument {i} ({decl}) is a pointer; got {value!r}")
        kind, dev = self._rt.where(int(value))
        if kind == "device" and dev != device:
            raise CUDARuntimeError(
                f"cudaErrorIllegalAddress: kernel {self.name} on device {device} given "
                f"memory of device {dev} (argument {i}: {decl})"
            )

    def _check_launch(self, device: int, stream: Any, args: tuple, shared_mem: int) -> None:
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

    def _body(self, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> Callable[[], Any]:
        """What the stream runs: the compiled body (a failure is sticky, reported on sync), the
        runtime's ``kernel_runner``, or nothing."""
        rt, runner, name, prepared = self._rt, self._rt.kernel_runner, self.name, self.prepared
        if prepared is not None:
            executor = rt.executor

            def execute() -> None:
                try:
                    executor.run(prepared, tuple(grid), tuple(block), args, shared_mem)
                except BaseException as exc:  # a device fault: sticky, reported on sync
                    rt.sticky = rt.sticky or exc
                    raise

            return execute
        if runner is not None:
            return lambda: runner(name, args)
        return _nothing

    def __call__(
        self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream: Any = None, **kw: Any
    ) -> None:
        rt = self._rt
        device = rt.device()
        if stream is None:  # (cupy's default: the thread's current stream)
            stream = rt.current_stream(device)
        elif stream.device_id != device:
            raise CUDARuntimeError(
                f"cudaErrorInvalidResourceHandle: kernel {self.name} launched on device {device} "
                f"with a stream of device {stream.device_id}"
            )
        self._check_launch(device, stream, args, shared_mem)
        rt.launches.append((self.name, tuple(grid), tuple(block), shared_mem, stream.ptr))
        stream.enqueue(self._body(grid, block, args, shared_mem))


class _RawModule:
    """``cupy.RawModule`` of one stand-in (its runtime ``_rt`` and kernel class ``_kernel`` are set
    by :func:`_make_raw`): the code and the options cupy would hand the compiler."""

    _rt: _Runtime
    _kernel: type[_RawKernel]

    def __init__(self, code: str = "", options: tuple = (), **kw: Any) -> None:
        self.code = code
        # what cupy hands the compiler: NVRTC gets -ftz=true appended; hiprtc flushes by default
        self.options = tuple(options) + (() if self._rt.is_hip else ("-ftz=true",))

    def get_function(self, name: str) -> _RawKernel:
        return self._kernel(self, name)


def _make_raw(rt: _Runtime) -> tuple[type[_RawKernel], type[_RawModule]]:
    """The ``RawKernel`` and ``RawModule`` classes of the stand-in whose runtime is ``rt``."""

    class RawKernel(_RawKernel):
        __doc__ = _RawKernel.__doc__
        _rt = rt
        _optin = 64 * 1024 if rt.is_hip else 232448

    class RawModule(_RawModule):
        __doc__ = _RawModule.__doc__
        _rt = rt
        _kernel = RawKernel

    return RawKernel, RawModule


# ---------------------------------------------------------------------- the module
def _host_memory() -> int:
    """This machine's physical memory in bytes (1 TiB where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 40


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
            "warpSize": WARP_SIZE[is_hip],
            "multiProcessorCount": 4,
            "major": 9,
            "minor": 0,
            "totalGlobalMem": _host_memory(),  # (the emulated device's memory is the host's)
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
            s.refuse_in_capture("cudaMemcpyAsync with pageable host memory")
        s.enqueue(lambda: (ctypes.memmove(dst, src, n), rt.mark_written(dst, n, src)))
        if pageable:
            rt.pageable_copies += 1
            s.synchronize()  # CUDA: a copy to/from pageable memory returns once complete

    def memset_async(ptr: int, value: int, n: int, stream_ptr: int) -> None:
        stream_of(stream_ptr).enqueue(lambda: (ctypes.memset(ptr, value, n), rt.mark_written(ptr, n)))

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
        rt.zero_now(a.ctypes.data, a.nbytes)
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
