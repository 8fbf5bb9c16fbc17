"""Devices: one accelerator (or the host CPU) of one backend, with its limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._registry import get_backend

if TYPE_CHECKING:
    from ._backend import Backend


@dataclass(frozen=True)
class DeviceLimits:
    """What one kernel launch may ask of a device (alpaka's ``AccDevProps``)."""

    max_threads_per_block: int
    max_block_dims: tuple[int, int, int]
    max_grid_dims: tuple[int, int, int]
    max_elements_per_thread: int = 2**31 - 1
    shared_memory_per_block: int = 48 * 1024
    warp_size: int = 1
    multiprocessors: int = 1


@dataclass(eq=False)
class Device:
    """A device of one backend: ``pk.device("cuda")``, ``pk.devices("opencl")[1]``, ``pk.host()``.

    ``memory_space`` says which memory the device addresses: devices with the same memory space
    (all CPU backends share ``"host"``) may use each other's buffers; others may not.
    """

    backend_name: str
    index: int
    name: str
    kind: str  # "cpu" or "gpu"
    memory_space: str
    limits: DeviceLimits
    native: Any = field(default=None, repr=False)
    properties: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def backend(self) -> "Backend":
        return get_backend(self.backend_name)

    @property
    def is_host_memory(self) -> bool:
        """True when buffers of this device are plain host memory (numpy arrays)."""
        return self.memory_space == "host"

    def can_access(self, other: "Device") -> bool:
        """True when memory of ``other`` may be used by work on this device."""
        return other is self or other.memory_space == self.memory_space

    def __str__(self) -> str:
        return f"{self.backend_name}:{self.index} ({self.name})"

    def __repr__(self) -> str:
        return f"<Device {self}>"
