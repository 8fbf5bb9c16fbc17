"""cpu_threads: blocks run concurrently on a thread pool (one thread per block, nogil code)."""

from __future__ import annotations

import itertools
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
        """Run blocks ``[0, nblocks)`` on the pool: the blocks are cut into contiguous chunks
        (a few per worker, so a core busy with other work does not hold up the launch) that the
        workers and the calling thread (the queue's worker, or the caller of a blocking queue)
        take in order; the compiled code releases the GIL, so the chunks run concurrently."""
        workers = self.workers
        if nblocks <= 1 or workers <= 1:
            fn(0, nblocks, *call)
            return
        chunks = min(nblocks, workers * CHUNKS_PER_WORKER)
        bounds = [nblocks * c // chunks for c in range(chunks + 1)]
        take = itertools.count().__next__  # atomic under the GIL: each chunk is taken once
        errors: list[BaseException] = []
        finished = [0]
        lock = threading.Lock()
        all_done = threading.Event()

        def work() -> None:
            while True:
                c = take()
                if c >= chunks:
                    return
                if not errors:  # after an error the remaining chunks are skipped
                    try:
                        fn(bounds[c], bounds[c + 1], *call)
                    except BaseException as exc:
                        errors.append(exc)
                with lock:
                    finished[0] += 1
                    if finished[0] == chunks:
                        all_done.set()

        pool = self.pool()
        for _ in range(min(workers, chunks) - 1):
            pool.submit(work)  # a worker that starts late finds no chunk left and returns
        work()
        all_done.wait()
        if errors:
            raise errors[0]


#: chunks of blocks per worker thread in a cpu_threads launch
CHUNKS_PER_WORKER = 4


_backend: CpuThreads | None = None


def load() -> CpuThreads:
    global _backend
    if _backend is None:
        _backend = CpuThreads()
    return _backend
