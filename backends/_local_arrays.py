"""Per-thread arrays for the numba emitter: those indexed only by constants become scalar locals.

numba has no stack arrays on the CPU: the emitter gives each per-thread array (``acc.local_array``,
a random engine's state) one numpy buffer per ``launch`` call, refilled where the kernel declares
it, so every element access is a load or store through memory that LLVM cannot keep in
registers. After :mod:`backends._inline` has put every device function into the kernel, an array
whose every access has constant indices within its extents (a 3-vector, a small matrix written
out element by element) needs no memory at all: :func:`scalarize_local_arrays` replaces each of
its elements by a local variable (``<array>_<flat index>``), its declaration by assignments of
zero, and drops it from ``KernelDef.private``. The C backends need no such pass: their compilers
keep such arrays in registers themselves.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from portable.compiler import ir


def scalarize_local_arrays(kernel: ir.KernelDef) -> ir.KernelDef:
    """``kernel`` (its device functions inlined) with every per-thread array that only constant
    indices within its extents address replaced by scalar locals (a new KernelDef)."""
    if not kernel.private:
        return kernel
    shapes = {a.name: a for a in kernel.private}
    ok = set(shapes)
    for y in ir.nodes(kernel.body):
        if isinstance(y, (ir.Load, ir.Store)) and y.array.name in ok:
            if _flat(y.indices, shapes[y.array.name].shape) is None:
                ok.discard(y.array.name)
        elif isinstance(y, ir.AtomicOp) and y.array.name in ok:
            ok.discard(y.array.name)
    if not ok:
        return kernel
    rw = _Scalarize({n: shapes[n] for n in ok})
    body = rw.stmts(kernel.body)
    private = [a for a in kernel.private if a.name not in ok]
    return dataclasses.replace(kernel, body=body, private=private, locals={**kernel.locals, **rw.new_locals})


def _flat(indices: tuple, shape: tuple[int, ...]) -> int | None:
    """The C-contiguous flat position of constant ``indices`` within ``shape``; None when one is
    not a constant or lies outside its extent."""
    if len(indices) != len(shape):
        return None
    flat = 0
    for i, n in zip(indices, shape):
        if not isinstance(i, ir.Const) or isinstance(i.value, float) or not 0 <= int(i.value) < n:
            return None
        flat = flat * n + int(i.value)
    return flat


class _Scalarize:
    """Rewrites the accesses of the arrays in ``arrays`` (name -> SharedArray) as scalar locals."""

    def __init__(self, arrays: dict[str, ir.SharedArray]) -> None:
        self.arrays = arrays
        self.new_locals: dict[str, Any] = {}

    def element(self, ref: ir.ArrayRef, flat: int) -> ir.Var:
        a = self.arrays[ref.name]
        name = f"{a.name}_{flat}"
        self.new_locals[name] = a.dtype
        return ir.Var(name, a.dtype)

    def stmts(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in body:
            if isinstance(s, ir.DeclareLocal) and s.array.name in self.arrays:
                a = self.arrays[s.array.name]
                out += [
                    ir.Assign(self.element(s.array, k), ir.Const(False if a.dtype.is_bool else 0, a.dtype), s.line)
                    for k in range(math.prod(a.shape))
                ]
            elif isinstance(s, ir.Store) and s.array.name in self.arrays:
                flat = _flat(s.indices, self.arrays[s.array.name].shape)
                assert flat is not None
                out.append(ir.Assign(self.element(s.array, flat), self.node(s.value), s.line))
            else:
                out.append(self.node(s))
        return out

    def node(self, x: Any) -> Any:
        if isinstance(x, ir.Load) and x.array.name in self.arrays:
            flat = _flat(x.indices, self.arrays[x.array.name].shape)
            assert flat is not None
            return self.element(x.array, flat)
        if isinstance(x, list) and x and isinstance(x[0], ir.Stmt):
            return self.stmts(x)
        if isinstance(x, (list, tuple)):
            return type(x)(self.node(y) for y in x)
        if not isinstance(x, (ir.Expr, ir.Stmt)):
            return x
        return type(x)(**{f.name: self.node(getattr(x, f.name)) for f in dataclasses.fields(x)})


__all__ = ["scalarize_local_arrays"]
