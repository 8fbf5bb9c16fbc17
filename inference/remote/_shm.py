"""System shared memory for requests to a server on the same host (Triton's shm extension).

A :class:`ShmPool` owns regions registered with one server; a request leases one region large
enough for its inputs and expected outputs, writes its inputs there, names the slots in the
request instead of sending bytes, reads its outputs back and returns the region to the pool.
Regions are unregistered and unlinked by :meth:`ShmPool.close` (and at interpreter exit).
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any, Callable

import numpy as np

_ALIGN = 64
_counter = itertools.count()


def _round(n: int, a: int = _ALIGN) -> int:
    return (n + a - 1) // a * a


def is_local_url(url: str) -> bool:
    """True when ``url`` names this host (loopback), where system shared memory works."""
    host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


class _Region:
    def __init__(self, byte_size: int) -> None:
        import tritonclient.utils.shared_memory as shm

        n = next(_counter)
        self.name = f"alpyka_{os.getpid()}_{n}"
        self.key = f"/alpyka_{os.getpid()}_{n}"
        self.byte_size = byte_size
        self.handle = shm.create_shared_memory_region(self.name, self.key, byte_size)
        self.buffer = np.ndarray((byte_size,), np.uint8, buffer=self.handle._mpsm_handle.buf)

    def destroy(self) -> None:
        import tritonclient.utils.shared_memory as shm

        self.buffer = None  # type: ignore[assignment]  # drop the view before unmapping
        try:
            shm.destroy_shared_memory_region(self.handle)
        except Exception:  # noqa: BLE001 - already gone
            pass


class ShmLease:
    """One region for one request: input slots written now, output slots read after."""

    def __init__(self, pool: "ShmPool", region: _Region, inputs: dict[str, np.ndarray],
                 outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        self._pool, self._region = pool, region
        self._slots: dict[str, tuple[int, int]] = {}
        self._out_dtypes = {k: np.dtype(v[1]) for k, v in outputs.items()}
        offset = 0
        for name, arr in inputs.items():
            self._slots["in:" + name] = (offset, arr.nbytes)
            offset = _round(offset + arr.nbytes)
        for name, (shape, dtype) in outputs.items():
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            self._slots["out:" + name] = (offset, nbytes)
            offset = _round(offset + nbytes)

    @staticmethod
    def bytes_needed(inputs: dict[str, np.ndarray],
                     outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
        total = sum(_round(a.nbytes) for a in inputs.values())
        for shape, dtype in outputs.values():
            total += _round(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        return max(total, _ALIGN)

    def put_input(self, name: str, arr: np.ndarray) -> tuple[str, int, int]:
        offset, nbytes = self._slots["in:" + name]
        dst = self._region.buffer[offset:offset + nbytes].view(arr.dtype).reshape(arr.shape)
        np.copyto(dst, arr)  # one copy, straight from the (strided) SoA block
        return self._region.name, nbytes, offset

    def output_slot(self, name: str) -> tuple[str, int, int]:
        offset, nbytes = self._slots["out:" + name]
        return self._region.name, nbytes, offset

    def get_output(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        offset, nbytes = self._slots["out:" + name]
        dtype = self._out_dtypes[name]
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > nbytes:
            from ._errors import InferenceFailed

            raise InferenceFailed(f"output {name!r} of shape {list(shape)} does not fit its "
                                  f"shared-memory slot of {nbytes} bytes")
        view = self._region.buffer[offset:offset + count * dtype.itemsize].view(dtype)
        return view.reshape(shape).copy()  # the region goes back to the pool

    def release(self, failed: bool = False) -> None:
        """Give the region back for reuse; after a failed request (a timeout included: the
        server may still be running it and write its outputs later) retire it instead."""
        if self._region is not None:
            if failed:
                self._pool._retire(self._region)
            else:
                self._pool._give_back(self._region)
            self._region = None  # type: ignore[assignment]


class ShmPool:
    """Registered regions for one server; ``register``/``unregister`` are the server's calls."""

    def __init__(self, register: Callable[[str, str, int], None],
                 unregister: Callable[[str], None]) -> None:
        self._register, self._unregister = register, unregister
        self._free: list[_Region] = []
        self._all: list[_Region] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, ShmPool._cleanup, self._all, unregister)

    def lease(self, inputs: dict[str, np.ndarray],
              outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> ShmLease:
        need = ShmLease.bytes_needed(inputs, outputs)
        with self._lock:
            if self._closed:
                raise RuntimeError("the shared-memory pool is closed")
            fits = [r for r in self._free if r.byte_size >= need]
            region = min(fits, key=lambda r: r.byte_size) if fits else None
            if region is not None:
                self._free.remove(region)
        if region is None:
            size = 1 << max(16, (need - 1).bit_length())
            region = _Region(size)
            try:
                self._register(region.name, region.key, region.byte_size)
            except BaseException:
                region.destroy()
                raise
            with self._lock:
                self._all.append(region)
        return ShmLease(self, region, inputs, outputs)

    def _give_back(self, region: _Region) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(region)

    def _retire(self, region: _Region) -> None:
        with self._lock:
            if region in self._all:
                self._all.remove(region)
        try:
            self._unregister(region.name)
        except Exception:  # noqa: BLE001 - the server may be gone already
            pass
        region.destroy()

    @property
    def regions(self) -> int:
        return len(self._all)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    @staticmethod
    def _cleanup(regions: list[Any], unregister: Callable[[str], None]) -> None:
        for r in list(regions):
            try:
                unregister(r.name)
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass
            r.destroy()
        regions.clear()
