"""A host-memory stand-in for the part of cupy's API the cuda/rocm backends use, so their
runtime logic (streams, events, host-function gates, pools, copies, arrays) runs without a GPU.

Streams are emulated faithfully enough for ordering: each stream has a thread that runs its
operations in FIFO order; events complete when their stream reaches them; host functions run on
a shared "driver callback" thread, as CUDA does. Memory is host memory addressed by pointer.
"""

from __future__ import annotations

import ctypes
import queue as _q
import threading
import types
from typing import Any

import numpy as np


class CUDARuntimeError(RuntimeError):
    pass


class _Exec:
    """One thread running callables in order (a stream's engine, or the callback thread)."""

    def __init__(self, name: str) -> None:
        self.q: _q.SimpleQueue = _q.SimpleQueue()
        self.pending = 0
        self.cv = threading.Condition()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn: Any) -> None:
        with self.cv:
            self.pending += 1
        self.q.put(fn)

    def _run(self) -> None:
        while True:
            fn = self.q.get()
            try:
                fn()
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


_callbacks = _Exec("fake-cuda-callbacks")
_current = threading.local()
_next_ptr = [0x7000]


class Stream:
    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        self.ex = _Exec("fake-cuda-stream")
        _next_ptr[0] += 16
        self.ptr = _next_ptr[0]

    def synchronize(self) -> None:
        self.ex.drain()

    @property
    def done(self) -> bool:
        return self.ex.idle()

    def wait_event(self, event: "Event") -> None:
        ev = event._flag
        self.ex.submit(lambda: ev.wait() if ev is not None else None)

    def launch_host_func(self, callback: Any, arg: Any) -> None:
        done = threading.Event()

        def on_stream() -> None:
            _callbacks.submit(lambda: (callback(arg), done.set()))
            done.wait()  # the stream waits for the host function, as in CUDA

        self.ex.submit(on_stream)

    def __enter__(self) -> "Stream":
        self._prev = getattr(_current, "stream", None)
        _current.stream = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _current.stream = self._prev


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self._flag: threading.Event | None = None

    def record(self, stream: Stream) -> None:
        flag = threading.Event()
        self._flag = flag
        stream.ex.submit(flag.set)

    @property
    def done(self) -> bool:
        return self._flag is None or self._flag.is_set()

    def synchronize(self) -> None:
        if self._flag is not None:
            self._flag.wait()


class _Chunk:
    def __init__(self, n: int) -> None:
        self.raw = np.zeros(n + 512, np.uint8)
        self.base = self.raw.ctypes.data + (-self.raw.ctypes.data) % 512


class MemoryPointer:
    def __init__(self, mem: Any, offset: int) -> None:
        self.mem, self.offset = mem, offset
        self.ptr = (mem.ptr if hasattr(mem, "ptr") else mem.base) + offset

    def __add__(self, n: int) -> "MemoryPointer":
        return MemoryPointer(self.mem, self.offset + n)


class _Pool:
    def __init__(self) -> None:
        self.live: list[Any] = []
        self.streams: list[Any] = []

    def malloc(self, n: int) -> MemoryPointer:
        self.streams.append(getattr(_current, "stream", None))
        c = _Chunk(n)
        self.live.append(c)
        return MemoryPointer(c, 0)

    def total_bytes(self) -> int:
        return sum(c.raw.nbytes for c in self.live)

    def free_all_blocks(self) -> None:
        pass


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self.owner = ptr, size, owner


class FakeDeviceArray(np.ndarray):
    """A numpy array over "device" memory with cupy's ``get()`` and the CUDA array interface."""

    def get(self) -> np.ndarray:
        return np.array(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ctypes.data, False),
                "strides": self.strides, "version": 3}


def _ndarray(shape: tuple, dtype: Any, memptr: MemoryPointer, strides: tuple = None) -> np.ndarray:
    dtype = np.dtype(dtype)
    size = max(memptr.mem.size - memptr.offset, 1)
    buf = (ctypes.c_uint8 * size).from_address(memptr.ptr)
    buf._keep = memptr  # the memory's owner lives as long as the array
    return FakeDeviceArray(shape, dtype, buffer=buf, strides=strides)


def make_fake_cupy(n_devices: int = 2, is_hip: bool = False, count_error: str | None = None) -> Any:
    """A module object standing in for ``cupy`` (see the module docstring)."""
    state = {"device": 0}
    pool = _Pool()

    def get_device_count() -> int:
        if count_error:
            raise CUDARuntimeError(count_error)
        return n_devices

    def props(i: int) -> dict:
        return {"name": f"Fake GPU {i}".encode(), "maxThreadsPerBlock": 1024, "maxThreadsDim": (1024, 1024, 64),
                "maxGridSize": (2**31 - 1, 65535, 65535), "sharedMemPerBlock": 49152, "warpSize": 32,
                "multiProcessorCount": 4, "major": 9, "minor": 0, "totalGlobalMem": 1 << 30}

    def memcpy_async(dst: int, src: int, n: int, kind: int, stream_ptr: int) -> None:
        s = _streams[stream_ptr]
        s.ex.submit(lambda: ctypes.memmove(dst, src, n))

    def memset_async(ptr: int, value: int, n: int, stream_ptr: int) -> None:
        _streams[stream_ptr].ex.submit(lambda: ctypes.memset(ptr, value, n))

    _streams: dict[int, Stream] = {}

    class TrackedStream(Stream):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            _streams[self.ptr] = self

    def set_device(i: int) -> None:
        state["device"] = i

    runtime = types.SimpleNamespace(
        is_hip=is_hip, getDeviceCount=get_device_count, getDeviceProperties=props,
        getDevice=lambda: state["device"], setDevice=set_device, memcpyAsync=memcpy_async,
        memsetAsync=memset_async, runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
        CUDARuntimeError=CUDARuntimeError,
    )

    def alloc_pinned(n: int) -> bytearray:
        return bytearray(n)

    class _Unowned(UnownedMemory):
        pass

    cuda = types.SimpleNamespace(runtime=runtime, Stream=TrackedStream, Event=Event, UnownedMemory=_Unowned,
                                 MemoryPointer=lambda mem, off: _UnownedPointer(mem, off),
                                 alloc_pinned_memory=alloc_pinned)
    mod = types.SimpleNamespace(__version__="13.fake", cuda=cuda, get_default_memory_pool=lambda: pool,
                                ndarray=_ndarray, pool=pool)
    return mod


class _UnownedPointer(MemoryPointer):
    def __init__(self, mem: UnownedMemory, offset: int) -> None:
        self.mem, self.offset = mem, offset
        self.ptr = mem.ptr + offset
