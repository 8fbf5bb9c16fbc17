"""The gather of a column-major SoA block into a dense row-major tensor (what ONNX Runtime and
AOTInductor read).

A block of several SoA columns has the event axis at stride 1 and its columns ``padded`` apart
(DeepMET's ``[n, 4500, 8]``: 36,000 columns). Row-major order writes every event's values of all
the columns next to each other: a transpose of a ``[columns, n]`` matrix. On host memory it runs
as one compiled loop (numba, no GIL) over raw addresses, so nothing of the tensors is kept:

- up to ``FEW_COLUMNS`` columns (a per-candidate collection's ``[n*4500, 8]``) it writes row after
  row, the column offsets a tuple (one compiled loop per column count, its inner loop unrolled):
  0.64 / 23 ms at 288k / 4.6M rows (64 / 1024 DeepMET events; alone, warm, one thread) where a
  copy of as many dense bytes takes 0.64 / 21.5 ms (the loop over an offsets array took 1.0 / 26 ms);
- below ``SMALL_BATCH`` events it reads the columns of each run of ``SMALL_RUN`` in memory order,
  each written to its place in every row;
- from there on it goes over tiles of a cache line of each row x ``TILE_EVENTS`` events.

The column offsets come from a table made once per block geometry. Measured on a DeepMET-shaped
``[n, 4500, 8]`` float32 block (128-byte alignment) at n = 4 / 16 / 128 / 1024, one core,
interleaved: 0.68 / 1.1 / 13.9 / 107 ms, where torch's ``copy_`` takes 0.95 / 2.3 / 34 / 431 ms and
the copies of 256-column chunks used before 3.2 / 2.7 / 16.4 / 181 ms. Other devices and dtypes
numba does not handle go through torch's copy in chunks of at most ``GATHER_SPAN`` columns per event.

Which copy is faster also depends on what ran before: read right after a model's run, the
ParticleNet-shaped inputs at batch 4 took 0.081 ms in the compiled loops and 0.063 ms in torch's
``copy_``. So the first ``2 * TRIALS`` gathers of each geometry alternate between the two, timed
where they run, and the faster is kept (:func:`chosen` says which).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import torch

from ._layout import row_major as _row_major

#: elements per event one chunk of the torch fallback reads (see :func:`gather`)
GATHER_SPAN = 256
#: events per tile of the compiled gather
TILE_EVENTS = 256
#: below this many events the compiled gather reads the columns in memory order, all events of
#: one at a time, instead of tiles (measured faster up to 32 events, slower from 64)
SMALL_BATCH = 40
#: below SMALL_BATCH, columns are read in memory order within runs of this many of a row (the
#: rows' part of a run stays in the cache: 1.2-1.4x faster at 32 events than one run of all)
SMALL_RUN = 512
#: up to this many columns the compiled gather writes row after row, reading every column at once
#: (measured 1.1-2x faster than tiles for 4 and 8 float32 columns at 4k-288k events; slower from
#: 12 columns when the columns' pitch is a power of two)
FEW_COLUMNS = 8
#: gathers of one geometry timed with each of the compiled loop and torch's copy before the faster
#: is kept: torch's copy won for small blocks read right after a model run (ParticleNet-shaped
#: inputs at batch 4: 0.063 vs 0.081 ms), the compiled loops from a few hundred kB up
TRIALS = 3
#: blocks larger than this (bytes) take the compiled loops without trials: they won every time
#: measured from a few MB up (2x at 9 MB of 8 float32 columns), and a trial of torch's copy costs
TRIAL_BYTES = 4 << 20
#: geometry -> True (compiled loop), False (torch's copy) or the trial times so far (ours, torch's)
_CHOICE: dict[tuple[Any, ...], Any] = {}
#: the loops of the compiled gather: columns in memory order (a few events), rows (a few columns), tiles
_BY_COLUMN, _BY_ROW, _TILES = 0, 1, 2
#: the column order of the row and tile loops: the row's own
_NO_ORDER = np.empty(0, dtype=np.int64)
#: torch dtypes the compiled gather reads and writes -> an empty numpy array of that dtype (the
#: kernel's element type: numba compiles one loop per source/destination pair)
_PROTOS: dict[torch.dtype, np.ndarray] = {
    dt: np.empty(0, dtype=np_dt)
    for dt, np_dt in (
        (torch.float32, np.float32),
        (torch.float64, np.float64),
        (torch.int8, np.int8),
        (torch.int16, np.int16),
        (torch.int32, np.int32),
        (torch.int64, np.int64),
        (torch.uint8, np.uint8),
        (torch.bool, np.bool_),
    )
}


@functools.cache
def _kernels() -> tuple[Any, Any]:
    """The compiled loops over raw addresses (compiled on first use per dtype pair, cached on disk
    by numba; nothing is kept of the tensors they read and write): the column and tile loops, and
    the row loop for a few columns, their offsets a tuple: numba compiles one per column count,
    whose inner loop LLVM unrolls (1.2-3.5x faster than a loop over an offsets array: 9.6 / 46 /
    631 us at 4.5k / 18k / 288k rows of 8 float32 columns)."""
    # numba (about half a second to import) loads when the first gather kernel is made
    import numba
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def address(typingctx, addr):  # an integer address as a void pointer, for numba.carray
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], cgutils.voidptr_t)

        return types.voidptr(addr), codegen

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def transpose_columns(
        mode, src_addr, src_proto, span, offsets, order, dst_addr, dst_proto, n, tile_columns, tile_events
    ):  # pragma: no cover - compiled
        columns = offsets.shape[0]
        src = numba.carray(address(src_addr), (span,), src_proto.dtype)
        out = numba.carray(address(dst_addr), (n * columns,), dst_proto.dtype)
        if mode == _BY_COLUMN:  # a few events: columns in memory order, each written to its place in every row
            for k in range(columns):
                start, j = offsets[k], order[k]
                for i in range(n):
                    out[i * columns + j] = src[start + i]
            return
        for j0 in range(0, columns, tile_columns):
            j1 = min(j0 + tile_columns, columns)
            for i0 in range(0, n, tile_events):
                i1 = min(i0 + tile_events, n)
                for j in range(j0, j1):
                    start = offsets[j]
                    for i in range(i0, i1):
                        out[i * columns + j] = src[start + i]

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def rows_of_columns(src_addr, src_proto, span, offsets, dst_addr, dst_proto, n):  # pragma: no cover - compiled
        columns = len(offsets)  # a tuple: known when compiled
        src = numba.carray(address(src_addr), (span,), src_proto.dtype)
        out = numba.carray(address(dst_addr), (n * columns,), dst_proto.dtype)
        for i in range(n):  # each row written whole, its values read from every column
            row = i * columns
            for j in range(columns):
                out[row + j] = src[offsets[j] + i]

    return transpose_columns, rows_of_columns


@functools.lru_cache(maxsize=256)
def column_offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Element offsets of a block's columns (the trailing axes, row-major order) from its first element."""
    offsets = np.zeros(1, dtype=np.int64)
    for size, stride in zip(shape, strides):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).reshape(-1)
    offsets.setflags(write=False)
    return offsets


@functools.lru_cache(maxsize=256)
def _geometry(
    shape: torch.Size, strides: tuple[int, ...], src: torch.dtype, dst: torch.dtype
) -> tuple[Any, ...] | None:
    """The compiled loop's arguments for one block geometry (offsets, the span of elements read,
    tiles), or None where it does not apply: not column-major, one event, dtypes it does not know."""
    if len(shape) < 2 or strides[0] != 1 or shape[0] < 2 or src not in _PROTOS or dst not in _PROTOS:
        return None
    if _row_major(shape, strides):
        return None
    n = shape[0]
    offsets = column_offsets(tuple(shape[1:]), tuple(strides[1:]))
    span = int(offsets.max()) + n if offsets.size else n
    if offsets.size <= FEW_COLUMNS:  # the offsets as a tuple: the row kernel is compiled per column count
        return _BY_ROW, _PROTOS[src], span, tuple(int(o) for o in offsets), _NO_ORDER, _PROTOS[dst], n, 1, 1
    if n < SMALL_BATCH:  # the columns of each run of SMALL_RUN in memory order, with their places in a row
        order = np.concatenate(
            [
                start + np.argsort(offsets[start : start + SMALL_RUN], kind="stable")
                for start in range(0, offsets.size, SMALL_RUN)
            ]
        )
        return _BY_COLUMN, _PROTOS[src], span, offsets[order], order, _PROTOS[dst], n, 1, 1
    size = max(torch.empty(0, dtype=src).element_size(), torch.empty(0, dtype=dst).element_size())
    # tiles of a cache line of each row (tile_columns) x TILE_EVENTS events
    return _TILES, _PROTOS[src], span, offsets, _NO_ORDER, _PROTOS[dst], n, max(1, 64 // size), TILE_EVENTS


def gather(t: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``t`` as a dense row-major tensor: ``t`` itself when it is one and ``out`` is None, else
    copied into ``out`` (a fresh tensor when None; converted to its dtype)."""
    if out is None:
        if t.is_contiguous():
            return t
        out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    t, rows_out = _rows(t, out)
    if rows_out is not out:  # rows grouped into items: gathered as the collection's rows
        gather(t, rows_out)
        return out
    if t.device.type == "cpu" and out.device.type == "cpu" and out.shape == t.shape and out.is_contiguous():
        args = _geometry(t.shape, t.stride(), t.dtype, out.dtype)
        if args is not None:
            _copy_chosen(t, out, args)
            return out
    if t.dim() >= 2 and t.device.type == "cpu" and t.stride(0) == 1 and t.shape[0] > 1:
        inner = 1
        for size in t.shape[2:]:
            inner *= size
        span, rows = max(1, GATHER_SPAN // max(inner, 1)), t.shape[1]
        if span < rows:
            for start in range(0, rows, span):
                out[:, start : start + span].copy_(t[:, start : start + span])
            return out
    out.copy_(t)
    return out


def _rows(t: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A block grouping rows into items (``rows_per_item``: ``[items, R, ...]`` at strides
    ``[R, 1, ...]``) as the collection's ``[items * R, ...]`` rows, and a row-major ``out`` as
    the same; anything else as it is."""
    if t.dim() >= 3 and t.shape[1] > 1 and t.stride(0) == t.shape[1] * t.stride(1) and out.is_contiguous():
        rows = torch.as_strided(t, (t.shape[0] * t.shape[1],) + tuple(t.shape[2:]), t.stride()[1:])
        return rows, out.view((rows.shape[0],) + tuple(out.shape[2:]))
    return t, out


def _run_compiled(t: torch.Tensor, out: torch.Tensor, args: tuple[Any, ...]) -> None:
    mode, src_proto, span, offsets, order, dst_proto, n, tile_columns, tile_events = args
    columns, rows = _kernels()
    if mode == _BY_ROW:
        rows(t.data_ptr(), src_proto, span, offsets, out.data_ptr(), dst_proto, n)
    else:
        columns(
            mode, t.data_ptr(), src_proto, span, offsets, order, out.data_ptr(), dst_proto, n, tile_columns, tile_events
        )


def _copy_chosen(t: torch.Tensor, out: torch.Tensor, args: tuple[Any, ...]) -> None:
    """Copy with the compiled loop or torch's ``copy_``, whichever was faster on this geometry:
    its first ``2 * TRIALS`` gathers alternate between them, timed where they run (after the
    model's own work, with what it left in the caches), then the faster is kept."""
    key = (t.shape, t.stride(), t.dtype, out.dtype)
    choice = _CHOICE.get(key)
    if choice is None and out.numel() * out.element_size() > TRIAL_BYTES:
        choice = _CHOICE[key] = True  # large blocks: the compiled loops won every time measured
    if choice is True:
        _run_compiled(t, out, args)
        return
    if choice is False:
        out.copy_(t)
        return
    if choice is None:
        if len(_CHOICE) >= 256:  # geometries that change every event: keep trying the latest
            _CHOICE.clear()
        choice = _CHOICE.setdefault(key, ([], []))
    ours, torch_s = choice
    start = time.perf_counter()
    if len(ours) <= len(torch_s):
        _run_compiled(t, out, args)
        ours.append(time.perf_counter() - start)
    else:
        out.copy_(t)
        torch_s.append(time.perf_counter() - start)
    if len(ours) >= TRIALS and len(torch_s) >= TRIALS:
        _CHOICE[key] = min(ours) <= min(torch_s)


def chosen(t: torch.Tensor, out: torch.Tensor) -> str:
    """Which copy :func:`gather` uses for this geometry now: ``"compiled"``, ``"torch"``,
    ``"trying"`` (still timing both) or ``"not compiled"`` (the compiled loop does not apply)."""
    if not compiled(t, out):
        return "not compiled"
    t, out = _rows(t, out)
    choice = _CHOICE.get((t.shape, t.stride(), t.dtype, out.dtype))
    return "compiled" if choice is True else "torch" if choice is False else "trying"


def compiled(t: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether :func:`gather` can copy ``t`` into ``out`` with the compiled loops."""
    t, out = _rows(t, out)
    return (
        t.device.type == "cpu"
        and out.device.type == "cpu"
        and out.shape == t.shape
        and out.is_contiguous()
        and _geometry(t.shape, t.stride(), t.dtype, out.dtype) is not None
    )


__all__ = ["GATHER_SPAN", "TRIALS", "chosen", "column_offsets", "compiled", "gather"]
