"""cpu_serial_plugin: an out-of-tree alpyka backend, as another package would write one.

It registers under the entry-point group ``alpyka.backends`` (tests/portable/test_backend_plugins.py
installs it as a distribution on a temporary ``sys.path``) or in-process through
``portable.register_backend("cpu_serial_plugin", "alpyka_serial_plugin:load")``. It uses alpyka's
public API and backend interface only (``portable``, ``portable.spi``): its device declares its
own capabilities, and its queues, memory and launches are cpu_serial's, reached through
``pk.get_backend``. Nothing in alpyka names it.
"""

from __future__ import annotations

from typing import Any

import portable as pk
from portable.spi import Backend, Device, DeviceCapabilities

NAME = "cpu_serial_plugin"
VERSION = "1.0"


class SerialPlugin(Backend):
    """A CPU backend whose work is done by cpu_serial (one thread per block, host memory)."""

    name = NAME
    kind = "cpu"

    def __init__(self) -> None:
        self.inner = pk.get_backend("cpu_serial")
        base = self.inner.devices()[0]
        self._devices = [
            Device(
                NAME,
                0,
                f"{base.name} (plugin)",
                "cpu",
                "host",
                base.limits,
                properties=dict(base.properties),
                capabilities=DeviceCapabilities.host(),
            )
        ]

    def devices(self) -> list[Device]:
        return self._devices

    def versions(self) -> dict[str, str]:
        return {"alpyka_serial_plugin": VERSION}

    def execution(self) -> str:
        """How launches run (``alpyka info``)."""
        return "cpu_serial's, through the backend interface (an out-of-tree plugin)"

    def create_queue(self, device: Device, blocking: bool) -> Any:
        return self.inner.create_queue(device, blocking)

    def create_event(self, device: Device) -> Any:
        return self.inner.create_event(device)

    def allocator(self, device: Device, pinned: bool = False) -> Any:
        return self.inner.allocator(device, pinned)

    def array_factory(self, buffer: Any, const: bool) -> Any:
        return self.inner.array_factory(buffer, const)

    def copy(self, queue: Any, dst: Any, src: Any) -> None:
        self.inner.copy(queue, dst, src)

    def fill(self, queue: Any, dst: Any, value: int) -> None:
        self.inner.fill(queue, dst, value)

    def launch(self, queue: Any, workdiv: Any, kernel: Any, args: tuple) -> None:
        self.inner.launch(queue, workdiv, kernel, args)


_backend: SerialPlugin | None = None


def load() -> SerialPlugin:
    """The backend (the factory its entry point names)."""
    global _backend
    if _backend is None:
        _backend = SerialPlugin()
    return _backend
