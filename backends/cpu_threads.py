"""cpu_threads: blocks run concurrently on a thread pool (one thread per block, nogil code)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ._host import HostBackend


class CpuThreads(HostBackend):
    name = "cpu_threads"
    parallel_blocks = True

    def __init__(self) -> None:
        super().__init__()
        self.workers = max(1, os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max(1, self.workers - 1), thread_name_prefix="alpyka-blocks")
        return self._pool

    def run_blocks(self, fn: Any, nblocks: int, call: tuple, keep: tuple) -> None:
        """Split the blocks into one contiguous chunk per worker; the calling thread (the queue's
        worker, or the caller of a blocking queue) runs the first chunk itself."""
        chunks = min(nblocks, self.workers)
        if chunks <= 1:
            fn(0, nblocks, *call)
            return
        bounds = [nblocks * c // chunks for c in range(chunks + 1)]
        pool = self.pool()
        futures = [pool.submit(fn, bounds[c], bounds[c + 1], *call) for c in range(1, chunks)]
        error = None
        try:
            fn(bounds[0], bounds[1], *call)
        except BaseException as exc:  # still wait for the other chunks before raising
            error = exc
        for f in futures:
            try:
                f.result()
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error


_backend: CpuThreads | None = None


def load() -> CpuThreads:
    global _backend
    if _backend is None:
        _backend = CpuThreads()
    return _backend
