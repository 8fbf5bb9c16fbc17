"""cpu_threads: blocks run concurrently on a thread pool (one thread per block, nogil code)."""

from __future__ import annotations

from ._host import HostBackend


class CpuThreads(HostBackend):
    name = "cpu_threads"
    parallel_blocks = True


_backend: CpuThreads | None = None


def load() -> CpuThreads:
    global _backend
    if _backend is None:
        _backend = CpuThreads()
    return _backend
