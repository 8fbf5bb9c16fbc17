"""Buffers: typed, aligned memory of one device, from the device's caching allocator."""

from __future__ import annotations

import math
import operator
import weakref
from typing import Any

import numpy as np

import soa

from ._alloc_limits import allocation_limit, human_bytes
from ._allocator import MemRef
from ._deferred import defer
from ._device import DLPACK_CUDA, DLPACK_ROCM, Device
from ._device import host as host_device
from ._errors import ArgumentError, ArgumentTypeError, BufferTooLarge, DeviceMismatch, OutOfMemory, StateError
from ._graph import active as _capturing
from ._graph import refuse_host_read
from ._handoff import LastQueue, register_holder
from ._queue import Event, Queue
from ._streamcheck import register_buffer_type

DEFAULT_ALIGNMENT = 128


#: the largest allocation any backend could address: 48-bit virtual addresses (x86-64, GPUs)
MAX_NBYTES = 2**48


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    try:
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    except TypeError:
        raise ArgumentTypeError(f"buffer shape is an int or a tuple of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ArgumentError(f"buffer shape must hold non-negative integers, got {shape!r} (int(n) for a count)")
    return tuple(int(d) for d in dims)


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _free(block: Any) -> None:
    block.allocator.free(block)


def _on_collect(block: Any) -> None:
    # the buffer's finalizer: it may run inside any lock (see portable._deferred), so it only
    # hands the block over; the allocator takes it back at its next safe point
    defer(_free, block)


# ---------------------------------------------------------------------- hand-off (portable/_handoff.py)
def _inside_own_task(impl: Any) -> bool:
    """True on the thread running one of this queue implementation's host functions (its
    ``in_own_task()``, which a queue with host functions of its own declares: portable.spi's
    QueueImpl)."""
    in_own_task = getattr(impl, "in_own_task", None)
    return in_own_task is not None and in_own_task()


def wait_on_host(last: LastQueue) -> None:
    """Block until the work enqueued so far on the buffer's last queue finished (host readers);
    an error of that work is raised as :class:`~portable.AsyncError`."""
    queue = last.queue()
    if _capturing:  # no host reads inside pk.capture (portable/_graph.py)
        refuse_host_read(queue)
    if queue is None or queue.is_idle() or _inside_own_task(queue.impl):
        return
    event = Event(queue.device)
    queue.record(event)
    event.wait()


def order_stream(last: LastQueue, stream: int) -> None:
    """Make the native stream ``stream`` (a consumer's CUDA/HIP stream handle) wait on the
    device for the work enqueued so far on the buffer's last queue; a queue whose backend
    cannot hand off to a native stream is waited for on the host."""
    queue = last.queue()
    if queue is None:
        return
    hand_off = getattr(queue.impl, "hand_off", None)
    if hand_off is None:
        wait_on_host(last)
    else:
        hand_off(stream)


def cai_stream(last: LastQueue) -> int | None:
    """The ``stream`` field of the CUDA array interface (v3): the last queue's stream, with the
    work enqueued so far in it (host functions still ahead of that work are waited for), or
    None when nothing is outstanding (no synchronisation needed)."""
    queue = last.queue()
    if queue is None or queue.is_idle():
        return None
    hand_off = getattr(queue.impl, "hand_off", None)
    if hand_off is None:
        wait_on_host(last)
        return None
    return int(hand_off(None))


class Buffer:
    """``pk.Buffer(device, shape, dtype)``: device memory; ``pinned=True`` on ``pk.host()``
    gives page-locked host memory where a GPU backend can provide it (plain host memory else).

    ``queue`` ties the allocation to a queue (stream-ordered reuse in the caching allocator).
    On host-memory devices ``buf.array`` (and ``np.asarray(buf)``) is a numpy array onto it.
    """

    def __init__(
        self,
        device: Device,
        shape: Any,
        dtype: Any = np.float32,
        *,
        pinned: bool = False,
        queue: Any = None,
        alignment: int = DEFAULT_ALIGNMENT,
    ) -> None:
        if not isinstance(device, Device):
            raise ArgumentTypeError(f"Buffer needs a pk.Device, got {type(device).__name__}")
        if queue is not None and not isinstance(queue, Queue):
            raise ArgumentTypeError(f"Buffer's queue= takes a pk.Queue, got {type(queue).__name__}")
        if queue is not None and not queue.device.can_access(device):
            raise DeviceMismatch(
                f"a buffer on {device} cannot be allocated on a queue of {queue.device}; pass a queue of {device}"
            )
        self.device = device
        self.shape = _shape_tuple(shape)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise ArgumentTypeError(
                f"Buffer dtype {dtype!r} is not a numpy dtype; pass one such as np.float32 or 'float32'"
            ) from None
        if self.dtype.hasobject:
            raise ArgumentTypeError(f"Buffer dtype {self.dtype} holds Python objects; use a numeric dtype")
        self.pinned = bool(pinned)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize  # Python ints: no wrap-around
        if self.nbytes > MAX_NBYTES:
            raise BufferTooLarge(
                f"a buffer of shape {self.shape} and dtype {self.dtype} would take {self.nbytes} "
                f"bytes, more than a device can address (2**48); split the data into buffers "
                f"of at most 2**48 bytes"
            )
        limit = allocation_limit(host_device() if self.pinned else device)
        where = "pinned host memory" if self.pinned else device
        if limit is not None and self.nbytes > limit[0]:
            raise BufferTooLarge(
                f"a buffer of shape {self.shape} and dtype {self.dtype} needs {self.nbytes} bytes "
                f"({human_bytes(self.nbytes)}); {where} allows at most {limit[0]} bytes "
                f"({human_bytes(limit[0])}) {limit[1]}; use fewer elements or split the data into several buffers"
            )
        allocator = device.backend.allocator(device, pinned=self.pinned)
        try:
            self._block = allocator.allocate(self.nbytes, queue=queue, alignment=alignment)
        except (MemoryError, *getattr(allocator, "oom_errors", ())) as exc:  # below the limit, not free now
            raise OutOfMemory(
                f"a buffer of {self.nbytes} bytes ({human_bytes(self.nbytes)}) on {where} could not be "
                f"allocated ({type(exc).__name__}: {exc}); free other buffers or use fewer elements"
            ) from exc
        self._finalizer = weakref.finalize(self, _on_collect, self._block)
        self._last = LastQueue()  # the queue interchange consumers are ordered after

    @property
    def last_queue(self) -> LastQueue:
        """Which queue the work enqueued on this buffer so far ends on (portable/_handoff.py):
        what the interchange protocols and ``wait_ready`` order their consumers after."""
        return self._last

    @property
    def handle(self) -> Any:
        """The backend's allocation (numpy bytes, cupy memory, cl.Buffer)."""
        return self._block.handle

    @property
    def ptr(self) -> int:
        """Address of the first byte (0 where the backend exposes none, as on OpenCL)."""
        return self._block.address

    def memref(self, offset: int = 0, nbytes: int | None = None) -> MemRef:
        """The buffer's bytes ``[offset, offset + nbytes)`` (to its end by default), as
        ``pk.memcpy`` and ``pk.memset`` take them; ValueError outside the buffer."""
        size = self.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            span = f"offset {offset}" if nbytes is None else f"bytes [{offset}, {offset + size})"
            raise ArgumentError(f"{span} is outside this buffer of {self.nbytes} bytes")
        return MemRef(self.device, self._block.handle, offset, size, owner=self)

    @property
    def array(self) -> Any:
        """A typed array onto the buffer (numpy on host memory, cupy on CUDA/ROCm); it keeps
        the buffer alive."""
        make = self.device.backend.array_factory(self, False)
        if make is None:
            raise StateError(
                f"memory of {self.device} is not addressable from Python; memcpy it into a host buffer first"
            )
        return make(0, self.dtype, self.shape, c_strides(self.shape, self.dtype.itemsize))

    # interchange protocols: the bytes of ``buf.array``, handed over in order after the work
    # enqueued on the buffer's last queue (portable/_handoff.py)
    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface (v3) of ``buf.array`` (CUDA and ROCm buffers only); its
        ``stream`` is the stream of the last queue with work on the buffer (the consumer
        synchronises on it), None when that work has finished."""
        if self.device.capabilities.dlpack_device_type not in (DLPACK_CUDA, DLPACK_ROCM):
            raise AttributeError(f"buffer on {self.device} is not CUDA/ROCm memory")
        cai = dict(self.array.__cuda_array_interface__)
        cai["stream"] = cai_stream(self._last)
        cai["version"] = max(int(cai.get("version", 3)), 3)
        return cai

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """DLPack export, ordered after the work enqueued on the buffer: host memory waits for
        it; on CUDA/ROCm the consumer's ``stream`` waits for it on the device (None: the legacy
        default stream, CUDA's 1 and ROCm's 0; -1: no ordering, the consumer's own choice)."""
        kw = {
            k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy)) if v is not None
        }
        arr = self.array
        if self.device.is_host_memory:
            capsule = arr.__dlpack__(stream=stream, **kw)
            wait_on_host(self._last)
            return capsule
        capsule = arr.__dlpack__(stream=-1, **kw)  # the ordering is done here, not by cupy's current stream
        if stream != -1:
            if stream is None:
                stream = 0 if self.device.capabilities.dlpack_device_type == DLPACK_ROCM else 1
            order_stream(self._last, int(stream))
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(buf)``: the buffer's host memory, once the work enqueued on it finished."""
        if not self.device.is_host_memory:
            raise ArgumentTypeError(f"buffer on {self.device} is device memory; memcpy it to a host buffer first")
        wait_on_host(self._last)
        arr = self.array
        return arr if dtype is None else arr.astype(dtype)

    def wait_ready(self) -> None:
        """Block until the work enqueued so far on the buffer's last queue finished (what the
        host-memory interchange methods do before handing the memory out)."""
        wait_on_host(self._last)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    def __repr__(self) -> str:
        pin = ", pinned" if self.pinned else ""
        return f"<Buffer {self.shape} {self.dtype} on {self.device}{pin}>"


def reinterpret(buf: Any, dtype: Any) -> Any:
    """``buf``'s memory read as ``dtype`` of the same item size (a numpy view of a numpy array;
    a Buffer sharing the allocation, keeping ``buf`` alive, of a Buffer)."""
    dt = np.dtype(dtype)
    if dt.itemsize != np.dtype(buf.dtype).itemsize:
        raise ArgumentError(f"cannot read {buf.dtype} elements as {dt}: the item sizes differ")
    if isinstance(buf, np.ndarray):
        return buf.view(dt)
    if not isinstance(buf, Buffer):
        raise ArgumentTypeError(f"expected a pk.Buffer or a numpy array, got {type(buf).__name__}")
    view = object.__new__(Buffer)
    view.__dict__.update(buf.__dict__)
    view.dtype = dt
    view._base = buf  # the allocation is buf's: its finalizer frees it once neither is used
    return view


def _last_of_view(view: soa.View) -> LastQueue | None:
    owner = view.owner
    return owner.last_queue if isinstance(owner, Buffer) else None


register_holder(Buffer, operator.attrgetter("last_queue"))  # (C: no frame per launch)
register_holder(soa.View, _last_of_view)


register_buffer_type(Buffer)  # the stream check finds a view's or a collection's Buffer
