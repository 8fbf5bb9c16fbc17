"""Devices: one accelerator (or the host CPU) of one backend, with its limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._errors import ArgumentError, ArgumentTypeError, BackendUnavailable, NoSuchDevice
from ._registry import HOST_BACKEND, check_devices_with, get_backend


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


#: DLPack's device types (``DLDeviceType``) that a device's memory may be
DLPACK_CPU, DLPACK_CUDA, DLPACK_OPENCL, DLPACK_ROCM = 1, 2, 4, 10


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device is, as its backend declares it: the rest of alpyka asks these, never the
    backend's name (``dev.capabilities.kind == "gpu"``, not ``dev.backend_name == "cuda"``).

    - ``kind``: the execution model, ``"cpu"`` (one thread per block, blocks on the host's cores)
      or ``"gpu"`` (many threads per block: CUDA, HIP, OpenCL on any hardware);
    - ``host_addressable``: buffers are plain host memory that Python reads directly (numpy);
    - ``c_dialect``: the C the backend generates for kernels (``"opencl"``, ``"cuda"``,
      ``"hip"``), None when it compiles no C (numba on the CPU backends);
    - ``torch_device_type``: the torch device type that addresses the memory without a copy
      (``"cpu"``, ``"cuda"``: torch calls ROCm devices cuda too), None when torch cannot (the
      memory is staged through the host);
    - ``warp_size``: threads that run in lock step (1 on CPUs, 32 on NVIDIA, 64 on most AMD);
    - ``emulated``: the device runs on the CPU's GPU emulator (``ALPYKA_EMULATE``), not its hardware;
    - ``dlpack_device_type``: DLPack's device type of the memory (:data:`DLPACK_CPU`,
      :data:`DLPACK_CUDA`, :data:`DLPACK_OPENCL`, :data:`DLPACK_ROCM`), None where none fits;
    - ``hardware``: what executes the kernels, ``"cpu"``, ``"gpu"`` or ``"accelerator"`` (OpenCL's
      device type); None means the hardware ``kind`` names. A ``kind="gpu"`` device on
      ``hardware="cpu"`` (OpenCL on a CPU) runs a block's threads one after another between
      barriers, so :func:`~portable.make_workdiv` and :func:`~portable.valid_workdiv` give it
      CPU-shaped work divisions (one thread per block, the work in elements).
    """

    kind: str
    host_addressable: bool
    c_dialect: str | None = None
    torch_device_type: str | None = None
    warp_size: int = 1
    emulated: bool = False
    dlpack_device_type: int | None = None
    hardware: str | None = None

    def __post_init__(self) -> None:
        if self.hardware is None:
            object.__setattr__(self, "hardware", self.kind)
        if self.kind not in ("cpu", "gpu"):
            raise ArgumentError(f"DeviceCapabilities.kind is 'cpu' or 'gpu', not {self.kind!r}")
        if self.warp_size < 1:
            raise ArgumentError(f"DeviceCapabilities.warp_size must be at least 1, got {self.warp_size}")
        if not isinstance(self.hardware, str) or not self.hardware:
            raise ArgumentError(f"DeviceCapabilities.hardware is a name such as 'cpu' or 'gpu', not {self.hardware!r}")

    @property
    def cpu_shaped(self) -> bool:
        """Whether work divisions should be CPU-shaped here (one thread per block, the work in
        elements): a CPU backend's device, or a GPU-model device whose hardware is a CPU."""
        return self.kind == "cpu" or self.hardware == "cpu"

    @classmethod
    def host(cls, warp_size: int = 1) -> DeviceCapabilities:
        """A CPU device over host memory (cpu_serial, cpu_threads and their likes)."""
        return cls("cpu", True, None, "cpu", warp_size, False, DLPACK_CPU)


@dataclass(eq=False)
class Device:
    """A device of one backend: ``pk.device("cuda")``, ``pk.devices("opencl")[1]``, ``pk.host()``.

    ``memory_space`` says which memory the device addresses: devices with the same memory space
    (all CPU backends share ``"host"``) may use each other's buffers; others may not.
    ``capabilities`` (:class:`DeviceCapabilities`) is what the backend declares the device to
    be; a device made without them gets the conservative ones its ``kind`` and
    ``memory_space`` imply (no C dialect, torch only over host memory).
    """

    backend_name: str
    index: int
    name: str
    kind: str  # "cpu" or "gpu"
    memory_space: str
    limits: DeviceLimits
    native: Any = field(default=None, repr=False)
    properties: dict[str, Any] = field(default_factory=dict, repr=False)
    capabilities: DeviceCapabilities = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.capabilities is None:
            host = self.memory_space == "host"
            self.capabilities = DeviceCapabilities(
                self.kind,
                host,
                None,
                "cpu" if host else None,
                self.limits.warp_size,
                False,
                DLPACK_CPU if host else None,
            )
        elif self.capabilities.kind != self.kind:
            raise ArgumentError(
                f"device {self.name!r}: kind {self.kind!r} but capabilities.kind {self.capabilities.kind!r}"
            )

    @property
    def backend(self) -> Any:
        """The device's backend (a :class:`portable.spi.Backend`)."""
        return get_backend(self.backend_name)

    @property
    def is_host_memory(self) -> bool:
        """True when buffers of this device are plain host memory (numpy arrays)."""
        return self.memory_space == "host"

    def can_access(self, other: Device) -> bool:
        """True when memory of ``other`` may be used by work on this device."""
        return other is self or other.memory_space == self.memory_space

    def __str__(self) -> str:
        return f"{self.backend_name}:{self.index} ({self.name})"

    def __repr__(self) -> str:
        return f"<Device {self}>"


class DeviceList(list):
    """``pk.devices(backend)``: a list whose index out of range is a :class:`NoSuchDevice` (an
    ``IndexError``) saying how many devices the backend has, not list's bare "list index out of
    range". ``DeviceList(devs, backend="")`` as ``list(devs)``."""

    def __init__(self, devs: Any = (), backend: str = "") -> None:
        super().__init__(devs)
        self.backend = backend

    def __getitem__(self, index: Any) -> Any:
        try:
            return super().__getitem__(index)
        except IndexError:
            raise _no_such_device(self.backend, len(self), index, "`alpyka info` lists them") from None


def _no_such_device(backend: str, n: int, index: Any, hint: str) -> NoSuchDevice:
    """The error of device ``index`` of ``backend``, which has ``n`` devices."""
    has = "no device" if n == 0 else f"{n} device(s), indices 0 to {n - 1}"
    return NoSuchDevice(f"backend {backend!r} has {has}; index {index} is out of range ({hint})")


def devices(backend: str) -> list[Device]:
    """All devices of ``backend`` (a :class:`DeviceList`)."""
    return DeviceList(get_backend(backend).devices(), backend)


def device(backend: str, index: int = 0) -> Device:
    """Device ``index`` of ``backend`` (``pk.device("cuda", 1)``); a backend that finds its
    devices lazily (opencl's probes) does the work for the devices up to ``index`` only."""
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise ArgumentTypeError(f"pk.device's index is an int (0 for the first device), got {index!r}")
    index = int(index)
    impl = get_backend(backend)
    first = getattr(impl, "first_devices", None)
    devs = list(first(index + 1)) if callable(first) and index >= 0 else []
    if not 0 <= index < len(devs):
        devs = list(impl.devices())
    if not 0 <= index < len(devs):
        raise _no_such_device(backend, len(devs), index, f"pk.devices({backend!r}) lists them")
    return devs[index]


def host() -> Device:
    """The host device: CPU memory that every backend can copy to and from."""
    impl = get_backend(HOST_BACKEND)
    memo = _host_memo
    if memo and memo[0] is impl:  # (every pk.memcpy of a numpy array asks: 0.2 us against 1.7 us)
        return memo[1]
    dev = device(HOST_BACKEND)
    _host_memo[:] = [impl, dev]
    return dev


#: the host backend's loaded instance and its device 0 (:func:`host`; a backend loaded again, as
#: tests do, is asked again)
_host_memo: list = []


def check_plugin_devices(name: str, devices: Any) -> None:
    """BackendUnavailable naming what is wrong unless ``devices`` (a plugin's ``devices()``) is
    a non-empty list or tuple of :class:`~portable.Device` s of backend ``name``, each at its
    ``index``, with its kind, memory space, limits and capabilities of the declared types."""
    if not isinstance(devices, (list, tuple)) or not devices:
        what = "an empty list" if isinstance(devices, (list, tuple)) else f"a {type(devices).__name__}"
        raise BackendUnavailable(f"its devices() returned {what}, not a list of its portable.Device s")
    for i, dev in enumerate(devices):
        if not isinstance(dev, Device):
            why = f"a {type(dev).__name__} ({dev!r:.60})"
        elif dev.backend_name != name or dev.index != i:
            why = f"a device of backend {dev.backend_name!r} with index {dev.index!r}, not {name!r} index {i}"
        elif dev.kind not in ("cpu", "gpu") or not isinstance(dev.memory_space, str) or not dev.memory_space:
            why = f"a device of kind {dev.kind!r} (cpu or gpu) and memory space {dev.memory_space!r} (a name)"
        elif not isinstance(dev.limits, DeviceLimits) or not isinstance(dev.capabilities, DeviceCapabilities):
            why = f"a device with limits of type {type(dev.limits).__name__}, "
            why += f"capabilities of type {type(dev.capabilities).__name__}"
        else:
            continue
        raise BackendUnavailable(f"its devices() returned {why} at position {i}, not one of its portable.Device s")


check_devices_with(check_plugin_devices)
