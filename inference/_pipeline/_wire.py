"""How a pipeline's collections travel: one Triton tensor per SoA field, derived from the layouts.

Tensor ``<collection>__<field>``: a column is ``[rows]``, a vector ``[rows, R]``, a matrix
``[rows, R, C]`` (row-major per element, as ``view.field`` shows it), a scalar ``[1]``. Rows are
``-1`` (any) unless an output declares fixed rows. Pipelines are served with
``max_batch_size = 0``: one request is one call of the pipeline on whole collections. Triton's
dynamic batching would concatenate the rows of several clients' collections into one call, which
changes the result of every kernel that couples rows (edge building, merging, any reduction) and
has no meaning for scalar columns; concurrency comes from model instances instead (each its own
server queue).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import portable as pk
from portable import ArgumentError

from .._tensor_desc import TensorDesc
from ._declare import OutputsNotFilled, PipelineDeclaration, Slot

SEP = "__"
#: the byte a poison fill writes: float32 0xA5A5A5A5 is -2.9e-16, int32 is -1515870811
POISON = 0xA5


def tensor_name(slot: str, field: str) -> str:
    return f"{slot}{SEP}{field}"


def field_dims(field: Any, rows: int = -1) -> tuple[int, ...]:
    """The Triton dims of one SoA field (whole tensor, no batch axis)."""
    if field.kind == "scalar":
        return (1,)
    return (rows, *field.shape)


def slot_decls(slot: Slot, rows: int | None = None) -> list[TensorDesc]:
    """The tensors of every field of a declared collection (``rows``: None is -1, any)."""
    n = -1 if rows is None else int(rows)
    return [TensorDesc(tensor_name(slot.name, f.name), f.dtype, field_dims(f, n)) for f in slot.layout.fields]


def derive_config(pipe: PipelineDeclaration) -> dict[str, Any]:
    """The Triton model configuration of a pipeline, from its layouts alone:
    ``{"name", "inputs": [TensorDesc], "outputs": [...], "max_batch_size": 0}``."""
    ins = [d for s in pipe.inputs for d in slot_decls(s)]
    outs = [d for s in pipe.outputs for d in slot_decls(s, pipe.fixed_rows(s))]
    return {"name": pipe.name, "inputs": ins, "outputs": outs, "max_batch_size": 0}


# ---------------------------------------------------------------------------- collections <-> arrays
def _host_view(coll: Any) -> Any:
    """A host view of ``coll``: its own view on host memory, else a synchronous host copy (call
    it where the work that wrote ``coll`` has finished, e.g. inside a host task of its queue)."""
    if coll.device.is_host_memory:
        return coll.view()
    q = pk.Queue(coll.device, blocking=True)
    return coll.to_host(q).view()


def pack(slot: Slot, coll: Any, copy: bool = False) -> dict[str, np.ndarray]:
    """The tensors of one collection (contiguous; ``copy``: never views of its memory)."""
    view = _host_view(coll)
    out = {}
    for f in slot.layout.fields:
        a = getattr(view, f.name)
        a = a.reshape(1) if f.kind == "scalar" else a
        out[tensor_name(slot.name, f.name)] = np.array(a, copy=True, order="C") if copy else np.ascontiguousarray(a)
    return out


#: the request parameter naming the input collections that have no rows (comma-separated):
#: PyTriton cannot pass an empty tensor, so such a collection travels as one row of zeros, and
#: the server takes it back to none; an output collection of no rows comes back as one row,
#: which the client drops (it knows its outputs' rows)
ZERO_ROWS = "alpyka_zero_rows"


def pad_rows(slot: Slot, arrays: dict[str, np.ndarray]) -> None:
    """Give the row tensors of ``slot`` (found in ``arrays``, with no rows) one row of zeros."""
    for f in slot.layout.fields:
        if f.kind != "scalar":
            name = tensor_name(slot.name, f.name)
            a = arrays[name]
            if a.shape[0] == 0:
                arrays[name] = np.zeros((1, *a.shape[1:]), dtype=a.dtype)


def drop_rows(slot: Slot, arrays: dict[str, np.ndarray]) -> None:
    """Take the row tensors of ``slot`` back to no rows (the inverse of :func:`pad_rows`)."""
    for f in slot.layout.fields:
        if f.kind != "scalar":
            name = tensor_name(slot.name, f.name)
            if name in arrays:
                arrays[name] = arrays[name][:0]


def rows_of(slot: Slot, arrays: Mapping[str, np.ndarray]) -> int:
    """The rows of a collection in a request (1 for a layout of scalars only)."""
    names = [tensor_name(slot.name, f.name) for f in slot.layout.fields if f.kind != "scalar"]
    sizes = {n: arrays[n].shape[0] for n in names if n in arrays}  # a missing one: check_arrays names it
    if len(set(sizes.values())) > 1:
        raise ArgumentError(
            f"collection {slot.name!r}: its columns disagree on the rows: {sizes}; send every column with the same rows"
        )
    return next(iter(sizes.values()), 1)


def check_arrays(slot: Slot, arrays: Mapping[str, np.ndarray], rows: int, where: str) -> None:
    """Every field of ``slot`` present with its dtype and shape (``rows`` rows); names it if not."""
    for f in slot.layout.fields:
        name = tensor_name(slot.name, f.name)
        a = arrays.get(name)
        if a is None:
            raise ArgumentError(
                f"{where}: tensor {name!r} is missing; send every column of {slot.layout.__name__}, "
                f"named collection__column: {[tensor_name(slot.name, g.name) for g in slot.layout.fields]}"
            )
        want = field_dims(f, rows)
        if a.dtype != f.dtype or tuple(a.shape) != want:
            raise ArgumentError(
                f"{where}: tensor {name!r} is {a.dtype} {list(a.shape)}, "
                f"{slot.layout.__name__}.{f.name} needs {f.dtype} {list(want)}; send it so (the server does not cast)"
            )


def fill(slot: Slot, coll: Any, arrays: Mapping[str, np.ndarray]) -> None:
    """Write checked tensors into ``coll`` (synchronously; device memory through a host copy)."""
    host = coll if coll.device.is_host_memory else pk.PortableCollection(slot.layout, coll.size, pk.host())
    view = host.view()
    for f in slot.layout.fields:
        a = arrays[tensor_name(slot.name, f.name)]
        getattr(view, f.name)[...] = a.reshape(()) if f.kind == "scalar" else a
    if host is not coll:
        pk.memcpy(pk.Queue(coll.device, blocking=True), coll, host)


def collection_from(slot: Slot, arrays: Mapping[str, np.ndarray], queue: Any, into: Any = None) -> Any:
    """A collection of ``slot``'s layout on ``queue``'s device holding the request's tensors
    (``into``: a collection of the right rows to overwrite, else a new one)."""
    rows = rows_of(slot, arrays)
    check_arrays(slot, arrays, rows, f"input {slot.name!r}")
    coll = into if into is not None else pk.PortableCollection(slot.layout, rows, queue)
    fill(slot, coll, arrays)
    return coll


# ---------------------------------------------------------------------------- unfilled outputs
def poison(q: Any, coll: Any) -> None:
    """Enqueue the poison fill of an output collection (every byte :data:`POISON`)."""
    pk.memset(q, coll, POISON)


def unfilled(slot: Slot, arrays: Mapping[str, np.ndarray]) -> list[str]:
    """Fields of an output whose every byte is still the poison (written by nobody)."""
    left = []
    for f in slot.layout.fields:
        a = arrays[tensor_name(slot.name, f.name)]
        if a.size and bool(np.all(np.ascontiguousarray(a).view(np.uint8) == POISON)):
            left.append(f"{slot.name}.{f.name}")
    return left


def raise_unfilled(pipe: PipelineDeclaration, names: Iterable[str]) -> None:
    names = list(names)
    if names:
        raise OutputsNotFilled(
            f"pipeline {pipe.name!r} did not fill output column(s) {names}: every byte is still the "
            f"poison fill 0x{POISON:02X}; write them in the body (a column written only in part is not "
            f"detected)"
        )


def check_filled(pipe: PipelineDeclaration, outs: Sequence[Any]) -> None:
    """Raise :class:`OutputsNotFilled` when a poisoned output column was never written."""
    left: list[str] = []
    for slot, coll in zip(pipe.outputs, outs):
        left += unfilled(slot, pack(slot, coll))
    raise_unfilled(pipe, left)
