"""A caching allocator in the style of alpaka's / cub's: geometric bins, queue-ordered reuse.

Freed blocks go back to a cache keyed by their size bin, the block freed last handed out first
(warm memory; an event's freed collections come back to the next event). A cached block remembers the queue it
was last used on and an event recorded there when it was freed: it is handed out again at once
to the same queue (queue order makes that safe), or to any other queue once the event completed.
When a fresh allocation fails, the cache is released and the allocation is retried once.

Blocks of collected buffers arrive through :mod:`portable._deferred`: a buffer's finalizer only
hands its block over, and the allocator takes it back at its next safe point (the start of an
allocation, a queue wait, reading ``stats``), never inside a lock. Lock order: the allocator's
lock is taken before an event's (a cached block's ``event.is_complete()``), never after.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._deferred import run_deferred
from ._queue import Event
from ._registry import available_backends, get_backend

if TYPE_CHECKING:
    from ._device import Device


def record_marker(queue: Any) -> Any:
    """An event recorded on ``queue`` now (completes when the queue reaches it); None for a
    blocking queue, whose work has finished when its enqueue returned."""
    if getattr(queue, "blocking", False):
        return None
    ev = Event(queue.device)
    queue.record(ev)
    return ev


@dataclass(frozen=True)
class MemRef:
    """``nbytes`` bytes at byte ``offset`` of a backend allocation ``handle`` on ``device``
    (what a backend's ``copy``/``fill`` receive; ``portable.spi`` exports it); ``owner`` keeps
    the allocation alive while enqueued work refers to it."""

    device: Device
    handle: Any
    offset: int
    nbytes: int
    owner: Any = None


@dataclass(eq=False)
class MemoryBlock:
    """One allocation: the backend's handle, its address and its (binned) size."""

    handle: Any
    address: int
    nbytes: int
    bin: int | None
    queue: Any = None
    event: Any = None
    allocator: CachingAllocator | None = field(default=None, repr=False)
    #: while cached: the queue it was freed on, weakly (a cache must not keep queues alive)
    last_queue: Callable[[], Any] | None = field(default=None, repr=False)


def _weak(queue: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(queue)
    except TypeError:  # an object without weak references (tests' stand-ins)
        return lambda: queue


@dataclass
class AllocatorStats:
    hits: int = 0
    misses: int = 0
    live_bytes: int = 0
    cached_bytes: int = 0
    live_blocks: int = 0
    cached_blocks: int = 0
    retries: int = 0


class CachingAllocator:
    """Cache of device (or pinned host) memory blocks.

    ``raw_alloc(nbytes, alignment) -> (handle, address)`` and ``raw_free(handle)`` are the
    backend's primitives; ``make_event(queue)`` records a marker on ``queue`` and returns an
    object with ``is_complete()`` (default: a :class:`~portable.Event` recorded there). Sizes round
    up to ``bin_growth ** k`` bytes between ``min_bin`` and
    ``max_bin``; larger blocks are allocated exactly and never cached. ``oom_errors``: what
    ``raw_alloc`` raises when the memory is not there (the cache is emptied and it is tried once
    more).
    """

    def __init__(
        self,
        raw_alloc: Callable[[int, int], tuple[Any, int]],
        raw_free: Callable[[Any], None],
        make_event: Callable[[Any], Any] | None = None,
        *,
        bin_growth: int = 2,
        min_bin: int = 8,
        max_bin: int = 30,
        max_cached_bytes: int = 1 << 30,
        oom_errors: tuple[type[BaseException], ...] = (MemoryError,),
    ) -> None:
        self._raw_alloc, self._raw_free = raw_alloc, raw_free
        self._make_event = make_event or record_marker
        self.bin_growth, self.min_bin, self.max_bin = bin_growth, min_bin, max_bin
        self.max_cached_bytes = max_cached_bytes
        #: what ``raw_alloc`` raises when the memory is not there (``pk.Buffer`` raises those as
        #: ``pk.OutOfMemory``)
        self.oom_errors = oom_errors
        self._lock = threading.Lock()
        self._cache: dict[int, list[MemoryBlock]] = {}
        self._stats = AllocatorStats()

    @property
    def stats(self) -> AllocatorStats:
        """Counters, after taking back the blocks of buffers collected so far."""
        run_deferred()
        return self._stats

    def bin_for(self, nbytes: int) -> tuple[int | None, int]:
        """``(bin, rounded size)``; bin is None for blocks too large to cache."""
        k, size = self.min_bin, self.bin_growth**self.min_bin
        while size < nbytes:
            k += 1
            size *= self.bin_growth
        if k > self.max_bin:
            return None, max(nbytes, 1)
        return k, size

    def allocate(self, nbytes: int, queue: Any = None, alignment: int = 1) -> MemoryBlock:
        """A block of at least ``nbytes`` whose address is a multiple of ``alignment``."""
        run_deferred()  # blocks of collected buffers first: a safe point, no lock held
        bin_, size = self.bin_for(nbytes)
        with self._lock:
            if bin_ is not None:
                blocks = self._cache.get(bin_, [])
                for i in range(len(blocks) - 1, -1, -1):  # the block freed last first: warm memory
                    b = blocks[i]
                    if b.address % alignment:
                        continue
                    last = b.last_queue() if b.last_queue is not None else None
                    if b.event is None or (queue is not None and last is queue) or b.event.is_complete():
                        del blocks[i]
                        self._stats.hits += 1
                        self._stats.cached_bytes -= b.nbytes
                        self._stats.cached_blocks -= 1
                        return self._hand_out(b, queue)
            self._stats.misses += 1
        try:
            handle, address = self._raw_alloc(size, alignment)
        except self.oom_errors:
            self.release_cache()
            with self._lock:
                self._stats.retries += 1
            handle, address = self._raw_alloc(size, alignment)
        with self._lock:
            return self._hand_out(MemoryBlock(handle, address, size, bin_, allocator=self), queue)

    def _hand_out(self, b: MemoryBlock, queue: Any) -> MemoryBlock:
        """Mark ``b`` live for ``queue``; the caller holds the lock."""
        b.queue, b.event, b.last_queue = queue, None, None
        self._stats.live_bytes += b.nbytes
        self._stats.live_blocks += 1
        return b

    def free(self, b: MemoryBlock) -> None:
        """Return ``b`` to the cache (or to the backend when it does not fit). Takes locks: never
        call it from a finalizer (:func:`portable._deferred.defer` it)."""
        event = None
        if b.queue is not None and b.bin is not None:
            try:
                event = self._make_event(b.queue)
            except Exception:  # noqa: BLE001 - a broken queue: do not reuse the block on other queues early
                event = None
                b.queue = None
                self._release(b)
                return
        with self._lock:
            self._stats.live_bytes -= b.nbytes
            self._stats.live_blocks -= 1
            if b.bin is None or self._stats.cached_bytes + b.nbytes > self.max_cached_bytes:
                cache = False
            else:
                cache = True
                b.event = event
                b.last_queue, b.queue = (_weak(b.queue) if b.queue is not None else None), None
                self._cache.setdefault(b.bin, []).append(b)
                self._stats.cached_bytes += b.nbytes
                self._stats.cached_blocks += 1
        if not cache:
            self._raw_free(b.handle)

    def _release(self, b: MemoryBlock) -> None:
        with self._lock:
            self._stats.live_bytes -= b.nbytes
            self._stats.live_blocks -= 1
        self._raw_free(b.handle)

    def release_cache(self) -> int:
        """Free every cached block; returns the bytes released."""
        run_deferred()
        with self._lock:
            blocks = [b for bs in self._cache.values() for b in bs]
            self._cache.clear()
            self._stats.cached_bytes = 0
            self._stats.cached_blocks = 0
        for b in blocks:
            self._raw_free(b.handle)
        return sum(b.nbytes for b in blocks)


def pinned_host_allocator() -> CachingAllocator | None:
    """Page-locked host memory (``pk.Buffer(pk.host(), ..., pinned=True)``): the allocator of the
    first GPU backend available here that offers one (``Backend.pinned_allocator``), else None."""
    for name in available_backends():
        backend = get_backend(name)
        if backend.kind == "gpu":
            allocator = backend.pinned_allocator()
            if allocator is not None:
                return allocator
    return None
