"""PortableCollection: SoA data of one or several layouts in one aligned buffer of one device."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import soa

from ._alloc_limits import allocation_limit, human_bytes
from ._allocator import MemRef
from ._buffer import Buffer
from ._device import Device, host
from ._errors import ArgumentError, ArgumentTypeError, BufferTooLarge, NameNotFound
from ._handoff import register_holder
from ._memory import memcpy, memset
from ._queue import Queue

_BUFFER_ALIGNMENT = 128


def _normalise(layout: Any, size: Any) -> list[tuple[str, type[soa.Layout], int]]:
    """``[(name, layout, n), ...]`` from a layout and a size, or sequences/dicts of them."""
    if isinstance(layout, type) and issubclass(layout, soa.Layout):
        return [(layout.__name__, layout, soa.checked_size(size, f"size of {layout.__name__} collection"))]
    if isinstance(layout, Mapping):
        names, layouts = list(layout.keys()), list(layout.values())
        if not isinstance(size, Mapping) or set(size) != set(names):
            raise ArgumentError(f"sizes of a multi-layout collection must be a dict with keys {names}")
        sizes = [size[k] for k in names]
    elif isinstance(layout, Sequence) and not isinstance(layout, str):
        layouts = list(layout)
        names = [getattr(lay, "__name__", str(lay)) for lay in layouts]
        if isinstance(size, (int, np.integer)) or len(size) != len(layouts):
            raise ArgumentError(f"a collection of {len(layouts)} layouts needs {len(layouts)} sizes, got {size!r}")
        sizes = list(size)
        if len(set(names)) != len(names):
            raise ArgumentError("layouts of a multi-layout collection must differ; pass a dict to name them")
    else:
        raise ArgumentTypeError(f"PortableCollection needs a soa.Layout subclass (or several), got {layout!r}")
    out = []
    for name, lay, n in zip(names, layouts, sizes):
        if not (isinstance(lay, type) and issubclass(lay, soa.Layout)):
            raise ArgumentTypeError(f"block {name!r}: {lay!r} is not a soa.Layout subclass")
        out.append((str(name), lay, soa.checked_size(n, f"size of block {name!r}")))
    if not out:
        raise ArgumentError("a collection needs at least one layout")
    return out


class PortableCollection:
    """``PortableCollection(Layout, n, queue_or_device)``: ``n`` elements of ``Layout`` in one
    buffer of the device (of the queue, which then orders the allocation).

    Several layouts in one buffer (CMSSW SoABlocks): ``PortableCollection([Hits, Tracks],
    [n_hits, n_tracks], q)`` or a dict ``{"hits": Hits, ...}`` with a dict of sizes; select a
    block with ``coll.view("hits")`` or ``coll["hits"]``. On host-memory devices the fields are
    numpy arrays onto the buffer: ``coll.x`` is ``coll.view().x``.
    """

    def __init__(self, layout: Any, size: Any, queue_or_device: Queue | Device, *, pinned: bool = False) -> None:
        if isinstance(queue_or_device, Queue):
            queue, device = queue_or_device, queue_or_device.device
        elif isinstance(queue_or_device, Device):
            queue, device = None, queue_or_device
        else:
            raise ArgumentTypeError(
                f"PortableCollection needs a pk.Queue or pk.Device, got {type(queue_or_device).__name__}"
            )
        self._blocks = _normalise(layout, size)
        offsets, total = soa.block_offsets([(lay, n) for _, lay, n in self._blocks])
        self._offsets = offsets
        self.nbytes = total
        self.device = device
        _check_allocation(device, total, self._blocks, pinned)
        align = max([_BUFFER_ALIGNMENT] + [lay.alignment for _, lay, _ in self._blocks])
        self.buffer = Buffer(device, (total,), np.uint8, pinned=pinned, queue=queue, alignment=align)
        for (_, lay, _), off in zip(self._blocks, offsets):
            if self.buffer.ptr:
                lay.check_alignment(self.buffer.ptr + off)
        self._views: dict[tuple[int, bool], soa.View] = {}

    # ------------------------------------------------------------------ description
    @property
    def layout(self) -> type[soa.Layout]:
        """The layout (of the only block; use ``layouts`` for multi-layout collections)."""
        return self._single()[1]

    @property
    def size(self) -> int:
        """Number of elements (of the only block; ``sizes`` for multi-layout collections)."""
        return self._single()[2]

    @property
    def layouts(self) -> dict[str, type[soa.Layout]]:
        return {name: lay for name, lay, _ in self._blocks}

    @property
    def sizes(self) -> dict[str, int]:
        return {name: n for name, _, n in self._blocks}

    @property
    def block_names(self) -> list[str]:
        return [name for name, _, _ in self._blocks]

    def _single(self) -> tuple[str, type[soa.Layout], int]:
        if len(self._blocks) != 1:
            raise ArgumentError(f"this collection holds blocks {self.block_names}; name one")
        return self._blocks[0]

    def _index(self, which: Any) -> int:
        if which is None:
            self._single()
            return 0
        for i, (name, lay, _) in enumerate(self._blocks):
            if which == name or which is lay or which == i:
                return i
        raise NameNotFound(
            f"collection has no block {which!r}; its blocks are {self.block_names}: name one, its layout or its index"
        )

    def block_offset(self, which: Any = None) -> int:
        """Byte offset of a block inside the buffer."""
        return self._offsets[self._index(which)]

    # ------------------------------------------------------------------ views
    def view(self, which: Any = None) -> soa.View:
        """The (mutable) view of a block: the kernel argument and, on the host, numpy columns."""
        return self._view(self._index(which), False)

    def const_view(self, which: Any = None) -> soa.View:
        """A read-only view of a block."""
        return self._view(self._index(which), True)

    def _view(self, i: int, const: bool) -> soa.View:
        key = (i, const)
        v = self._views.get(key)
        if v is None:
            _, lay, n = self._blocks[i]
            make = self.device.backend.array_factory(self.buffer, const)
            v = soa.View(
                lay,
                n,
                self.buffer.handle,
                make,
                offset=self._offsets[i],
                const=const,
                device=self.device,
                owner=self.buffer,
            )
            self._views[key] = v
        return v

    def __getitem__(self, which: Any) -> soa.View:
        return self.view(which)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if len(self._blocks) == 1 and name in self._blocks[0][1].field_names():
            return getattr(self.view(), name)
        fields = [f"{lay.__name__}: {lay.field_names()}" for _, lay, _ in self._blocks]
        held = [i for i, (_, lay, _) in enumerate(self._blocks) if name in lay.field_names()]
        if len(fields) == 1:
            where = f"its field(s) are {fields[0].split(': ', 1)[1]}"
        elif held:
            i = held[0]
            where = (
                f"a collection of {len(fields)} blocks has no fields of its own: block {i} has it, "
                f"coll[{i}].{name} or coll.view({i}).{name}"
            )
        else:
            where = f"no block of this collection of {len(fields)} has it ({'; '.join(fields)})"
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}; {where}")

    # ------------------------------------------------------------------ interchange (bytes of the buffer)
    # ordered after the work enqueued on the collection, as the buffer's (portable/_buffer.py)
    @property
    def __cuda_array_interface__(self) -> dict:
        return self.buffer.__cuda_array_interface__

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        return self.buffer.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buffer.__dlpack_device__()

    # ------------------------------------------------------------------ data movement
    def memref(self) -> MemRef:
        """All of the collection's bytes (what ``pk.memcpy`` / ``pk.memset`` copy or fill)."""
        return self.buffer.memref(0, self.nbytes)

    def check_same_shape(self, other: PortableCollection) -> None:
        """Raise unless ``other`` has the same layouts and sizes (a copy between them is exact)."""
        mine = [(lay, n) for _, lay, n in self._blocks]
        theirs = [(lay, n) for _, lay, n in other._blocks]
        if mine != theirs:

            def desc(bs: list) -> str:
                return ", ".join(f"{lay.__name__}[{n}]" for lay, n in bs)

            raise ArgumentError(f"collections differ in layout or size: {desc(mine)} vs {desc(theirs)}")

    def zero(self, queue: Queue | None = None) -> PortableCollection:
        """Enqueue setting every byte to 0 (on ``queue``, or synchronously when None)."""
        q = queue if queue is not None else Queue(self.device, blocking=True)
        memset(q, self, 0)
        return self

    def _like(self, target: Queue | Device, pinned: bool = False) -> PortableCollection:
        blocks = {name: lay for name, lay, _ in self._blocks}
        sizes = {name: n for name, _, n in self._blocks}
        if len(self._blocks) == 1:
            return PortableCollection(self.layout, self.size, target, pinned=pinned)
        return PortableCollection(blocks, sizes, target, pinned=pinned)

    def to(self, device: Device, queue: Queue) -> PortableCollection:
        """A copy on ``device``, enqueued on ``queue`` (asynchronous: wait before reading)."""
        target = queue if queue.device is device else device
        out = self._like(target)
        memcpy(queue, out, self)
        return out

    def to_host(self, queue: Queue) -> PortableCollection:
        """A host copy (pinned when the source is GPU memory), enqueued on ``queue``."""
        h = host()
        out = self._like(h, pinned=not self.device.is_host_memory)
        memcpy(queue, out, self)
        return out

    def to_dict(self, queue: Queue | None = None, which: Any = None) -> dict[str, np.ndarray]:
        """Copies of every field of a block as numpy arrays (waits for ``queue`` first)."""
        src = self if self.device.is_host_memory else self.to_host(queue or Queue(self.device, blocking=True))
        if queue is not None:
            queue.wait()
        return src.view(which).to_dict()

    @classmethod
    def from_dict(
        cls,
        layout: type[soa.Layout],
        data: Mapping[str, Any],
        queue_or_device: Queue | Device,
        *,
        casting: str = "same_value",
    ) -> PortableCollection:
        """A collection of ``layout`` filled from ``{field: values}``; every field must be given,
        columns (vectors, matrices) as arrays of the same length n, scalar fields as one value.
        The copy to a device is enqueued on the queue.

        ``casting`` says which conversions to the fields' dtypes are allowed:

        - ``"same_value"`` (default): every value must be representable in the field's dtype:
          integers (Python ints, integer arrays) within its range, and into a float field only
          where it holds them exactly (int64 16777217 into float32, which would make it
          16777216.0, is refused: convert explicitly, ``np.asarray(values, dtype=np.float32)``, to
          accept the rounding), floats going to an integer field only when they are finite whole
          numbers in range, bools from bools or 0/1, no complex into a real field, no finite value
          that overflows to inf. float64 into float32 rounds to the nearest float32, as numpy's
          ``same_kind`` does (numpy 2.4's ``same_value`` refuses it): a float is a rounded value
          already, and its nearest float32 is what a float32 column is for; an integer is exact.
        - ``"no"``, ``"equiv"``, ``"safe"``, ``"same_kind"``: numpy's rules on the dtypes
          (``np.can_cast``) for numpy arrays and scalars; Python numbers and lists are checked by
          value as with ``"same_value"`` (their dtype is numpy's guess, not a choice).
        - ``"unsafe"``: anything numpy's ``astype`` does (wrap-around, truncation...).

        Errors name the field and what was wrong (TypeError for values of the wrong kind,
        ValueError for a wrong shape or a value that does not fit).
        """
        if casting not in _CASTINGS:
            raise ArgumentError(f"from_dict: casting must be one of {', '.join(map(repr, _CASTINGS))}, got {casting!r}")
        names = layout.field_names()
        missing = [k for k in names if k not in data]
        extra = [k for k in data if k not in names]
        if missing or extra:
            raise NameNotFound(
                f"from_dict for {layout.__name__}: missing fields {missing}, unknown fields {extra}; "
                f"give exactly the layout's fields {names}"
            )
        arrays = {k: _as_array(layout, k, data[k]) for k in names}
        lengths = {}
        for k in names:
            f = layout.field(k)
            if f.kind == "scalar":
                continue
            if arrays[k].ndim == 0:
                raise ArgumentError(
                    f"from_dict for {layout.__name__}: field {k!r} ({_field_desc(f)}) got a "
                    f"scalar {_plain(data[k])!r}; it needs an array of shape (n{_comp_shape(f)}), one "
                    "row per element"
                )
            lengths[k] = len(arrays[k])
        if len(set(lengths.values())) > 1:
            raise ArgumentError(f"from_dict for {layout.__name__}: columns differ in length: {lengths}")
        n = next(iter(lengths.values()), 0)
        device = queue_or_device.device if isinstance(queue_or_device, Queue) else queue_or_device
        converted = {}
        for k in names:
            f = layout.field(k)
            shape = (n,) + tuple(f.shape) if f.kind != "scalar" else ()
            arr = arrays[k]
            if arr.shape != shape:
                raise ArgumentError(
                    f"from_dict for {layout.__name__}: field {k!r} ({_field_desc(f)}) has shape "
                    f"{arr.shape}, the layout needs {shape}"
                )
            converted[k] = _convert(
                arr, f.dtype, casting, data[k], f"from_dict for {layout.__name__}: field {k!r} ({_field_desc(f)})"
            )
        host_coll = cls(layout, n, queue_or_device if device.is_host_memory else _host_device())
        v = host_coll.view()
        for k in names:
            getattr(v, k)[...] = converted[k]
        if device.is_host_memory:
            return host_coll
        q = queue_or_device if isinstance(queue_or_device, Queue) else Queue(device, blocking=True)
        return host_coll.to(device, q)

    def __repr__(self) -> str:
        blocks = ", ".join(f"{lay.__name__}[{n}]" for _, lay, n in self._blocks)
        return f"<PortableCollection {blocks} on {self.device}, {self.nbytes} bytes>"


register_holder(PortableCollection, operator.attrgetter("buffer.last_queue"))  # kernel arguments: note the last queue


def _host_device() -> Device:
    return host()


# ---------------------------------------------------------------------- allocation size checks
class CollectionTooLarge(BufferTooLarge):
    """A collection whose bytes cannot fit the device (a ``pk.BufferTooLarge``: an
    ``pk.OutOfMemory``, so a MemoryError, and a ValueError)."""


def _check_allocation(device: Device, nbytes: int, blocks: list, pinned: bool = False) -> None:
    """Refuse (before allocating) a collection larger than the device can hold in one buffer."""
    what = ", ".join(f"{lay.__name__}[{n}]" for _, lay, n in blocks)
    if nbytes > 2**63 - 1:
        raise CollectionTooLarge(
            f"PortableCollection {what} needs {nbytes} bytes ({human_bytes(nbytes)}), more "
            "than any device can address (2**63 - 1 bytes); use fewer elements"
        )
    where = "pinned host memory" if pinned else str(device)
    limit = allocation_limit(_host_device() if pinned else device)
    if limit is not None and nbytes > limit[0]:
        raise CollectionTooLarge(
            f"PortableCollection {what} needs {nbytes} bytes ({human_bytes(nbytes)}); {where} allows "
            f"at most {limit[0]} bytes ({human_bytes(limit[0])}) {limit[1]}; use fewer elements "
            "or split the data into several collections"
        )


# ---------------------------------------------------------------------- from_dict conversions
#: numpy's casting names, and the default that checks values
_CASTINGS = ("same_value", "no", "equiv", "safe", "same_kind", "unsafe")


def _field_desc(f: Any) -> str:
    shape = f"[{'x'.join(map(str, f.shape))}]" if f.shape else ""
    return f"{f.dtype} {f.kind}{shape}"


def _comp_shape(f: Any) -> str:
    return "".join(f", {c}" for c in f.shape) if f.shape else ","


def _as_array(layout: type[soa.Layout], name: str, value: Any) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        f = layout.field(name)
        raise ArgumentError(
            f"from_dict for {layout.__name__}: field {name!r} ({_field_desc(f)}): cannot make a "
            f"numpy array of the {type(value).__name__} given ({exc})"
        ) from None


def _kind_name(dt: np.dtype) -> str:
    return {
        "U": "strings",
        "S": "byte strings",
        "O": "Python objects",
        "V": "raw records",
        "M": "datetimes",
        "m": "timedeltas",
    }.get(dt.kind, str(dt))


def _first(values: np.ndarray, mask: np.ndarray) -> Any:
    """The first value of ``values`` where ``mask`` holds (for messages)."""
    return values[mask].flat[0].item()


def _plain(x: Any) -> Any:
    """A numpy scalar as the Python value it holds (for messages: numpy 2's repr of ``np.str_('a')``
    is ``np.str_('a')``, not ``'a'``); anything else as it is."""
    return x.item() if isinstance(x, np.generic) else x


def _from_objects(arr: np.ndarray, dt: np.dtype, what: str) -> np.ndarray:
    """A numeric array from an object array (Python ints beyond int64, mixed numbers)."""
    items = arr.ravel().tolist()
    for x in items:
        if isinstance(x, (bool, int, float, complex, np.number, np.bool_)):
            continue
        raise ArgumentTypeError(
            f"{what} got a non-numeric value {_plain(x)!r} ({type(x).__name__}); it holds {dt} numbers"
        )
    if all(isinstance(x, (int, np.integer, np.bool_)) for x in items):
        if dt.kind in "iu":
            info = np.iinfo(dt)
            for x in items:
                if not info.min <= int(x) <= info.max:
                    raise ArgumentError(
                        f"{what}: value {int(x)} is out of range for {dt} [{info.min}, {info.max}]; "
                        "pass casting='unsafe' to wrap around"
                    )
            return np.array([int(x) for x in items], dtype=dt).reshape(arr.shape)
        try:
            floats = [float(x) for x in items]
        except OverflowError:
            big = max((int(x) for x in items), key=abs)
            raise ArgumentError(f"{what}: value {big} is too large for {dt}") from None
        with np.errstate(over="ignore"):  # (a value that overflows dt: refused where it is checked)
            cast = np.array(floats, dtype=np.float64).astype(dt).ravel().tolist()
        for x, y in zip(items, cast):
            y = y.real if isinstance(y, complex) else y
            if math.isfinite(y) and int(y) != int(x):
                raise ArgumentError(_inexact(what, int(x), y, dt))
        return np.array(floats, dtype=np.float64).reshape(arr.shape)
    out = np.array(items).reshape(arr.shape)
    if out.dtype.kind not in "biufc":
        raise ArgumentTypeError(f"{what} got values numpy cannot hold as numbers; it holds {dt} numbers")
    return out


def _value_checked(arr: np.ndarray, dt: np.dtype, what: str) -> np.ndarray:
    """``arr`` as ``dt`` when every value is representable there (see ``from_dict``)."""
    src = arr.dtype
    if src == dt or arr.size == 0:
        return arr.astype(dt)
    sk, tk = src.kind, dt.kind
    if sk == "c" and tk != "c":
        raise ArgumentTypeError(
            f"{what} got complex values ({src}); a real field would lose the imaginary part "
            "(pass the real part, .real, or casting='unsafe')"
        )
    if tk == "b":
        if sk != "b":
            bad = (arr != 0) & (arr != 1)
            if bad.any():
                raise ArgumentError(f"{what}: value {_first(arr, bad)} is not a bool (0 or 1)")
        return arr.astype(dt)
    if tk in "iu":
        info = np.iinfo(dt)
        if sk in "iu" and not np.can_cast(src, dt, "safe"):
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise ArgumentError(
                    f"{what}: value {bad} is out of range for {dt} [{info.min}, {info.max}]; "
                    "pass casting='unsafe' to wrap around"
                )
        elif sk == "f":
            finite = np.isfinite(arr)
            if not finite.all():
                raise ArgumentError(f"{what}: value {_first(arr, ~finite)} is not a finite number; {dt} holds integers")
            frac = arr != np.trunc(arr)
            if frac.any():
                raise ArgumentError(
                    f"{what}: value {_first(arr, frac)} is not a whole number; {dt} holds integers "
                    "(round it first, or pass casting='unsafe' to truncate)"
                )
            lo_lim = float(info.min)  # 0 or -2**(bits-1): exact in every float type
            hi_lim = 2.0 ** (dt.itemsize * 8 - (1 if tk == "i" else 0))  # first value out of range
            out = (arr < lo_lim) | (arr >= hi_lim)
            if out.any():
                raise ArgumentError(
                    f"{what}: value {_first(arr, out)} is out of range for {dt} [{info.min}, {info.max}]"
                )
        return arr.astype(dt)
    # float and complex fields: a finite value must stay finite
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dt)
    if sk in "fc":
        overflow = np.isfinite(arr) & ~np.isfinite(out)
    else:
        overflow = ~np.isfinite(out)
    if overflow.any():
        raise ArgumentError(
            f"{what}: value {_first(arr, overflow)} overflows {dt} (largest finite value {np.finfo(dt).max})"
        )
    if sk in "iu":
        _check_exact_ints(arr, out, dt, what)
    return out


def _check_exact_ints(arr: np.ndarray, out: np.ndarray, dt: np.dtype, what: str) -> None:
    """Refuse an integer of ``arr`` that its float conversion ``out`` (to ``dt``) changed: every
    integer up to 2**(mantissa bits + 1) is exact (float32: 16777216), a larger one only where
    ``dt`` holds it (int64 16777217 -> float32 16777216.0 is refused)."""
    exact = 2 ** (np.finfo(dt).nmant + 1)
    if int(arr.min()) >= -exact and int(arr.max()) <= exact:
        return
    back, info = out.real, np.iinfo(arr.dtype)
    inside = (back >= float(info.min)) & (back < 2.0 ** (8 * arr.dtype.itemsize - (arr.dtype.kind == "i")))
    changed = ~inside  # (a float at 2**63 is no int64: a value next to the top, rounded up)
    changed[inside] = back[inside].astype(arr.dtype) != arr[inside]
    if changed.any():
        first = int(np.argmax(changed.ravel()))
        raise ArgumentError(_inexact(what, int(arr.flat[first]), back.flat[first].item(), dt))


def _inexact(what: str, value: int, became: float, dt: np.dtype) -> str:
    return (
        f"{what}: integer {value} is not exactly representable in {dt} (it would become {became!r}); "
        f"convert explicitly to accept the rounding (np.asarray(values, dtype=np.{dt})), or pass "
        "casting='unsafe'"
    )


def _convert(arr: np.ndarray, dt: np.dtype, casting: str, raw: Any, what: str) -> np.ndarray:
    """``arr`` converted to the field dtype ``dt`` under ``casting`` (see ``from_dict``)."""
    src = arr.dtype
    weak = not isinstance(raw, (np.ndarray, np.generic))  # Python numbers and lists: numpy's guess
    if casting == "unsafe":
        try:
            with np.errstate(all="ignore"):
                return arr.astype(dt)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ArgumentTypeError(f"{what}: cannot convert {_kind_name(src)} to {dt} ({exc})") from None
    if src.kind == "O":
        arr = _from_objects(arr, dt, what)
        weak = True
    elif src.kind not in "biufc":
        sample = _plain(arr.flat[0]) if arr.size else ""
        raise ArgumentTypeError(f"{what} got {_kind_name(src)} (dtype {src}, e.g. {sample!r}); it holds {dt} numbers")
    if casting != "same_value" and not weak:
        if not np.can_cast(src, dt, casting):
            raise ArgumentTypeError(
                f"{what}: cannot cast {src} to {dt} with casting={casting!r} (numpy's rule); "
                "convert the values first or pass another casting"
            )
        with np.errstate(all="ignore"):
            return arr.astype(dt)
    return _value_checked(arr, dt, what)
