"""Which queue a buffer's interchange consumers (DLPack, the CUDA array interface, numpy) must
be ordered after: the buffer's last queue, noted as work is enqueued on it.

alpyka's queues are non-blocking: ``pk.exec(q, ...)`` returns before the kernel ran. A consumer
that reads the memory through an interchange protocol must therefore be ordered after that
work, as the protocols say:

- each buffer remembers the *last* non-blocking queue that work touching it was enqueued on
  (kernel arguments, ``memcpy``/``memset``, the objects ``Queue.enqueue_native`` keeps):
  :func:`note_queue`; in a program without data races that queue's order already follows
  every earlier writer, so ordering after it is enough. Host functions (``enqueue_host``) are
  opaque: alpyka cannot see which memory they write (wait for their queue yourself);
- host memory (numpy's ``__array__``, ``__dlpack__`` on the CPU): :func:`wait_on_host` blocks
  until that queue's work enqueued so far finished (an event: its error is raised, and stays
  the queue's for its next ``wait()``);
- device memory: DLPack's consumer passes its stream (``__dlpack__(stream=s)``): the queue
  records an event and ``s`` waits for it on the device (``order_stream``); the CUDA array
  interface (v3) names the producer's stream in its ``stream`` field (``cai_stream``).

The noting is here, under the queues (kernel launches note their arguments); the waiting is in
portable/_buffer.py, above them.

From inside a host function of that very queue nothing is waited for: the work before it has
finished, and waiting for the work after it would wait forever.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


class LastQueue:
    """The queue of the latest non-blocking work enqueued on a buffer, held weakly (a buffer
    must not keep its queues alive); one object shared by a buffer and its reinterpreted views."""

    __slots__ = ("ref",)

    def __init__(self) -> None:
        self.ref: Callable[[], Any] | None = None

    def queue(self) -> Any:
        ref = self.ref
        return ref() if ref is not None else None


#: the registered holder types -> how to reach the ``LastQueue`` of an object of that type
_REGISTERED: dict[type, Callable[[Any], Any]] = {}
#: every type seen -> its getter (the nearest registered type in its MRO), or None: it holds no
#: buffer (a cache: emptied by each registration)
_HOLDERS: dict[type, Callable[[Any], Any] | None] = {}
_UNKNOWN = object()


def register_holder(cls: type, last_queue_of: Callable[[Any], Any]) -> None:
    """Objects of ``cls`` (and its subclasses) hold a buffer: ``last_queue_of(obj)`` gives its
    :class:`LastQueue` (or None). A type uses the getter of the nearest registered type in its
    MRO, a subclass's before its base's, whatever the order they registered in."""
    _REGISTERED[cls] = last_queue_of
    # types looked up before (cached as no buffer, or with a farther base's getter) look again
    _HOLDERS.clear()


def _lookup(t: type) -> Callable[[Any], Any] | None:
    found = None
    for base in t.__mro__:
        found = _REGISTERED.get(base)
        if found is not None:
            break
    _HOLDERS[t] = found
    return found


def _queue_ref(queue: Any) -> Callable[[], Any]:
    """The queue's one weak reference (made once per queue: a launch sets it, never makes one)."""
    ref = queue.__dict__.get("_weakself")
    if ref is None:
        ref = queue.__dict__["_weakself"] = weakref.ref(queue)
    return ref


def noter(queue: Any, objs: tuple) -> tuple[Callable[[], Any], list[tuple[int, Callable[[Any], Any]]]] | None:
    """:func:`note_queue` prepared for objects of the types of ``objs`` (the fast launch path,
    portable/_launch.py, whose guard fixes the types): ``(ref, [(index, last_queue_of)])``, the
    queue's one weak reference and how to reach the ``LastQueue`` of each holder among ``objs``,
    so that a launch sets ``last_queue_of(objs[index]).ref = ref`` with no type lookups and no
    new weak reference. None when there is nothing to note (a blocking queue, no buffers)."""
    if queue.blocking:
        return None
    getters = []
    for i, obj in enumerate(objs):
        get = _HOLDERS.get(type(obj), _UNKNOWN)
        if get is _UNKNOWN:
            get = _lookup(type(obj))
        if get is not None:
            getters.append((i, get))
    return (_queue_ref(queue), getters) if getters else None


def note_queue(queue: Any, objs: tuple) -> None:
    """Remember ``queue`` (a pk.Queue) as the last queue of the buffers behind ``objs``
    (buffers, collections, views; anything else is skipped). Blocking queues are not
    remembered: their work has finished when the enqueue returns."""
    if queue.blocking:
        return
    ref = None
    for obj in objs:
        get = _HOLDERS.get(type(obj), _UNKNOWN)
        if get is _UNKNOWN:
            get = _lookup(type(obj))
        if get is None:
            continue
        last = get(obj)
        if last is not None:
            if ref is None:
                ref = _queue_ref(queue)  # once per queue (a launch pays a dict lookup, not a weakref)
            last.ref = ref
