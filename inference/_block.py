"""Block geometry: the shape and element strides of a group of SoA columns seen as one tensor.

The rules are PyTorchAlpaka's (CMSSW ``PhysicsTools/PyTorchAlpaka``), with
``padded = round_up(n, alignment / itemsize)`` elements per padded column:

- k plain columns: shape ``[n, k]``, strides ``[1, padded]``;
- k vectors of R components: ``[n, k, R]``, strides ``[1, R*padded, padded]``; k = 1 gives ``[n, R]``;
- k matrices R x C (components column-major): ``[n, k, R, C]``, strides
  ``[1, R*C*padded, padded, R*padded]``; k = 1 gives ``[n, R, C]``;
- k scalars: ``[n, k]`` with stride 0 on the batch axis (a broadcast), ``slot`` between scalars.

``rows_per_item=R`` groups R consecutive rows into one item of the model's batch axis (a
collection of one row per candidate read by a per-event model): the batch axis ``[n]`` at stride
1 becomes ``[n / R, R]`` at strides ``[R, 1]``, the other axes unchanged (k plain columns:
``[n / R, R, k]``, strides ``[R, 1, padded]``). A view, never a copy; scalars cannot be grouped.

Columns of one block share their dtype, kind and component shape and are adjacent in the
layout. Nothing here touches torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import soa
from portable import ArgumentError, ArgumentTypeError, NameNotFound


@dataclass(frozen=True)
class Block:
    """One tensor's worth of adjacent SoA columns.

    ``shape`` has the batch axis first; ``strides`` are in elements; ``offset`` is the byte
    offset of the block's first element inside the collection's buffer; ``span`` is the
    ``(start, stop)`` byte range of the buffer the block's columns occupy (padding included).
    """

    name: str
    columns: tuple[str, ...]
    kind: str  # "column", "vector", "matrix" or "scalar"
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    span: tuple[int, int]
    alignment: int  # the layout's byte alignment
    rows_per_item: int = 1  # collection rows per item of the batch axis (see the module doc)

    @property
    def size(self) -> int:
        """Number of items on the batch axis (n, or n / rows_per_item)."""
        return self.shape[0]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def batch_multiple(self) -> int:
        """Mini-batch sizes (in items) must be multiples of this to keep every mini-batch aligned:
        its rows, ``size * rows_per_item``, a multiple of alignment / itemsize."""
        per_line = max(1, self.alignment // self.itemsize)
        return per_line // math.gcd(per_line, self.rows_per_item)

    @property
    def byte_strides(self) -> tuple[int, ...]:
        return tuple(s * self.itemsize for s in self.strides)

    def __repr__(self) -> str:
        cols = ", ".join(self.columns)
        return (
            f"<Block {self.name!r} [{cols}] {self.kind} {self.dtype} shape={list(self.shape)} "
            f"strides={list(self.strides)}>"
        )


def _check_columns(layout: type[soa.Layout], name: str, columns: Sequence[str]) -> list[str]:
    """Check the block's name and columns; returns the layout's column names in order."""
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError(f"a block name must be a non-empty string, got {name!r}")
    if not columns:
        raise ArgumentError(
            f"block {name!r} needs at least one column of {layout.__name__}; its columns are {layout.field_names()}"
        )
    for c in columns:
        if not isinstance(c, str):
            raise ArgumentTypeError(f"block {name!r}: column names are strings, got {c!r}")
    known = layout.field_names()
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise NameNotFound(
            f"block {name!r}: {layout.__name__} has no column(s) {unknown}; its columns are {known}: name those"
        )
    if len(set(columns)) != len(columns):
        raise ArgumentError(f"block {name!r} names a column twice: {list(columns)}")
    return known


#: (layout, columns) -> the layout's column names, once the columns were found to form a block:
#: the checks depend on the layout only, so a producer building metadata per event pays them once
_VALIDATED: dict[tuple[type, tuple[str, ...]], list[str]] = {}
#: (layout, n, view_offset, name, columns) -> Block (immutable): the whole geometry, for repeated sizes
_BLOCKS: dict[tuple[Any, ...], Block] = {}
_CACHE_LIMIT = 4096


def _validate(layout: type[soa.Layout], name: str, columns: tuple[str, ...]) -> list[str]:
    """The checks of a block's columns (names, one dtype/kind/shape, adjacency), cached per layout."""
    key = (layout, columns)
    order = _VALIDATED.get(key)
    if order is not None:
        return order
    order = _check_columns(layout, name, columns)
    fields = [layout.field(c) for c in columns]
    if any(f.dtype != fields[0].dtype for f in fields):
        detail = ", ".join(f"{f.name}: {f.dtype}" for f in fields)
        raise ArgumentTypeError(f"block {name!r}: columns must share one dtype to form a tensor, got {detail}")
    if any((f.kind, f.shape) != (fields[0].kind, fields[0].shape) for f in fields):
        detail = ", ".join(f"{f.name}: {f.kind}{'x'.join(map(str, f.shape)) if f.shape else ''}" for f in fields)
        raise ArgumentTypeError(f"block {name!r}: columns must be of one kind and component shape, got {detail}")
    idx = [order.index(c) for c in columns]
    if idx != list(range(idx[0], idx[0] + len(idx))):
        raise ArgumentError(
            f"block {name!r}: columns {list(columns)} are not adjacent in {layout.__name__} in this "
            f"order (layout order: {order}); a block must be a run of consecutive columns"
        )
    if len(_VALIDATED) >= _CACHE_LIMIT:
        _VALIDATED.clear()
    _VALIDATED[key] = order
    return order


def make_block(
    layout: type[soa.Layout], n: int, view_offset: int, name: str, columns: Sequence[str], rows_per_item: int = 1
) -> Block:
    """The :class:`Block` ``name`` made of ``columns`` of ``n`` elements of ``layout`` stored at
    byte ``view_offset`` of a buffer, ``rows_per_item`` rows to an item of its batch axis; a clear
    error when the columns cannot form one tensor. Checks and geometry are cached (per layout and
    columns; per size, offset and grouping)."""
    columns = tuple(columns)
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError(f"a block name must be a non-empty string, got {name!r}")
    if type(rows_per_item) is not int or rows_per_item != 1:  # True == 1: validated too
        rows_per_item = _rows(name, rows_per_item)
    key = (layout, n, view_offset, name, columns, rows_per_item)
    try:
        block = _BLOCKS.get(key)
    except TypeError:  # an unhashable column name: _check_columns says what is wrong
        _check_columns(layout, name, columns)
        raise
    if block is not None:
        return block
    _validate(layout, name, columns)
    ps = layout.placements(n)
    places = [ps[columns[0]], ps[columns[-1]]]
    fields = [p.field for p in places]

    f0, p0 = fields[0], places[0]
    item = f0.itemsize
    padded = p0.pitch // item  # == round_up(n, alignment / itemsize) for columns
    k = len(columns)
    if f0.kind == "column":
        shape, strides = (n, k), (1, padded)
    elif f0.kind == "vector":
        (r,) = f0.shape
        if k == 1:
            shape, strides = (n, r), (1, padded)
        else:
            shape, strides = (n, k, r), (1, r * padded, padded)
    elif f0.kind == "matrix":
        r, c = f0.shape
        if k == 1:
            shape, strides = (n, r, c), (1, padded, r * padded)
        else:
            shape, strides = (n, k, r, c), (1, r * c * padded, padded, r * padded)
    elif f0.kind == "scalar":
        shape, strides = (n, k), (0, padded)  # padded == slot / itemsize for scalars
    else:  # pragma: no cover - soa has no other kinds
        raise ArgumentTypeError(f"block {name!r}: unsupported field kind {f0.kind!r}")

    if rows_per_item != 1:
        shape, strides = _grouped(name, f0.kind, shape, strides, rows_per_item)
    start = view_offset + p0.offset
    last = places[-1]
    stop = view_offset + last.offset + last.nbytes
    block = Block(
        name, columns, f0.kind, f0.dtype, shape, strides, start, (start, stop), layout.alignment, rows_per_item
    )
    if len(_BLOCKS) >= _CACHE_LIMIT:
        _BLOCKS.clear()
    _BLOCKS[key] = block
    return block


def _rows(name: str, rows: Any) -> int:
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ArgumentError(f"block {name!r}: rows_per_item must be a positive integer, got {rows!r}")
    return int(rows)


def _grouped(
    name: str, kind: str, shape: tuple[int, ...], strides: tuple[int, ...], rows: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``shape``/``strides`` with ``rows`` consecutive rows of the batch axis as one item."""
    if kind == "scalar":
        raise ArgumentError(f"block {name!r} holds scalars (one value for every row): rows_per_item does not apply")
    n = shape[0]
    if n % rows:
        raise ArgumentError(
            f"block {name!r}: the collection's {n} rows are not a whole number of items of "
            f"rows_per_item={rows} ({n % rows} rows left over)"
        )
    return (n // rows, rows) + shape[1:], (strides[0] * rows, strides[0]) + strides[1:]
