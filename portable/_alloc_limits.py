"""How many bytes one allocation of a device may take (buffers and collections check it before
allocating, so a request too large is an alpyka error naming the limit, not a MemoryError of numpy
or an OpenCL INVALID_BUFFER_SIZE)."""

from __future__ import annotations

from typing import Any

import numpy as np

Device = Any  # a portable.Device (this module sits below _device in the import order)

#: device -> its limit; devices live as long as the process
_limits: dict[Any, tuple[int, str] | None] = {}


def human_bytes(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{nbytes} bytes"  # pragma: no cover


def _host_memory() -> int | None:
    """Memory this machine can give a process in bytes: physical memory and swap (None where
    the OS does not say its physical memory)."""
    import os

    try:
        physical = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None
    return physical + _swap_bytes()


def _swap_bytes() -> int:
    """Swap space in bytes (``/proc/meminfo``'s SwapTotal; 0 where it is not there)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def allocation_limit(device: Device) -> tuple[int, str] | None:
    """``(bytes, what)``: the largest allocation ``device`` can give one buffer and where that
    limit comes from, or None when the backend does not say (asked once per device)."""
    try:
        return _limits[device]
    except KeyError:
        found = _limits[device] = _allocation_limit(device)
        return found


def _allocation_limit(device: Device) -> tuple[int, str] | None:
    native = getattr(getattr(device, "native", None), "device", None)
    max_alloc = getattr(native, "max_mem_alloc_size", None)  # OpenCL devices
    if isinstance(max_alloc, (int, np.integer)) and max_alloc > 0:
        return int(max_alloc), "in one allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
    if device.is_host_memory:
        mem = _host_memory()
        return (mem, "of host memory (physical and swap)") if mem else None
    total = device.properties.get("global_memory") if isinstance(device.properties, dict) else None
    if isinstance(total, (int, np.integer)) and total > 0:
        return int(total), "of device memory"
    return None
