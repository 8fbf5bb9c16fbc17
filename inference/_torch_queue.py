"""Where torch runs the work of an alpyka queue: its torch device, the path by which torch reaches
the queue's memory, and the queue's native stream made torch's current stream.

- :func:`memory_path` / :func:`torch_device`: how torch reaches memory of a device, asked of
  what its backend declares (``device.capabilities``): ``"host"`` (host-addressable memory, zero
  copies), ``"cuda"`` (memory torch addresses as a CUDA device, ROCm's too) or ``"copy"``
  (neither: the copy path through host staging, see :mod:`inference._tensors`);
- :func:`queue_stream` makes a CUDA/ROCm queue's native stream torch's current stream (and its
  device torch's current device) for a block;
- :func:`run_on_queue` / :func:`run_on_queue_stream` put a piece of torch work (a model's forward
  pass made current on the queue's stream) in the queue's order: after host functions still
  outstanding on the queue, with the objects it reads kept alive until the stream passed it
  (memory of another stream's pool arena is then not reused under it), and finished before a
  blocking queue returns;
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

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.utils.dlpack

import portable as pk

#: memory paths and what ``repr`` says about them
PATH_NAMES = {
    "host": "zero-copy (host memory)",
    "cuda": "zero-copy (device memory)",
    "copy": "copy path (memory not addressable from torch; staged through host memory)",
}

#: DLPack's "no synchronisation" stream value (Python array API, ``__dlpack__(stream=-1)``)
NO_SYNC = -1

_forced_copy = False


def force_copy_path(on: bool) -> None:
    """Route every device through the copy path (tests use it to exercise that path on CPUs)."""
    global _forced_copy
    _forced_copy = bool(on)


def memory_path(device: pk.Device) -> str:
    """``"host"``, ``"cuda"`` or ``"copy"``: how torch reaches memory of ``device``, by what its
    backend declares (``device.capabilities``): host memory, memory torch addresses as a CUDA
    device (ROCm's too), or neither."""
    if _forced_copy:
        return "copy"
    caps = device.capabilities
    if caps.host_addressable:
        return "host"
    if caps.torch_device_type == "cuda":  # torch's device type, not a backend's name
        return "cuda"
    return "copy"


def torch_device(device: pk.Device) -> torch.device:
    """The torch device a model runs on for work of ``device`` (CPU for host and copy paths); an
    :class:`~portable.ArgumentError` for a device of the GPU emulator, whose memory is no torch
    device's (docs/testing.md)."""
    if memory_path(device) == "cuda":
        if device.capabilities.emulated:
            raise pk.ArgumentError(
                f"{device}: torch has no device for the memory of alpyka's GPU emulator; run models on "
                "a queue of cpu_serial, cpu_threads or opencl, or unset ALPYKA_EMULATE on a machine with the GPU"
            )
        ordinal = device.properties.get("ordinal", device.index) if device.properties else device.index
        return torch.device(device.capabilities.torch_device_type, int(ordinal))
    return torch.device("cpu")


def _native_stream_pointer(queue: pk.Queue) -> int:
    handle = queue.native_handle
    for attr in ("ptr", "handle", "cuda_stream"):
        value = getattr(handle, attr, None)
        if isinstance(value, int):
            return value
    if isinstance(handle, int):
        return handle
    raise TypeError(f"cannot find the native stream of {queue!r} (native handle {handle!r})")


@contextlib.contextmanager
def queue_stream(queue: pk.Queue | None) -> Iterator[None]:
    """Make the queue's native stream torch's current stream (CUDA/ROCm) for the block; the
    previous current stream (thread-local) and device are restored afterwards. A no-op on
    queues whose work torch runs on the host."""
    if queue is None or memory_path(queue.device) != "cuda":
        yield
        return
    dev = torch_device(queue.device)
    stream = torch.cuda.ExternalStream(_native_stream_pointer(queue), device=dev)
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        yield


def run_on_queue(queue: Any, fn: Callable[[], None], *keep: Any) -> None:
    """Run ``fn()`` (it enqueues on the queue's native stream) in ``queue``'s order and track
    it: ``keep`` stays alive until the work finished; a blocking queue waits for it. An error
    of ``fn`` is the queue's (an AsyncError at the next ``wait()``), whether it ran now or
    behind a host function."""
    queue.enqueue_native(fn, *keep)


def run_on_queue_stream(queue: Any, fn: Callable[[], None], *keep: Any) -> None:
    """:func:`run_on_queue` with the queue's stream made torch's current stream around ``fn``
    (on whichever thread submits it: the caller, or the queue's worker after a host function)."""

    def on_stream() -> None:
        with queue_stream(queue):
            fn()

    run_on_queue(queue, on_stream, *keep)


def dlpack_tensor(array: Any) -> Any:
    """A torch tensor over ``array``'s memory through DLPack, without stream synchronisation."""
    return torch.utils.dlpack.from_dlpack(array.__dlpack__(stream=NO_SYNC))


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
