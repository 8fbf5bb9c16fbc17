"""Torch work on a CUDA/ROCm queue's stream, ordered and tracked like the queue's own work.

- :func:`run_on_queue` puts a piece of torch work (a model's forward pass made current on the
  queue's stream) in the queue's order: after host functions still outstanding on the queue,
  with the objects it reads kept alive until the stream passed it (memory of another stream's
  pool arena is then not reused under it), and finished before a blocking queue returns;
- :func:`wait_for_streams` and :func:`keep_for_stream` hand torch tensors made on one stream
  (a model's output, on torch's current stream) to work on another (a copy on the queue's
  stream): the consumer waits for an event of each producing stream, and ``record_stream``
  keeps torch's caching allocator from reusing their memory until the consumer passed it;
- :func:`dlpack_tensor` imports a cupy array through DLPack without cupy's stream handshake
  (``stream=-1``): on HIP, where cupy has no ``__cuda_array_interface__``, ``torch.from_dlpack``
  would make torch's stream wait for an event of cupy's *current* stream (the null stream),
  a dependency nobody asked for; the caller orders the work on the queue's stream instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: DLPack's "no synchronisation" stream value (Python array API, ``__dlpack__(stream=-1)``)
NO_SYNC = -1


def run_on_queue(queue: Any, fn: Callable[[], None], *keep: Any) -> None:
    """Run ``fn()`` (it enqueues on the queue's native stream) in ``queue``'s order and track
    it: ``keep`` stays alive until the work finished; a blocking queue waits for it. An error
    of ``fn`` is the queue's (an AsyncError at the next ``wait()``), whether it ran now or
    behind a host function."""
    queue.enqueue_native(fn, *keep)


def dlpack_tensor(array: Any) -> Any:
    """A torch tensor over ``array``'s memory through DLPack, without stream synchronisation."""
    from torch.utils.dlpack import from_dlpack

    return from_dlpack(array.__dlpack__(stream=NO_SYNC))


def run_on_queue_stream(queue: Any, fn: Callable[[], None], *keep: Any) -> None:
    """:func:`run_on_queue` with the queue's stream made torch's current stream around ``fn``
    (on whichever thread submits it: the caller, or the queue's worker after a host function)."""
    from ._runtime import queue_stream

    def on_stream() -> None:
        with queue_stream(queue):
            fn()

    run_on_queue(queue, on_stream, *keep)


def wait_for_streams(torch: Any, consumer: Any, producers: Iterable[Any]) -> None:
    """Make ``consumer`` (a torch stream) wait for the work enqueued so far on each of
    ``producers`` (torch streams; the consumer itself and repeats are skipped): an event
    recorded on each, waited for on the device."""
    done = [consumer]
    for producer in producers:
        if any(producer == s for s in done):
            continue
        done.append(producer)
        event = torch.cuda.Event()
        event.record(producer)
        consumer.wait_event(event)


def keep_for_stream(consumer: Any, tensors: Iterable[Any]) -> None:
    """``tensor.record_stream(consumer)`` for each: torch's caching allocator does not hand
    their memory out again (once the tensors are freed) before the work enqueued so far on
    ``consumer`` finished."""
    for t in tensors:
        t.record_stream(consumer)
