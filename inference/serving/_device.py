"""The device string of a server (``serve(..., device=)``, ``alpyka serve --device``): the one parser."""

from __future__ import annotations

import portable as pk
from portable import AlpykaError


class DeviceStringError(AlpykaError, ValueError):
    """A server's ``device`` that names no device (the message lists what it takes)."""


def parse_device(device: str) -> tuple[str, int | None]:
    """``(name, index)`` of ``"cpu"``, ``"cuda[:N]"`` or a registered alpyka backend
    (``pk.backends()``: cpu_serial, cpu_threads, opencl, cuda, rocm and plugins) with an optional
    ``:N`` (index None when not given)."""
    name, sep, index = str(device).partition(":")
    known = pk.backends()
    if name not in ("cpu", *known) or (sep and not index.isdigit()):
        raise DeviceStringError(
            f"device must be 'cpu', 'cuda[:N]' or an alpyka backend {known} (optionally ':N', N a "
            f"device index), got {device!r}"
        )
    return name, int(index) if sep else None


def backend_of(device: str) -> tuple[str, int]:
    """The alpyka backend and device index a server's ``device`` names (``"cpu"``: the host's
    backend, ``pk.host()``'s)."""
    name, index = parse_device(device)
    if name == "cpu":
        name = pk.host().backend_name
    return name, index or 0
