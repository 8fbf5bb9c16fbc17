"""``memcpy`` and ``memset``: queue-ordered copies and fills of buffers, collections and arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._allocator import MemRef
from ._buffer import Buffer
from ._device import host
from ._errors import ArgumentError, ArgumentTypeError, DeviceMismatch
from ._graph import active as _capturing
from ._graph import record_copy, record_fill
from ._handoff import note_queue
from ._queue import Queue
from ._streamcheck import active as _stream_active
from ._streamcheck import note_copy


def as_memref(obj: Any, what: str, writable: bool = False) -> MemRef:
    """The memory behind a Buffer, a span of one (``buffer.memref(offset, nbytes)``), a
    PortableCollection (anything with ``memref()``, one layer up) or a contiguous numpy array."""
    if isinstance(obj, MemRef):
        return obj
    if isinstance(obj, Buffer) or callable(getattr(type(obj), "memref", None)):
        return obj.memref()
    if isinstance(obj, np.ndarray):
        flags = obj.flags
        if not flags.c_contiguous:
            raise ArgumentError(
                f"memcpy {what}: numpy array must be C-contiguous (memcpy copies its bytes in order); "
                + (
                    "copy into tmp = np.empty(arr.shape, arr.dtype), then arr[...] = tmp"
                    if writable
                    else "pass np.ascontiguousarray(arr)"
                )
            )
        if writable and not flags.writeable:
            raise ArgumentError(f"memcpy {what}: numpy array is read-only; copy into a writable array (arr.copy())")
        flat = obj if obj.ndim == 1 else obj.reshape(-1)
        return MemRef(host(), flat.view(np.uint8), 0, obj.nbytes, owner=obj)
    got = type(obj).__name__
    raise ArgumentTypeError(f"memcpy {what}: expected a pk.Buffer, PortableCollection or numpy array, got {got}")


def _check_queue_access(queue: Queue, ref: MemRef, what: str) -> None:
    if queue.device.can_access(ref.device) or ref.device.is_host_memory:
        return
    raise DeviceMismatch(f"{what} is memory of {ref.device}; it cannot be used on a queue of {queue.device}")


def _typed_dtype(obj: Any) -> np.dtype | None:
    """The element type of a Buffer or a numpy array (None for untyped memory)."""
    return obj.dtype if isinstance(obj, (Buffer, np.ndarray)) else None  # (np.dtype both)


def _check_byte_order(dst: Any, src: Any) -> None:
    """ValueError when one side holds values of a non-native byte order (``>f4`` from a FITS,
    HDF5 or ROOT file) and the other is not of that same dtype: a byte copy does not convert
    them (1.5 as ``>f4`` would read as 6.9e-41 in a float32 buffer)."""
    dt, st = _typed_dtype(dst), _typed_dtype(src)
    if (dt is None or dt.isnative) and (st is None or st.isnative):
        return  # (the common case, without the loop)
    for side, t, other in (("source", st, dt), ("destination", dt, st)):
        if t is not None and not t.isnative and t != other:
            theirs = f"holds {other}" if other is not None else "is untyped memory"
            raise ArgumentError(
                f"memcpy: the {side} holds {t.str} values, not in this machine's byte order, and the other side "
                f"{theirs}: a byte copy would not convert them; convert the array first, e.g. "
                f"arr.astype(arr.dtype.newbyteorder('='))"
            )


def memcpy(queue: Queue, dst: Any, src: Any) -> None:
    """Enqueue a copy of all of ``src`` into ``dst`` (same byte size; for collections, the same
    layout and size; ``buffer.memref(offset, nbytes)`` copies a byte span). Either side may be
    host memory; the other must belong to the queue's device."""
    if not isinstance(queue, Queue):
        raise ArgumentTypeError(f"memcpy needs a pk.Queue first, got {type(queue).__name__}")
    if type(dst) is type(src) and hasattr(dst, "check_same_shape"):  # two collections
        dst.check_same_shape(src)
    _check_byte_order(dst, src)
    d, s = as_memref(dst, "destination", writable=True), as_memref(src, "source")
    if d.nbytes != s.nbytes:
        raise ArgumentError(
            f"memcpy: destination has {d.nbytes} bytes, source has {s.nbytes}; memcpy copies bytes, so "
            f"both sides need the same number of elements and item size (copy a slice, or convert the dtype first)"
        )
    _check_queue_access(queue, d, "the destination")
    _check_queue_access(queue, s, "the source")
    if d.nbytes:
        if _capturing and record_copy(queue, d, s):  # inside pk.capture (portable/_graph.py)
            return
        if _stream_active(queue):  # the "stream" check (portable/_streamcheck.py)
            note_copy(queue, d, s, "pk.memcpy")
        queue.device.backend.copy(queue, d, s)
        note_queue(queue, (d.owner, s.owner))  # interchange consumers wait for this queue


def memset(queue: Queue, dst: Any, value: int) -> None:
    """Enqueue setting every byte of ``dst`` to ``value`` (0..255)."""
    if not isinstance(queue, Queue):
        raise ArgumentTypeError(f"memset needs a pk.Queue first, got {type(queue).__name__}")
    if not isinstance(value, (int, np.integer)) or not 0 <= value <= 255:
        raise ArgumentError(
            f"memset value is a byte (0..255), got {value!r}; memset sets every byte (0 zeroes any dtype): "
            f"fill elements with other values by a kernel or a memcpy from numpy"
        )
    d = as_memref(dst, "destination", writable=True)
    _check_queue_access(queue, d, "the destination")
    if d.nbytes:
        if _capturing and record_fill(queue, d, int(value)):  # inside pk.capture (portable/_graph.py)
            return
        if _stream_active(queue):
            note_copy(queue, d, None, "pk.memset")
        queue.device.backend.fill(queue, d, int(value))
        note_queue(queue, (d.owner,))
