"""Awkward interop: jagged per-event records <-> a PortableCollection of all rows + event offsets.

``pk.from_awkward(Muons, events.Muon, q)`` puts every row of every event into one collection
(field ``x`` of the layout from awkward field ``x``, or through ``fields={column: field}``) and
returns it with the event offsets: ``n_events + 1`` int64 values, ``rows of event e =
offsets[e]:offsets[e + 1]``, on the same device (a numpy array on host-memory devices, a
:class:`~portable.Buffer` elsewhere). ``pk.to_awkward(coll, offsets)`` gives the jagged array back.

Copies, honestly counted (``report=`` receives the figures):

- awkward's buffers are read as numpy arrays without a copy (``ak.to_layout(...).content.data``);
  where a field already has the column's dtype nothing is converted;
- a PortableCollection is one aligned allocation with every column padded to the layout's
  alignment (CMSSW SoA), so awkward's separate buffers cannot *become* the collection: each
  column is filled with exactly one ``memcpy`` (``np.copyto``) from awkward's buffer, and on a
  device the filled host collection goes over in one more copy;
- the offsets are awkward's own int64 buffer (no copy) when they start at 0 on a host device;
- ``to_awkward`` of a host collection wraps the collection's columns without copying.

awkward is an optional extra (``pip install alpyka[data]``); this module imports it lazily.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import soa

from .._buffer import Buffer
from .._collection import PortableCollection, _convert, _field_desc
from .._device import Device, host
from .._errors import ArgumentError, ArgumentTypeError, NameNotFound
from .._memory import memcpy
from .._queue import Queue

#: what a field spec may be: one awkward field name, or one per component of a vector/matrix
FieldSpec = "str | Sequence[str]"


def require(module: str) -> Any:
    """Import an optional data dependency, or raise an ImportError naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; it comes with alpyka's data extra: pip install 'alpyka[data]' ({exc})"
        ) from exc


def _queue_device(queue_or_device: Queue | Device) -> tuple[Queue | None, Device]:
    if isinstance(queue_or_device, Queue):
        return queue_or_device, queue_or_device.device
    if isinstance(queue_or_device, Device):
        return None, queue_or_device
    raise ArgumentTypeError(f"expected a pk.Queue or pk.Device, got {type(queue_or_device).__name__}")


def _field_map(layout: type[soa.Layout], fields: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """``{column: (awkward field, ...)}`` for every non-scalar field of ``layout``."""
    fields = dict(fields or {})
    unknown = [k for k in fields if k not in layout.field_names()]
    if unknown:
        raise NameNotFound(
            f"fields mapping names columns {unknown} that {layout.__name__} does not have; "
            f"its fields are {layout.field_names()}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for f in layout.fields:
        if f.kind == "scalar":
            continue
        spec = fields.get(f.name, f.name)
        names = (spec,) if isinstance(spec, str) else tuple(spec)
        if len(names) not in (1, f.components):
            raise ArgumentError(
                f"{layout.__name__}.{f.name} ({_field_desc(f)}) takes one field or {f.components} "
                f"(one per component), got {list(names)}"
            )
        out[f.name] = names
    return out


class _Source:
    """One awkward field as (offsets or None, flat numpy values) without copies where possible."""

    def __init__(self, ak: Any, array: Any, name: str, column: str, copied: list[int]) -> None:
        try:
            sub = array[name]
        except Exception as exc:  # awkward raises FieldNotFoundError (an IndexError) or others
            avail = list(getattr(array, "fields", []) or [])
            raise NameNotFound(
                f"awkward array has no field {name!r} (for column {column!r}); its fields are {avail}: "
                f"map the column to one of them with fields={{{column!r}: field}}"
            ) from exc
        layout = self._unwrap(ak, ak.to_layout(sub), name, column)
        self.offsets: np.ndarray | None = None
        if layout.is_list and type(layout).__name__ != "RegularArray":
            if type(layout).__name__ != "ListOffsetArray":
                before = layout
                layout = layout.to_ListOffsetArray64(True)
                copied[0] += layout.offsets.data.nbytes + (
                    0 if layout.content is before.content else _nbytes(layout.content)
                )
            off = np.asarray(layout.offsets.data)
            if off.dtype != np.int64:
                off = off.astype(np.int64)
                copied[0] += off.nbytes
            content = layout.content
            start, stop = int(off[0]), int(off[-1])
            if start != 0:
                off = off - start
                copied[0] += off.nbytes
            if start != 0 or stop != content.length:
                content = content[start:stop]
            self.offsets = off
            layout = self._unwrap(ak, content, name, column)
        if layout.is_list and type(layout).__name__ != "RegularArray":
            raise ArgumentError(
                f"field {name!r} (column {column!r}) is nested more than one list deep "
                f"({ak.Array(sub).type}); a column holds one value per row: flatten it first (ak.flatten)"
            )
        if layout.is_record or layout.is_union or not (layout.is_numpy or type(layout).__name__ == "RegularArray"):
            raise ArgumentTypeError(
                f"field {name!r} (column {column!r}) is {ak.Array(sub).type}, not numbers; map the column to a "
                "numeric field (fields={column: field})"
            )
        self.values = ak.to_numpy(layout, allow_missing=False)
        self.name, self.type = name, str(ak.Array(sub).type)

    @staticmethod
    def _unwrap(ak: Any, layout: Any, name: str, column: str) -> Any:
        """``layout`` without indexed/option wrappers; missing values (None) raise."""
        while layout.is_indexed or layout.is_option:
            if layout.is_option and type(layout).__name__ != "UnmaskedArray":
                if np.asarray(ak.is_none(ak.Array(layout), axis=0)).any():
                    raise ArgumentError(
                        f"field {name!r} (column {column!r}) has missing values (None); fill them first (ak.fill_none)"
                    )
            layout = layout.content if type(layout).__name__ == "UnmaskedArray" else layout.project()
        return layout


def _nbytes(layout: Any) -> int:
    try:
        return int(layout.nbytes)
    except Exception:  # noqa: BLE001 - pragma: no cover - older awkward
        return 0


def _check_offsets(sources: dict[str, list[_Source]]) -> np.ndarray | None:
    """The one offsets array all jagged fields share; a ValueError names fields that differ."""
    ref: _Source | None = None
    flat: _Source | None = None
    for srcs in sources.values():
        for s in srcs:
            if s.offsets is None:
                flat = flat or s
                continue
            if ref is None:
                ref = s
            elif s.offsets is not ref.offsets and not np.array_equal(s.offsets, ref.offsets):
                a, b = ref.offsets, s.offsets
                if len(a) != len(b):
                    raise ArgumentError(
                        f"offsets do not match: field {ref.name!r} has {len(a) - 1} events, {s.name!r} has "
                        f"{len(b) - 1}; give fields of one array of events"
                    )
                e = int(np.argmax(np.diff(a) != np.diff(b)))
                raise ArgumentError(
                    f"offsets do not match: event {e} has {a[e + 1] - a[e]} rows in field "
                    f"{ref.name!r} but {b[e + 1] - b[e]} in {s.name!r}; fields of one collection "
                    "must have the same number of rows per event (e.g. all Muon_* branches)"
                )
    if ref is not None and flat is not None:
        raise ArgumentError(
            f"field {flat.name!r} ({flat.type}) has one value per event but {ref.name!r} "
            f"({ref.type}) is jagged; a collection's columns are all jagged or all flat: read them into two collections"
        )
    return None if ref is None else ref.offsets


def from_awkward(
    layout: type[soa.Layout],
    array: Any,
    queue_or_device: Queue | Device,
    *,
    fields: Mapping[str, Any] | None = None,
    casting: str = "same_value",
    report: dict | None = None,
) -> tuple[PortableCollection, Any]:
    """``(collection, offsets)`` from a jagged awkward array of per-event records (``var *
    {pt, eta, ...}``) or a flat one (one row per event, offsets ``0..n_events``).

    ``fields={column: field}`` maps a column to an awkward field (default: the same name); a
    vector/matrix column takes one field per component (matrix components in row-major order)
    or one field holding ``R`` (``R x C``) values per row. Scalar fields are left at 0.
    ``casting`` is :meth:`PortableCollection.from_dict`'s (default ``"same_value"``: a value the
    column's dtype cannot hold raises). ``report``, when a dict, receives the copy figures:
    ``filled_bytes`` (the one memcpy per column into the collection), ``converted_bytes``
    (temporary arrays made for dtype conversions, list re-packing or offset rebasing; 0 when
    awkward's buffers already have the layout's dtypes), ``to_device_bytes`` and
    ``offsets_shared`` (the offsets are awkward's own buffer).

    Errors: a missing field (named, with the fields there are), a dtype the casting refuses, a
    field nested deeper than one list, jagged and flat fields mixed, fields whose offsets differ.
    """
    ak = require("awkward")
    if not (isinstance(layout, type) and issubclass(layout, soa.Layout)):
        raise ArgumentTypeError(
            f"from_awkward needs a soa.Layout subclass first (the class, not an instance), got {layout!r}"
        )
    queue, device = _queue_device(queue_or_device)
    arr = array if isinstance(array, ak.Array) else ak.Array(array)
    fmap = _field_map(layout, fields)
    converted = [0]
    sources = {col: [_Source(ak, arr, name, col, converted) for name in names] for col, names in fmap.items()}
    offsets = _check_offsets(sources)
    n_events = len(arr)
    if offsets is None:
        offsets = np.arange(n_events + 1, dtype=np.int64)
        shared = False
    else:
        shared = bool(any(s.offsets is offsets for srcs in sources.values() for s in srcs) and converted[0] == 0)
    n_rows = int(offsets[-1]) if len(offsets) else 0
    target = queue_or_device if device.is_host_memory else host()
    coll = PortableCollection(layout, n_rows, target)
    view = coll.view()
    filled = 0
    for col, srcs in sources.items():
        f = layout.field(col)
        dst = getattr(view, col)
        what = f"from_awkward for {layout.__name__}: column {col!r} ({_field_desc(f)}) from field"
        if len(srcs) == 1:
            vals = srcs[0].values
            if vals.shape[1:] != tuple(f.shape):
                raise ArgumentError(
                    f"{what} {srcs[0].name!r}: its rows hold shape {vals.shape[1:]}, the column needs "
                    f"{tuple(f.shape)}" + (" (a jagged field for a flat column?)" if f.kind == "column" else "")
                )
            filled += _fill(dst, vals, f.dtype, casting, f"{what} {srcs[0].name!r}", converted)
        else:
            comps = [np.unravel_index(k, f.shape) for k in range(f.components)]
            for s, idx in zip(srcs, comps):
                if s.values.ndim != 1:
                    raise ArgumentError(
                        f"{what} {s.name!r}: one value per row expected (one field per component), got rows of "
                        f"shape {s.values.shape[1:]}; map the column to one field of that shape instead"
                    )
                filled += _fill(
                    dst[(slice(None),) + tuple(int(i) for i in idx)],
                    s.values,
                    f.dtype,
                    casting,
                    f"{what} {s.name!r}",
                    converted,
                )
    to_dev = 0
    if device.is_host_memory:
        out_coll, out_off = coll, offsets
    else:
        q = queue if queue is not None else Queue(device, blocking=True)
        out_coll = coll.to(device, q)
        out_off = Buffer(device, (len(offsets),), np.int64, queue=q)
        offsets = np.ascontiguousarray(offsets)
        memcpy(q, out_off, offsets)
        to_dev = coll.nbytes + offsets.nbytes
        shared = False
        # the host staging arrays stay alive in the enqueued copies' MemRef owners
    if report is not None:
        report.update(
            events=n_events,
            rows=n_rows,
            filled_bytes=filled,
            converted_bytes=converted[0],
            to_device_bytes=to_dev,
            offsets_shared=shared,
        )
    return out_coll, out_off


def _fill(dst: np.ndarray, values: np.ndarray, dtype: np.dtype, casting: str, what: str, converted: list[int]) -> int:
    """One copy of ``values`` into the column ``dst``, converted (and counted) only when needed."""
    if len(values) != len(dst):
        raise ArgumentError(
            f"{what}: {len(values)} rows, the collection has {len(dst)}; give fields of one array of events"
        )
    if values.dtype != dtype:
        values = _convert(values, dtype, casting, values, what)
        converted[0] += values.nbytes
    np.copyto(dst, values, casting="no")
    return values.nbytes


def offsets_to_host(offsets: Any, queue: Queue | None = None) -> np.ndarray:
    """The offsets as a host numpy array (a copy only when they live on a device). ``queue``:
    the queue that filled them (``from_awkward``'s, asynchronous): the copy is ordered after it."""
    if isinstance(offsets, Buffer) and not offsets.device.is_host_memory:
        out = np.empty(offsets.shape, offsets.dtype)
        q = queue if queue is not None else Queue(offsets.device, blocking=True)
        memcpy(q, out, offsets)
        q.wait()
        return out
    if queue is not None:
        queue.wait()
    return np.asarray(offsets)


def check_offsets(offsets: np.ndarray, n_rows: int, what: str = "offsets") -> np.ndarray:
    """Raise a ValueError unless ``offsets`` are 1D int64-compatible, start at 0, never decrease and
    end at ``n_rows``; returns them as int64."""
    off = np.asarray(offsets)
    if off.ndim != 1 or len(off) < 1 or off.dtype.kind not in "iu":
        raise ArgumentError(
            f"{what} must be a 1D integer array of n_events + 1 values, got shape {off.shape} {off.dtype}"
        )
    if off[0] != 0 or off[-1] != n_rows:
        raise ArgumentError(
            f"{what} do not match the collection: they run from {off[0]} to {off[-1]}, the "
            f"collection has {n_rows} rows (offsets must start at 0 and end at its size)"
        )
    down = off[1:] < off[:-1]  # not np.diff: it wraps around on unsigned integers
    if down.any():
        e = int(np.argmax(down))
        raise ArgumentError(f"{what} decrease at event {e} ({off[e]} -> {off[e + 1]}); they must never decrease")
    return off.astype(np.int64, copy=False)


def to_awkward(
    coll: PortableCollection,
    offsets: Any = None,
    *,
    fields: Mapping[str, Any] | None = None,
    queue: Queue | None = None,
) -> Any:
    """The jagged awkward array (``n_events * var * {column, ...}``) of ``coll``'s rows split by
    ``offsets`` (None: a flat array, one record per row). On a host-memory device the record's
    fields are the collection's own columns (no copy; the array keeps the collection alive);
    elsewhere the collection is copied to the host first (on ``queue``). ``fields`` renames
    columns as in :func:`from_awkward` (a vector mapped to several names becomes that many fields).
    Scalar fields are not part of the array."""
    ak = require("awkward")
    if not isinstance(coll, PortableCollection):
        raise ArgumentTypeError(f"to_awkward needs a PortableCollection, got {type(coll).__name__}")
    src = coll
    if not coll.device.is_host_memory:
        q = queue if queue is not None else Queue(coll.device, blocking=True)
        src = coll.to_host(q)
        q.wait()
    layout, view = src.layout, src.view()
    names, contents = [], []
    for col, fnames in _field_map(layout, fields).items():
        f = layout.field(col)
        arr = getattr(view, col)
        if len(fnames) == 1:
            names.append(fnames[0])
            contents.append(_numpy_content(ak, arr))
        else:
            for k, fname in enumerate(fnames):
                idx = tuple(int(i) for i in np.unravel_index(k, f.shape))
                names.append(fname)
                contents.append(_numpy_content(ak, arr[(slice(None),) + idx]))
    record = ak.contents.RecordArray(contents, names, length=src.size)
    if offsets is None:
        return ak.Array(record)
    off = check_offsets(offsets_to_host(offsets, queue), src.size)
    return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(off), record))


def _numpy_content(ak: Any, arr: np.ndarray) -> Any:
    """An awkward NumpyArray onto ``arr`` (vector/matrix rows become regular inner dimensions)."""
    if arr.ndim == 1 or arr.flags.c_contiguous:
        return ak.contents.NumpyArray(arr)
    # a vector's components are separate padded columns: rows are strided, which awkward keeps
    # as a RegularArray over a copy in row order (the only copy to_awkward makes on the host)
    flat = np.ascontiguousarray(arr).reshape(len(arr), -1)
    content: Any = ak.contents.NumpyArray(flat.reshape(-1))
    for size in reversed(arr.shape[1:]):
        content = ak.contents.RegularArray(content, size, zeros_length=len(arr))
    return content
