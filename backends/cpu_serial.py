"""cpu_serial: blocks run one after another on the calling (or queue's) thread, one thread each."""

from __future__ import annotations

from ._host import HostBackend


class CpuSerial(HostBackend):
    name = "cpu_serial"
    parallel_blocks = False


_backend: CpuSerial | None = None


def load() -> CpuSerial:
    global _backend
    if _backend is None:
        _backend = CpuSerial()
    return _backend
