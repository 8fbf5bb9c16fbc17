"""The cupy stand-in's memory (fake_cupy.py): the default pool (one arena per device, per
stream inside it: stream-ordered reuse), memory pointers, pinned host memory and the device
array type with cupy's ``get()``, ``data.ptr``, CUDA array interface and DLPack handshake."""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from typing import Any

import numpy as np

from .fake_cupy_runtime import _Runtime


class _Chunk:
    def __init__(self, rt: _Runtime, n: int, device: int) -> None:
        self.size = n
        self.raw = np.zeros(n + 512, np.uint8)
        self.base = self.raw.ctypes.data + (-self.raw.ctypes.data) % 512
        # under the emulator's checks: a shadow byte per byte, poisoned at each malloc (see there)
        tracked = rt.memory_checks is not None and rt.memory_checks()
        rt.register(self.base, n, "device", device, np.zeros(n, np.uint8) if tracked else None)
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
        reused = True
        with self.lock:
            arena = self.free.setdefault(sp, [])
            for i, c in enumerate(arena):
                if c.size == n:
                    chunk = arena.pop(i)
                    break
            else:
                chunk = _Chunk(self.rt, n, self.device)
                self.total += n
                reused = False
        # a fresh allocation holds garbage on a GPU (the pool's reused blocks what their last user
        # left): poisoned and unwritten for the checks; a reused block in its stream's order (its
        # last user may still run on it), not while the stream captures (work then only records)
        poison = functools.partial(self.rt.poison, chunk.base, chunk.size)
        if not reused or stream is None:
            poison()
        elif stream.captured is None:
            stream.ex.submit(poison)
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
    buf.owner = memptr  # type: ignore[attr-defined] - the memory's owner lives as long as the array
    return cls(shape, dtype, buffer=buf, strides=strides)
