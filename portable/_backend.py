"""The interface every backend implements (one module per backend under ``backends/``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from soa import ArrayFactory

    from ._allocator import CachingAllocator
    from ._device import Device
    from ._queue import Queue
    from .spi import Allocator, EventImpl, QueueImpl


@dataclass(frozen=True)
class MemRef:
    """``nbytes`` bytes at byte ``offset`` of a backend allocation ``handle`` on ``device``;
    ``owner`` keeps the allocation alive while enqueued work refers to it."""

    device: Device
    handle: Any
    offset: int
    nbytes: int
    owner: Any = None


class Backend:
    """A backend: its devices, queues, events, memory and kernel launches.

    ``backends/<name>.py`` defines ``load() -> Backend`` and raises
    :class:`~portable.BackendUnavailable` with the reason when it cannot run here. The contract
    of what ``create_queue``/``create_event``/``allocator`` return is in :mod:`portable.spi`
    (``QueueImpl``, ``EventImpl``, ``Allocator``), with the pieces backends reuse.
    """

    name: str = ""
    #: "cpu" when kernels run on the host's cores, "gpu" for many-threads-per-block devices
    kind: str = "cpu"

    def devices(self) -> list[Device]:
        raise NotImplementedError

    def excluded_devices(self) -> list[tuple[str, str]]:
        """``(device, reason)`` for each device the backend found on the machine but does not use."""
        return []

    def versions(self) -> dict[str, str]:
        """Versions of the packages and drivers the backend relies on."""
        return {}

    # queues and events
    def create_queue(self, device: Device, blocking: bool) -> QueueImpl:
        """A new queue of ``device`` (see :class:`portable.spi.QueueImpl`)."""
        raise NotImplementedError

    def create_event(self, device: Device) -> EventImpl:
        """A new event of ``device``, never recorded (see :class:`portable.spi.EventImpl`)."""
        raise NotImplementedError

    # memory
    def allocator(self, device: Device, pinned: bool = False) -> Allocator:
        """The allocator of ``device``'s memory (page-locked host memory when ``pinned``)."""
        raise NotImplementedError

    def pinned_allocator(self) -> CachingAllocator | None:
        """Page-locked host memory this backend offers to the host device, or None."""
        return None

    def array_factory(self, buffer: Any, const: bool) -> ArrayFactory | None:
        """Arrays onto a :class:`~portable.Buffer` usable from Python (numpy, cupy), or None when
        there are none. The arrays keep the buffer alive (its memory is not reused under them)."""
        return None

    def copy(self, queue: Queue, dst: MemRef, src: MemRef) -> None:
        """Enqueue a copy of ``src.nbytes`` bytes; one side may be host memory."""
        raise NotImplementedError

    def fill(self, queue: Queue, dst: MemRef, value: int) -> None:
        """Enqueue setting every byte of ``dst`` to ``value``."""
        raise NotImplementedError

    # kernels
    def launch(self, queue: Queue, workdiv: Any, kernel: Any, args: tuple) -> None:
        """Enqueue ``kernel`` over ``workdiv`` with ``args`` on ``queue``."""
        raise NotImplementedError(f"backend {self.name} does not implement kernel launches")

    def kernel_thread_limit(self, device: Device, workdiv: Any, kernel: Any, args: tuple) -> int:
        """The most threads per block ``kernel`` can run with ``args`` on ``device`` in work
        divisions like ``workdiv`` (alpaka's ``getFunctionAttributes(...).maxThreadsPerBlock``;
        ``pk.valid_workdiv(..., kernel=, args=)`` asks it). This default answers the device's
        limit; GPU backends compile the kernel and answer its own (registers lower it)."""
        return device.limits.max_threads_per_block
