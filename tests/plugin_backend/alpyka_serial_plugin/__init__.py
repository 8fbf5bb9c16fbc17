"""cpu_serial_plugin: an out-of-tree alpyka backend, as another package would write one.

It registers under the entry-point group ``alpyka.backends`` (tests/portable/test_backend_plugins.py
installs it as a distribution on a temporary ``sys.path``) or in-process through
``portable.register_backend("cpu_serial_plugin", "alpyka_serial_plugin:load")``. It is written
against alpyka's public API and backend interface only (``portable``, ``portable.spi``; checked by
tests/portable/test_spi.py): its device declares its own capabilities; of a kernel it uses what
``spi.KernelHandle`` declares, keeping what it learnt of one (the argument signatures it checked)
in its own :class:`~portable.spi.PlanCache`; its queues, memory and kernel bodies are cpu_serial's,
reached through ``pk.get_backend``. Nothing in alpyka names it.
"""

from __future__ import annotations

from typing import Any

import portable as pk
from portable.spi import Allocator, Backend, Device, DeviceCapabilities, EventImpl, KernelHandle, MemRef, QueueImpl

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

    def create_queue(self, device: Device, blocking: bool) -> QueueImpl:
        return self.inner.create_queue(device, blocking)

    def create_event(self, device: Device) -> EventImpl:
        return self.inner.create_event(device)

    def allocator(self, device: Device, pinned: bool = False) -> Allocator:
        return self.inner.allocator(device, pinned)

    def array_factory(self, buffer: Any, const: bool) -> Any:
        return self.inner.array_factory(buffer, const)

    def copy(self, queue: Any, dst: MemRef, src: MemRef) -> None:
        self.inner.copy(queue, dst, src)

    def fill(self, queue: Any, dst: MemRef, value: int) -> None:
        self.inner.fill(queue, dst, value)

    def launch(self, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        """Check the arguments once per signature (this backend's own plans of ``kernel``:
        ``{signature: work divisions' dimension}``), then run the launch on cpu_serial."""
        plans = self.plans(kernel)
        key = kernel.signature(args)
        if key not in plans:
            plans.build(key, lambda: self.checked(kernel, args, workdiv))
        self.inner.launch(queue, workdiv, kernel, args)

    def checked(self, kernel: KernelHandle, args: tuple, workdiv: Any) -> int:
        """What a first launch of a signature learns: its arguments fit the kernel on this
        backend's device (KernelArgumentError naming the argument when not)."""
        kernel.check_args(args, self._devices[0])
        return len(workdiv.blocks)


_backend: SerialPlugin | None = None


def load() -> SerialPlugin:
    """The backend (the factory its entry point names)."""
    global _backend
    if _backend is None:
        _backend = SerialPlugin()
    return _backend
