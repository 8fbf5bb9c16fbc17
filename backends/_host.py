"""What the CPU backends share: host memory, host queues and events, and the CPU's limits."""

from __future__ import annotations

import math
import os
import platform
from functools import cache
from typing import Any

import numpy as np

import soa
from portable.compiler import debug_enabled
from portable.env import debug_flag
from portable.spi import (
    Backend,
    CachingAllocator,
    Device,
    DeviceCapabilities,
    DeviceLimits,
    HostEvent,
    HostQueue,
    KernelHandle,
    MemRef,
    PlanCache,
    pinned_host_allocator,
    queue_impl,
    signature_key,
)

from ._host_launch import compiled_plan
from ._host_slices import run_blocks

#: CPython's raw environment (bytes keys): ALPYKA_DEBUG is read on every launch
_environ = getattr(os.environ, "_data", None) if os.name == "posix" else None

HOST_ALIGNMENT = 128
_BIG = 2**31 - 1


def _host_alloc(nbytes: int, alignment: int = HOST_ALIGNMENT) -> tuple[np.ndarray, int]:
    """``nbytes`` of host memory whose first byte is aligned to ``alignment`` (numpy bytes)."""
    alignment = max(alignment, HOST_ALIGNMENT)
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    mem = raw[start : start + nbytes]
    return mem, mem.ctypes.data


def _host_free(handle: Any) -> None:
    """Host memory is released by the garbage collector once the block drops it."""


@cache
def host_allocator() -> CachingAllocator:
    """The one caching allocator of host memory, shared by every CPU backend."""
    return CachingAllocator(_host_alloc, _host_free)


#: where the CPU's model name is read
CPUINFO = "/proc/cpuinfo"


@cache
def cpu_name() -> str:
    """The CPU's model name as the kernel reports it ("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"),
    else the platform's word for it: the CPU devices' name."""
    return model_name(CPUINFO) or platform.processor() or platform.machine() or "host CPU"


def model_name(path: str) -> str | None:
    """The first ``model name`` of the cpuinfo file ``path`` (None: none, or no file). Bytes that
    are not UTF-8 (a hypervisor sets the name) are replaced: a UnicodeDecodeError here made every
    CPU backend unavailable ("failed to load")."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return None


def cpu_limits() -> DeviceLimits:
    """One thread per block (alpaka's serial and block-parallel CPU accelerators)."""
    return DeviceLimits(
        max_threads_per_block=1,
        max_block_dims=(1, 1, 1),
        max_grid_dims=(_BIG, _BIG, _BIG),
        shared_memory_per_block=48 * 1024,
        warp_size=1,
        multiprocessors=os.cpu_count() or 1,
    )


def _bytes(ref: MemRef) -> np.ndarray:
    return ref.handle[ref.offset : ref.offset + ref.nbytes]


class HostBackend(Backend):
    """Base of cpu_serial and cpu_threads: everything but how a kernel's blocks are run."""

    kind = "cpu"
    parallel_blocks = False  #: True: run_blocks spreads the blocks over threads

    def __init__(self) -> None:
        self._devices = [
            Device(
                self.name,
                0,
                cpu_name(),
                "cpu",
                "host",
                cpu_limits(),
                properties={"cores": os.cpu_count() or 1},
                capabilities=DeviceCapabilities.host(),
            )
        ]

    def devices(self) -> list[Device]:
        return self._devices

    def versions(self) -> dict[str, str]:
        import numba

        return {"numpy": np.__version__, "numba": numba.__version__, "python": platform.python_version()}

    def create_queue(self, device: Device, blocking: bool) -> HostQueue:
        return HostQueue(blocking)

    def create_event(self, device: Device) -> HostEvent:
        return HostEvent()

    def allocator(self, device: Device, pinned: bool = False) -> CachingAllocator:
        if pinned:
            provider = pinned_host_allocator()
            if provider is not None:
                return provider
        return host_allocator()

    def array_factory(self, buffer: Any, const: bool) -> soa.ArrayFactory:
        return soa.host_array_factory(buffer.handle, const, owner=buffer)

    def copy(self, queue: Any, dst: MemRef, src: MemRef) -> None:
        # the closure holds the MemRefs, whose owners keep both allocations alive until it ran
        queue.enqueue_host(lambda: np.copyto(_bytes(dst), _bytes(src)))

    def fill(self, queue: Any, dst: MemRef, value: int) -> None:
        queue.enqueue_host(lambda: _bytes(dst).fill(value))

    # kernels
    def launch(self, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        """Compile (once per signature) and enqueue ``kernel`` over ``workdiv``; the task holds
        ``args`` (views, buffers: their owners) until the launch ran. On a blocking queue the
        blocks run right here, under the queue's lock."""
        # the hot path of every launch: one dict lookup for the compiled plan, then one call
        debug = debug_flag(_environ.get(b"ALPYKA_DEBUG")) if _environ is not None else debug_enabled()
        plan = kernel.slot(self.name, PlanCache).get(
            (len(workdiv.blocks), signature_key(args, kernel.__name__, kernel), debug)
        )
        if plan is None:
            plan = compiled_plan(self.name, queue, workdiv, kernel, args)
        dyn = kernel.shared_bytes(workdiv, args) if plan.uses_dynamic_shared else 0
        impl = queue_impl(queue)
        if impl.blocking:
            lock = impl.lock
            lock.acquire()  # cheaper than ``with`` on this path
            try:
                if self.parallel_blocks:
                    self.launch_blocks(plan, workdiv, dyn, args)
                else:
                    plan.invoke(workdiv.blocks, workdiv.elements, dyn, args)
            finally:
                lock.release()
            return
        nblocks, call = plan.pack(workdiv.blocks, workdiv.elements, dyn, args)
        e = workdiv.elements
        impl.enqueue_call(self.run_blocks, plan, nblocks, call, args, e[0] if len(e) == 1 else math.prod(e))

    def launcher(self, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> Any:
        """The prepared launch for arguments of the types of ``args`` (portable/_launch.py's
        fast path; backends/_host_fast.py)."""
        from ._host_fast import host_launcher

        return host_launcher(self, queue, workdiv, kernel, args)

    def recorder(self, queue: Any) -> Any:
        """What ``pk.capture(queue)`` records with (backends/_graph_replay.py)."""
        from ._graph_replay import HostRecorder

        return HostRecorder(self, queue)

    def launch_blocks(self, plan: Any, workdiv: Any, dyn: int, args: tuple) -> None:
        """Run every block of a launch now (a blocking queue): cpu_threads spreads them over
        threads."""
        plan.invoke(workdiv.blocks, workdiv.elements, dyn, args)

    def run_blocks(self, plan: Any, nblocks: int, call: tuple, keep: tuple, units: int = 1) -> None:
        """Run blocks ``[0, nblocks)`` of ``plan`` packed as ``call`` (``units``: elements per
        block): one after another (cpu_serial; cpu_threads spreads them over threads), in slices
        when the main thread runs them (a ``wait()`` that helps the worker: Ctrl-C lands between two)."""
        run_blocks(plan.fn, nblocks, call)

    def execution(self) -> str:
        """How launches run (``alpyka info``)."""
        return "blocks one after another, on the calling thread (blocking queue) or the queue's worker thread"
