"""The input blocks of a ``Model.forward`` checked against a ``torch.export`` program's declared
inputs (their number, dtypes and sizes past the batch axis) before anything runs, as ONNX models'
are (inference/_onnx.py): the program's own guards would fail inside the queue's work with
``AssertionError('Guard failed: input.size()[1] == 3')`` and a dtype mismatch deep in an aten op."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

import portable as pk

from ._block import Block
from ._tensors import torch_dtype


def declared_inputs(program: Any) -> list[tuple[str, Any]] | None:
    """``(name, FakeTensor)`` per user input of ``program`` (a ``torch.export.ExportedProgram``),
    in order; None where an input is not a tensor or its declaration cannot be read (nothing is
    checked then: torch's own guards stay the check)."""
    try:
        names = list(program.graph_signature.user_inputs)
        vals = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    except AttributeError:  # another torch's program object
        return None
    found = [(name, vals.get(name)) for name in names]
    if any(not hasattr(v, "shape") or not hasattr(v, "dtype") for _, v in found):
        return None
    return found


def _dims(val: Any) -> list[int | None]:
    """The declared sizes, None for a dynamic (symbolic) one."""
    return [d if isinstance(d, int) else None for d in val.shape]


def _spelled(name: str, val: Any) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in _dims(val))
    return f"{name} {str(val.dtype).removeprefix('torch.')}[{dims}]"


def check_exported_inputs(program: Any, source: str, inputs: Sequence[Block], input_dtype: Any) -> None:
    """Raise a :class:`pk.ArgumentError` / :class:`pk.ArgumentTypeError` naming the fix where the
    input blocks do not match ``program``'s inputs (``input_dtype``: ModelMetadata's, a torch
    dtype or None). The batch axis (the first) is the rows' and is not compared."""
    decls = declared_inputs(program)
    if decls is None:
        return
    name = os.path.basename(source)
    if len(inputs) != len(decls):
        raise pk.ArgumentError(
            f"{name} takes {len(decls)} input(s) {[_spelled(n, v) for n, v in decls]}; the input blocks are "
            f"{len(inputs)}: {[f'{b.name} {b.dtype}{list(b.shape)}' for b in inputs]}; append one block per input"
        )
    for (decl, val), b in zip(decls, inputs):
        dtype = torch_dtype(np.dtype(b.dtype)) if input_dtype is None else input_dtype
        if dtype != val.dtype:
            want = str(val.dtype)
            raise pk.ArgumentTypeError(
                f"{name}: input {_spelled(decl, val)} gets block {b.name!r} of dtype {b.dtype}; convert the "
                f"columns or pass ModelMetadata(..., input_dtype={want})"
            )
        dims, shape = _dims(val), list(b.shape)
        if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims[1:], shape[1:])):
            cols = ", ".join(b.columns)
            hint = ""
            if len(dims) == len(shape) == 2 and dims[1] is not None:
                hint = f": give the block {dims[1]} column(s), it has {shape[1]}"
            raise pk.ArgumentError(
                f"{name}: input {_spelled(decl, val)} (batch axis first, ? any size) gets block {b.name!r} "
                f"of shape {shape} ([{cols}]){hint}; nothing was run"
            )
