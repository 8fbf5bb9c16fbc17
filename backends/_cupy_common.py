"""What the cuda and rocm backends share: devices, streams, events and memory through cupy.

cupy exposes the same API over CUDA and over HIP (its ROCm build), so one implementation
serves both backends; ``backends/cuda.py`` and ``backends/rocm.py`` only pick the flavour.

- devices: ``cupy.cuda.runtime.getDeviceProperties`` gives the limits; memory space
  ``"cuda:<i>"`` / ``"rocm:<i>"``;
- queues: one non-blocking ``cupy.cuda.Stream`` each (:mod:`backends._cupy_queue`); host
  functions run on alpyka's worker thread after an event, never as stream host callbacks
  (CUDA forbids callbacks that wait for other work; cupy refuses them on HIP);
- memory: cupy's memory pool is the caching allocator (stream-ordered reuse), pinned host
  memory comes from cupy's pinned pool; copies to or from pageable host memory go through
  pinned staging (a pageable ``cudaMemcpyAsync`` returns only once complete); arrays onto
  buffers are cupy arrays over ``UnownedMemory`` that keep the buffer alive.
"""

from __future__ import annotations

import platform as _platform
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from portable import BackendUnavailable
from portable.spi import (
    DLPACK_CUDA,
    DLPACK_ROCM,
    AllocatorStats,
    CachingAllocator,
    Device,
    DeviceCapabilities,
    DeviceLimits,
    MemoryBlock,
    MemRef,
    queue_impl,
    run_deferred,
)

from ._cupy_memref import MEMCPY_DEFAULT as _MEMCPY_DEFAULT
from ._cupy_memref import address as _address
from ._cupy_memref import pageable as _pageable
from ._cupy_queue import CupyQueue, DeviceScope
from ._device_backend import DeviceBackend
from ._gpu_queue import DeviceEvent


def import_cupy(backend: str, want_hip: bool) -> Any:
    """cupy, when it is the right build and sees a device; BackendUnavailable with the reason else."""
    api = "HIP/ROCm" if want_hip else "CUDA"
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken installation raising at import
        pkg = "cupy-rocm-6-0 (or another ROCm build)" if want_hip else "cupy-cuda13x (or cupy-cuda12x)"
        raise BackendUnavailable(
            f"cupy is not importable ({type(exc).__name__}: {exc}); install {pkg}{_emulate_hint(backend)}"
        ) from None
    is_hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
    if is_hip != want_hip:
        build = "ROCm/HIP" if is_hip else "CUDA"
        other = "rocm" if is_hip else "cuda"
        raise BackendUnavailable(
            f"cupy {cupy.__version__} is a {build} build; the {backend} backend needs cupy's {api} "
            f"build (this cupy serves the {other} backend)"
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy_backends...CUDARuntimeError: no driver, no device
        hint = _emulate_hint(backend)
        raise BackendUnavailable(f"cupy is installed but no {api} driver/device: {exc}{hint}") from None
    if count == 0:
        raise BackendUnavailable(f"cupy is installed but the {api} runtime reports no device{_emulate_hint(backend)}")
    return cupy


def _emulate_hint(backend: str) -> str:
    """Where no GPU is: how to run the backend's kernels anyway (docs/testing.md)."""
    return f"; without a GPU, ALPYKA_EMULATE={backend} runs its kernels on the CPU's GPU emulator (docs/testing.md)"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _triple(value: Any, default: int) -> tuple[int, int, int]:
    vals = [int(v) for v in value][:3] if value is not None else [default] * 3
    vals += [1] * (3 - len(vals))
    return (vals[2], vals[1], vals[0])  # CUDA gives x, y, z; alpaka is slowest first


# ---------------------------------------------------------------------- memory
class CupyPoolAllocator:
    """cupy's memory pool behind :class:`~portable.spi.CachingAllocator`'s interface.

    An allocation made for a queue is taken from the pool while that queue's stream is current,
    so cupy hands its memory out again only in that stream's order.
    """

    def __init__(self, cupy: Any, index: int) -> None:
        self.cupy, self.index = cupy, index
        self.pool = cupy.get_default_memory_pool()
        self._stats = AllocatorStats()
        self._lock = threading.Lock()

    @property
    def stats(self) -> AllocatorStats:
        """Counters, after taking back the blocks of buffers collected so far. A hit is an
        allocation the pool served from its cache (its total did not grow); ``cached_bytes``
        is what the pool holds free on this device."""
        run_deferred()
        with DeviceScope(self.cupy, self.index):
            self._stats.cached_bytes = int(self.pool.free_bytes())
        return self._stats

    def allocate(self, nbytes: int, queue: Any = None, alignment: int = 1) -> MemoryBlock:
        run_deferred()  # blocks of collected buffers first (a safe point: no lock held)
        cp = self.cupy
        stream = getattr(queue_impl(queue), "stream", None)
        size = max(int(nbytes), 1)
        with DeviceScope(cp, self.index):
            total = self.pool.total_bytes()
            if stream is not None:
                with stream:
                    mem = self.pool.malloc(size + (alignment if alignment > 256 else 0))
            else:
                mem = self.pool.malloc(size + (alignment if alignment > 256 else 0))
            grew = self.pool.total_bytes() > total  # else served from the pool's cache
        pad = (-mem.ptr) % alignment
        mem = mem + pad if pad else mem  # a MemoryPointer sharing the allocation
        with self._lock:
            if grew:
                self._stats.misses += 1
            else:
                self._stats.hits += 1
            self._stats.live_bytes += size
            self._stats.live_blocks += 1
        return MemoryBlock(mem, int(mem.ptr), size, None, queue=queue, allocator=self)  # type: ignore[arg-type]

    def free(self, b: MemoryBlock) -> None:
        with self._lock:
            self._stats.live_bytes -= b.nbytes
            self._stats.live_blocks -= 1
        b.handle = None  # the pool takes the memory back once nothing else references it

    def release_cache(self) -> int:
        """Give this device's cached pool memory back to the driver; the bytes released.
        (cupy's pool calls act on the current device's arena: make this allocator's current.)"""
        run_deferred()
        with DeviceScope(self.cupy, self.index):
            before = self.pool.total_bytes()
            self.pool.free_all_blocks()
            return before - self.pool.total_bytes()


def _pinned_allocator(cupy: Any) -> CachingAllocator:
    def raw_alloc(nbytes: int, alignment: int) -> tuple[np.ndarray, int]:
        alignment = max(alignment, 128)
        mem = cupy.cuda.alloc_pinned_memory(nbytes + alignment)
        raw = np.frombuffer(mem, dtype=np.uint8, count=nbytes + alignment)  # keeps ``mem`` alive
        start = (-raw.ctypes.data) % alignment
        arr = raw[start : start + nbytes]
        return arr, arr.ctypes.data

    def raw_free(handle: Any) -> None:
        """Pinned memory goes back to cupy's pinned pool once the array is collected."""

    oom = (MemoryError, cupy.cuda.runtime.CUDARuntimeError)
    return CachingAllocator(raw_alloc, raw_free, oom_errors=oom)


def _pinned_staging(cupy: Any, nbytes: int) -> np.ndarray:
    """Page-locked host bytes from cupy's pinned pool (returned to it once collected)."""
    mem = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
    return np.frombuffer(mem, dtype=np.uint8, count=max(nbytes, 1))[:nbytes]


def _host_bytes(ref: MemRef) -> np.ndarray:
    return ref.handle[ref.offset : ref.offset + ref.nbytes]


# ---------------------------------------------------------------------- the backend
def gpu_capabilities(hip: bool, warp_size: int) -> DeviceCapabilities:
    """What a device of cupy's CUDA (``hip`` False) or ROCm build is: a GPU whose memory torch
    addresses as "cuda" (torch calls ROCm devices cuda too), kernels in CUDA or HIP C."""
    return DeviceCapabilities(
        "gpu", False, "hip" if hip else "cuda", "cuda", warp_size, False, DLPACK_ROCM if hip else DLPACK_CUDA
    )


# ---------------------------------------------------------------------- the backend
class CupyBackend(DeviceBackend):
    """The cuda and rocm backends (see the module docstring)."""

    def __init__(self, name: str, cupy: Any) -> None:
        self.name = name
        self.cupy = cupy
        rt = cupy.cuda.runtime
        self._devices: list[Device] = []
        self._allocators: dict[int, CupyPoolAllocator] = {}
        self._pinned: CachingAllocator | None = None
        self._pinned_lock = threading.Lock()
        for i in range(rt.getDeviceCount()):
            p = rt.getDeviceProperties(i)
            limits = DeviceLimits(
                max_threads_per_block=int(p["maxThreadsPerBlock"]),
                max_block_dims=_triple(p.get("maxThreadsDim"), 1024),
                max_grid_dims=_triple(p.get("maxGridSize"), 2**31 - 1),
                shared_memory_per_block=int(p.get("sharedMemPerBlock", 48 * 1024)),
                warp_size=int(p.get("warpSize", 32)),
                multiprocessors=int(p.get("multiProcessorCount", 1)),
            )
            arch = _text(p.get("gcnArchName", "")) if name == "rocm" else f"sm_{p.get('major', 0)}{p.get('minor', 0)}"
            # a block may use more shared memory than sharedMemPerBlock (48 KB on NVIDIA) when the
            # kernel opts in (cudaFuncAttributeMaxDynamicSharedMemorySize): up to the opt-in limit
            optin = max(int(p.get("sharedMemPerBlockOptin", 0) or 0), limits.shared_memory_per_block)
            self._devices.append(
                Device(
                    name,
                    i,
                    _text(p["name"]),
                    "gpu",
                    f"{name}:{i}",
                    limits,
                    native=cupy,
                    capabilities=gpu_capabilities(bool(getattr(rt, "is_hip", False)), limits.warp_size),
                    properties={
                        "arch": arch,
                        "global_memory": int(p.get("totalGlobalMem", 0)),
                        "compute_capability": (int(p.get("major", 0)), int(p.get("minor", 0))),
                        "shared_memory_per_block_optin": optin,
                    },
                )
            )

    def devices(self) -> list[Device]:
        return self._devices

    def versions(self) -> dict[str, str]:
        rt = self.cupy.cuda.runtime
        out = {"cupy": self.cupy.__version__, "python": _platform.python_version()}
        for key, fn in (("runtime", rt.runtimeGetVersion), ("driver", rt.driverGetVersion)):
            try:
                out[key] = str(fn())
            except Exception:  # noqa: BLE001 - a version query is informative only
                pass
        return out

    def create_queue(self, device: Device, blocking: bool) -> CupyQueue:
        return CupyQueue(device, blocking)

    def create_event(self, device: Device) -> DeviceEvent:
        return DeviceEvent(device)

    # ------------------------------------------------------------------ memory
    def allocator(self, device: Device, pinned: bool = False) -> CupyPoolAllocator:
        alloc = self._allocators.get(device.index)
        if alloc is None:
            alloc = self._allocators[device.index] = CupyPoolAllocator(self.cupy, device.index)
        return alloc

    def pinned_allocator(self) -> CachingAllocator:
        """Page-locked host memory (used by ``pk.Buffer(pk.host(), ..., pinned=True)``)."""
        with self._pinned_lock:
            if self._pinned is None:
                self._pinned = _pinned_allocator(self.cupy)
            return self._pinned

    def array_factory(self, buffer: Any, const: bool) -> Callable[..., Any]:
        """cupy arrays onto the buffer; they keep it alive. cupy has no read-only arrays, so
        ``const`` views give writable arrays (alpyka's const views are checked in kernels)."""
        cp = self.cupy
        mem = cp.cuda.UnownedMemory(buffer.ptr, max(buffer.nbytes, 1), buffer, buffer.device.index)

        def make(offset: int, dtype: np.dtype, shape: tuple, strides: tuple) -> Any:
            return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, offset), strides=strides)

        return make

    def copy(self, queue: Any, dst: MemRef, src: MemRef) -> None:
        impl: CupyQueue = queue_impl(queue)
        if dst.device.is_host_memory and src.device.is_host_memory:
            impl.enqueue_host(lambda: np.copyto(_host_bytes(dst), _host_bytes(src)))
            return
        memcpy, n = self.cupy.cuda.runtime.memcpyAsync, src.nbytes
        stream = impl.stream
        if impl.blocking or not (_pageable(dst) or _pageable(src)):
            d, s = _address(dst), _address(src)
            impl.submit(
                lambda: memcpy(d, s, n, _MEMCPY_DEFAULT, stream.ptr), dst.owner, src.owner, dst.handle, src.handle
            )
            return
        # pageable host memory: a direct copy would return only once complete (blocking the
        # caller and the queue's lock); stage through pinned memory, in queue order
        staging = _pinned_staging(self.cupy, n)
        sp = int(staging.ctypes.data)
        if _pageable(src):  # host -> device
            impl.enqueue_host(lambda: np.copyto(staging, _host_bytes(src)))
            d = _address(dst)
            impl.submit(lambda: memcpy(d, sp, n, _MEMCPY_DEFAULT, stream.ptr), dst.owner, staging)
        else:  # device -> host
            s = _address(src)
            impl.submit(lambda: memcpy(sp, s, n, _MEMCPY_DEFAULT, stream.ptr), src.owner, staging)
            impl.enqueue_host(lambda: np.copyto(_host_bytes(dst), staging))

    def fill(self, queue: Any, dst: MemRef, value: int) -> None:
        impl: CupyQueue = queue_impl(queue)
        if dst.device.is_host_memory:
            impl.enqueue_host(lambda: _host_bytes(dst).fill(value))
            return
        memset, d, n, stream = self.cupy.cuda.runtime.memsetAsync, _address(dst), dst.nbytes, impl.stream
        impl.submit(lambda: memset(d, value, n, stream.ptr), dst.owner, dst.handle)

    # ------------------------------------------------------------------ kernels
    def launch_module(self) -> ModuleType:
        from . import _cupy_launch

        return _cupy_launch

    def recorder_class(self) -> type:
        from ._graph_replay import CupyRecorder

        return CupyRecorder


def load_backend(name: str, want_hip: bool) -> CupyBackend:
    """The cuda (``want_hip=False``) or rocm backend over cupy."""
    cupy = import_cupy(name, want_hip)
    return CupyBackend(name, cupy)
