"""System shared memory for requests to a server on the same host (Triton's shm extension).

A :class:`ShmPool` owns regions registered with one server; a request leases one region large
enough for its inputs and expected outputs, writes its inputs there, names the slots in the
request instead of sending bytes, reads its outputs back and returns the region to the pool.

Regions are POSIX shared-memory segments named ``/alpyka-remote-<pid>-<n>-<token>`` (the owner's
process id; :mod:`inference.serving._leftovers`). :meth:`ShmPool.close` unregisters them from the
server and unlinks them; a pool that is garbage-collected, or still open at interpreter exit,
unlinks them by name (nothing else: that code may run in the garbage collector, where it must
not take a lock or call the server). What a killed client leaves is swept by the next pool or
server started on this host.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import weakref
from collections.abc import Callable

import numpy as np

from portable import StateError

from ..serving._leftovers import _posixshmem, client_shm_key, sweep, unlink_shm
from ._errors import InferenceFailed

_ALIGN = 64


def _round(n: int, a: int = _ALIGN) -> int:
    return (n + a - 1) // a * a


def is_local_url(url: str) -> bool:
    """True when ``url`` names this host (loopback), where system shared memory works."""
    host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def _shm_open(key: str, byte_size: int) -> mmap.mmap:
    """Create segment ``key`` (it must not exist) of ``byte_size`` bytes and map it."""
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR
    if _posixshmem is not None:
        fd = _posixshmem.shm_open(key, flags, mode=0o600)
    else:  # no POSIX shm module: the Linux path of the same segments
        fd = os.open("/dev/shm/" + key.lstrip("/"), flags, 0o600)
    try:
        os.ftruncate(fd, byte_size)
        return mmap.mmap(fd, byte_size)
    except BaseException:
        unlink_shm(key)
        raise
    finally:
        os.close(fd)


class _Region:
    def __init__(self, byte_size: int) -> None:
        self.key = client_shm_key()
        self.name = self.key.lstrip("/")  # the region's name on the server
        self.byte_size = byte_size
        self._map = _shm_open(self.key, byte_size)
        self.buffer = np.frombuffer(self._map, np.uint8)

    def destroy(self) -> None:
        """Unmap (when no view is left) and unlink."""
        self.buffer = None  # type: ignore[assignment]  # drop the view before unmapping
        try:
            self._map.close()
        except (BufferError, ValueError):  # a view still exists: unmapped when it goes
            pass
        unlink_shm(self.key)


class ShmLease:
    """One region for one request: input slots written now, output slots read after."""

    def __init__(
        self,
        pool: ShmPool,
        region: _Region,
        inputs: dict[str, np.ndarray],
        outputs: dict[str, tuple[tuple[int, ...], np.dtype]],
    ) -> None:
        self._pool, self._region = pool, region
        self._slots: dict[str, tuple[int, int]] = {}
        self._out_dtypes = {k: np.dtype(v[1]) for k, v in outputs.items()}
        offset = 0
        for name, arr in inputs.items():
            self._slots["in:" + name] = (offset, arr.nbytes)
            offset = _round(offset + arr.nbytes)
        for name, (shape, dtype) in outputs.items():
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
            self._slots["out:" + name] = (offset, nbytes)
            offset = _round(offset + nbytes)

    @staticmethod
    def bytes_needed(inputs: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
        total = sum(_round(a.nbytes) for a in inputs.values())
        for shape, dtype in outputs.values():
            total += _round(math.prod(shape) * np.dtype(dtype).itemsize)
        return max(total, _ALIGN)

    def put_input(self, name: str, arr: np.ndarray) -> tuple[str, int, int]:
        offset, nbytes = self._slots["in:" + name]
        dst = self._region.buffer[offset : offset + nbytes].view(arr.dtype).reshape(arr.shape)
        np.copyto(dst, arr)  # one copy, straight from the (strided) SoA block
        return self._region.name, nbytes, offset

    def output_slot(self, name: str) -> tuple[str, int, int]:
        offset, nbytes = self._slots["out:" + name]
        return self._region.name, nbytes, offset

    def get_output(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        offset, nbytes = self._slots["out:" + name]
        dtype = self._out_dtypes[name]
        count = math.prod(shape)
        if count * dtype.itemsize > nbytes:
            raise InferenceFailed(
                f"output {name!r} of shape {list(shape)} does not fit its shared-memory slot of {nbytes} bytes"
            )
        view = self._region.buffer[offset : offset + count * dtype.itemsize].view(dtype)
        return view.reshape(shape).copy()  # the region goes back to the pool

    def release(self, failed: bool = False) -> None:
        """Give the region back for reuse; after a failed request (a timeout included: the
        server may still be running it and write its outputs later) retire it instead."""
        if self._region is not None:
            self._pool.take_back(self._region, failed)
            self._region = None  # type: ignore[assignment]


def _unlink_all(keys: list[str]) -> None:
    """The pool's finalizer (garbage collector, interpreter exit): unlink by name, lock-free."""
    for key in list(keys):
        unlink_shm(key)


class ShmPool:
    """Registered regions for one server; ``register``/``unregister`` are the server's calls."""

    def __init__(self, register: Callable[[str, str, int], None], unregister: Callable[[str], None]) -> None:
        sweep()  # segments of clients (and servers) that were killed
        self._register, self._unregister = register, unregister
        self._free: list[_Region] = []
        self._all: list[_Region] = []
        self._keys: list[str] = []  # read by the finalizer: names only
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _unlink_all, self._keys)

    def lease(self, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> ShmLease:
        need = ShmLease.bytes_needed(inputs, outputs)
        with self._lock:
            if self._closed:
                raise StateError("the shared-memory pool is closed; make a new client (or pool) to send more requests")
            fits = [r for r in self._free if r.byte_size >= need]
            region = min(fits, key=lambda r: r.byte_size) if fits else None
            if region is not None:
                self._free.remove(region)
        if region is None:
            size = 1 << max(16, (need - 1).bit_length())
            region = _Region(size)
            self._keys.append(region.key)
            try:
                self._register(region.name, region.key, region.byte_size)
            except BaseException:
                region.destroy()
                self._forget(region.key)
                raise
            with self._lock:
                self._all.append(region)
        return ShmLease(self, region, inputs, outputs)

    def _forget(self, key: str) -> None:
        try:
            self._keys.remove(key)
        except ValueError:
            pass

    def take_back(self, region: _Region, failed: bool) -> None:
        """A lease's region returns: free for reuse, or retired (unregistered from the server and
        unlinked) after a failed request, whose server may still write into it."""
        if failed:
            self._retire(region)
        else:
            self._give_back(region)

    def _give_back(self, region: _Region) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(region)
                return
        self._retire(region)  # the pool closed while the request ran

    def _retire(self, region: _Region) -> None:
        with self._lock:
            if region in self._all:
                self._all.remove(region)
        try:
            self._unregister(region.name)
        except Exception:  # noqa: BLE001 - the server may be gone already
            pass
        region.destroy()
        self._forget(region.key)

    @property
    def regions(self) -> int:
        return len(self._all)

    def close(self) -> None:
        """Unregister every region from the server and unlink it."""
        with self._lock:
            self._closed = True
            regions, self._free = list(self._free), []  # leased ones retire when given back
            self._all = [r for r in self._all if r not in regions]
        for r in regions:
            try:
                self._unregister(r.name)
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass
            r.destroy()
            self._forget(r.key)
        self._finalizer()  # names of what is left (regions in use now: unmapped when given back)
