"""opencl: OpenCL devices through pyopencl, each one probed before its first use (_opencl_devices).

Every OpenCL device runs alpaka's GPU model (``kind="gpu"``: many threads per block), a CPU
device included (its hardware is ``device.capabilities.hardware``, OpenCL's device type: on a
``"cpu"`` one ``pk.make_workdiv`` gives CPU-shaped blocks): work-groups are alpaka blocks,
work-items are threads, ``__local`` memory is shared memory and barriers are real. Memory is
``cl.Buffer`` objects (not addressable from Python: copy to a host buffer to read it); each
device has its own memory space ``"opencl:<i>"``.
"""

from __future__ import annotations

import contextlib
import platform as _platform
import threading
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from portable import BackendUnavailable
from portable.spi import (
    DLPACK_OPENCL,
    CachingAllocator,
    Device,
    DeviceCapabilities,
    DeviceLimits,
    MemRef,
    queue_impl,
)

from . import _opencl_devices
from ._device_backend import DeviceBackend
from ._opencl_simulator import simulator_lock as _simulator_lock

try:
    import pyopencl as cl
except ImportError as _exc:  # pragma: no cover - depends on the installation
    cl = None
    _IMPORT_ERROR = str(_exc)

_BIG = 2**31 - 1


@dataclass(frozen=True)
class OpenCLNative:
    """What a :class:`~portable.Device` of this backend holds in ``device.native``."""

    platform: Any
    device: Any
    context: Any


def _warp_size(d: Any) -> int:
    """What ``acc.warp_size`` gives in a kernel on ``d`` (its sub-group size, else 1)."""
    from ._opencl_launch import subgroup_size

    return subgroup_size(d)


def _limits(d: Any) -> DeviceLimits:
    sizes = list(d.max_work_item_sizes)[:3] + [1] * (3 - len(d.max_work_item_sizes))
    return DeviceLimits(
        max_threads_per_block=int(d.max_work_group_size),
        max_block_dims=tuple(int(s) for s in reversed(sizes)),  # alpaka order: slowest first
        max_grid_dims=(_BIG, _BIG, _BIG),
        shared_memory_per_block=int(d.local_mem_size),
        warp_size=_warp_size(d),
        multiprocessors=int(d.max_compute_units),
    )


class OpenCLBackend(DeviceBackend):
    """The opencl backend (see the module docstring)."""

    name = "opencl"

    def __init__(self, selection: _opencl_devices.Selection) -> None:
        self._selection = selection
        self._numbering = threading.Lock()  # two threads asking for devices probe each once
        self._devices: list[Device] = []
        self._allocators: dict[int, CachingAllocator] = {}

    def _numbered(self, count: int | None) -> list[Device]:
        """The first ``count`` devices (all for None), probing only as far as that needs."""
        with self._numbering:
            used = self._selection.probe_until(count)
            for cand in used[len(self._devices) :]:
                self._devices.append(_device(len(self._devices), cand))
            return self._devices if count is None else self._devices[:count]

    def devices(self) -> list[Device]:
        return list(self._numbered(None))

    def first_devices(self, count: int) -> list[Device]:
        """The first ``count`` devices: the devices after them are not probed yet."""
        return list(self._numbered(count))

    def excluded_devices(self) -> list[tuple[str, str]]:
        """``(platform and device name, reason)`` of each OpenCL device found but not used."""
        self._numbered(None)
        return [(c.label, c.reason or "") for c in self._selection.rejected()]

    def execution(self) -> str:
        """How launches run (``alpyka info``): the runtime's, and how a blocking queue's repeated
        launch is made (backends/_opencl_native.py)."""
        from ._opencl_native import native_compiler, native_problem

        problem = native_problem()
        how = (
            f"in one native call (built with {native_compiler()})"
            if problem is None
            else f"by the Python launcher: the native call is not built ({problem})"
        )
        return f"each device's OpenCL runtime runs the work-groups; a blocking queue's repeated launch is made {how}"

    def versions(self) -> dict[str, str]:
        out = {"pyopencl": cl.VERSION_TEXT, "python": _platform.python_version()}
        for dev in self.devices():
            out.setdefault(dev.properties["platform"], dev.native.platform.version)
        return out

    # ------------------------------------------------------------------ queues and events
    def create_queue(self, device: Device, blocking: bool) -> Any:
        from ._opencl_queue import OpenCLQueue

        return OpenCLQueue(device, blocking)

    def create_event(self, device: Device) -> Any:
        from ._gpu_queue import DeviceEvent

        return DeviceEvent(device)

    # ------------------------------------------------------------------ memory
    def allocator(self, device: Device, pinned: bool = False) -> CachingAllocator:
        alloc = self._allocators.get(device.index)
        if alloc is None:
            ctx = device.native.context
            # a simulator (Oclgrind) grows its table of buffers in place: never while it runs a
            # kernel (a Ctrl-C leaves one running on; backends/_opencl_simulator.py)
            lock = _simulator_lock(ctx) if device.properties.get("simulator") else contextlib.nullcontext()

            def raw_alloc(nbytes: int, alignment: int) -> tuple[Any, int]:
                # cl.Buffer has no address; OpenCL aligns buffers to the device's base alignment
                with lock:
                    return cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(nbytes, 1)), 0

            def raw_free(handle: Any) -> None:
                handle.release()  # OpenCL defers the release until commands using it finished

            alloc = CachingAllocator(raw_alloc, raw_free, oom_errors=(cl.MemoryError, MemoryError))
            self._allocators[device.index] = alloc
        return alloc

    def copy(self, queue: Any, dst: MemRef, src: MemRef) -> None:
        impl, n = queue_impl(queue), src.nbytes
        cq = impl.cq
        with impl.lock:
            if dst.device.is_host_memory and src.device.is_host_memory:
                impl.enqueue_host(lambda: np.copyto(_host_bytes(dst), _host_bytes(src)))
                return
            try:  # (a Ctrl-C raised as the enqueue returns: the queue is told of a lost command)
                if src.device.is_host_memory:
                    host, kind = _host_bytes(src), "h2d"
                    ev = cl.enqueue_copy(cq, dst.handle, host, dst_offset=dst.offset, is_blocking=False)
                elif dst.device.is_host_memory:
                    host, kind = _host_bytes(dst), "d2h"
                    ev = cl.enqueue_copy(cq, host, src.handle, src_offset=src.offset, is_blocking=False)
                else:
                    host, kind = None, "d2d"
                    ev = cl.enqueue_copy(
                        cq, dst.handle, src.handle, byte_count=n, src_offset=src.offset, dst_offset=dst.offset
                    )
                # the NannyEvent of a host transfer blocks when deleted: keep it until the copy is
                # done; known work of its size (a blocking queue joins it where such a copy was short)
                impl.after_known(impl.transfer_took(kind, n), ev, host, dst.owner, src.owner)
            except BaseException:  # (a blocking queue's wait interrupted too: a marker behind it, harmless)
                impl.lost_command()
                raise

    def fill(self, queue: Any, dst: MemRef, value: int) -> None:
        impl = queue_impl(queue)
        if dst.device.is_host_memory:
            impl.enqueue_host(lambda: _host_bytes(dst).fill(value))
            return
        with impl.lock:
            try:  # (a Ctrl-C raised as the enqueue returns, or before the queue was told)
                ev = cl.enqueue_fill_buffer(impl.cq, dst.handle, np.uint8(value), dst.offset, dst.nbytes)
                impl.after_known(impl.transfer_took("fill", dst.nbytes), ev, dst.owner)
            except BaseException:
                impl.lost_command()
                raise

    # ------------------------------------------------------------------ kernels
    def launch_module(self) -> ModuleType:
        from . import _opencl_launch

        return _opencl_launch

    def recorder_class(self) -> type:
        from ._graph_replay import OpenCLRecorder

        return OpenCLRecorder


def _device(index: int, cand: _opencl_devices.Candidate) -> Device:
    """Device ``index`` of the backend: ``cand``, which passed its probe."""
    plat, d, ctx = cand.platform, cand.device, cand.context
    limits = _limits(d)
    return Device(
        OpenCLBackend.name,
        index,
        d.name.strip(),
        "gpu",
        f"opencl:{index}",
        limits,
        native=OpenCLNative(plat, d, ctx),
        capabilities=DeviceCapabilities(
            "gpu",
            False,
            "opencl",
            None,
            limits.warp_size,
            False,
            DLPACK_OPENCL,
            hardware=cand.hardware,  # CL_DEVICE_TYPE: "cpu" gets CPU-shaped work divisions
        ),
        properties={
            "platform": plat.name.strip(),
            "type": cand.hardware,
            "version": d.version,
            "driver": d.driver_version,
            "global_memory": int(d.global_mem_size),
            "simulator": cand.simulator,  # runs commands inside clFlush (Oclgrind)
            "fp64": "cl_khr_fp64" in d.extensions,
            "int64_atomics": "cl_khr_int64_base_atomics" in d.extensions,
        },
    )


def _host_bytes(ref: MemRef) -> np.ndarray:
    return ref.handle[ref.offset : ref.offset + ref.nbytes]


_backend: OpenCLBackend | None = None


def load() -> OpenCLBackend:
    """The opencl backend; BackendUnavailable says why when pyopencl or a working device is missing."""
    global _backend
    if _backend is not None:
        return _backend
    if cl is None:
        raise BackendUnavailable(
            f'pyopencl is not installed ({_IMPORT_ERROR}); `pip install -e ".[opencl]"` gives '
            "pyopencl and CPU OpenCL runtimes (docs/backends.md)"
        )
    _opencl_devices.register_runtimes()
    # Intel's compiler always leaves a log, so pyopencl warns on every build; the warning says
    # only that a log exists (build errors are raised with theirs)
    warnings.filterwarnings("ignore", message="Non-empty compiler output", category=cl.CompilerWarning)
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise BackendUnavailable(
            f"pyopencl is installed but no OpenCL platform was found ({exc}); {_INSTALL_HINT}"
        ) from None
    found, problems = [], []
    for plat in platforms:
        try:
            found.extend((plat, d) for d in plat.get_devices())
        except cl.Error as exc:
            problems.append(f"{plat.name.strip()}: {exc}")
    selection = _opencl_devices.Selection(cl, found)
    if not selection.probe_until(1):  # the default device; the others are probed when asked for
        detail = [f"{c.label}: {c.reason}" for c in selection.rejected()] + problems
        raise BackendUnavailable(
            f"pyopencl found {len(platforms)} OpenCL platform(s) but no usable device"
            + (f" ({'; '.join(detail)})" if detail else "")
            + f"; {_INSTALL_HINT}"
        )
    _backend = OpenCLBackend(selection)
    return _backend


_INSTALL_HINT = (
    "`pip install intel-opencl-rt intel-cmplr-lib-rt tbb` (x86-64) or a system runtime "
    "(`apt install pocl-opencl-icd`) gives a CPU device; "
    f"{_opencl_devices.ENV_DEVICE} picks among them (docs/backends.md)"
)
