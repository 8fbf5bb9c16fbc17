"""Per-thread arrays for the numba emitter: those indexed only by constants become scalar locals
(two compiler passes of :data:`portable.compiler.passes.CPU_PIPELINE`).

numba has no stack arrays on the CPU: the emitter gives each per-thread array (``acc.local_array``,
a random engine's state) one numpy buffer per ``launch`` call, refilled where the kernel declares
it, so every element access is a load or store through memory that LLVM cannot keep in
registers. After :mod:`portable.compiler._inline` has put every device function into the kernel, an array
whose every access has constant indices within its extents (a 3-vector, a small matrix written
out element by element) needs no memory at all: :func:`scalarize_local_arrays` replaces each of
its elements by a local variable (``<array>_<flat index>``), its declaration by assignments of
zero, and drops it from ``KernelDef.private``. The C backends need no such pass: their compilers
keep such arrays in registers themselves.

Loops over an array's elements (``for c in range(3): t += m[r, c] * v[c]``, ``pk.linalg``'s
loops over a size passed as a constant) index it with a loop variable: :func:`unroll_for_local_arrays`
first unrolls each ``range()`` of at most :data:`UNROLL_TRIPS` constant trips whose variable
indexes a per-thread array (innermost first, the variable replaced by each constant and the
integer arithmetic of the indices folded), so that such arrays become scalars too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from portable.compiler import ir
from portable.compiler.operations import OPERATORS, wrap

#: the most trips of a ``range()`` loop :func:`unroll_for_local_arrays` unrolls
UNROLL_TRIPS = 16
#: the most IR nodes one unrolled loop may have (its body's times its trips), and the most the
#: unrolling may add to one kernel (numba's compile time grows with the code)
UNROLL_NODES = 6000
UNROLL_BUDGET = 30000


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
        return type(x)(**{f: self.node(getattr(x, f)) for f in ir.field_names(type(x))})


def unroll_for_local_arrays(kernel: ir.KernelDef) -> ir.KernelDef:
    """``kernel`` with the short constant ``range()`` loops whose variable indexes one of its
    per-thread arrays unrolled (see the module docstring; a new KernelDef)."""
    if not kernel.private:
        return kernel
    names = {a.name for a in kernel.private}
    return dataclasses.replace(kernel, body=_Unroller(names).stmts(kernel.body))


class _Unroller:
    """Unrolls loops innermost first; the copies of an unrolled body are looked at again, where
    an inner loop's bounds may have become constants (``for j in range(i)``)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.budget = UNROLL_BUDGET

    def stmts(self, stmts: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            if isinstance(s, ir.If):
                s = dataclasses.replace(s, body=self.stmts(s.body), orelse=self.stmts(s.orelse))
            elif isinstance(s, (ir.While, ir.ForRange, ir.StridedLoop)):
                s = dataclasses.replace(s, body=self.stmts(s.body))
            trips = _trips(s, self.names) if isinstance(s, ir.ForRange) else None
            # what the copies add: the body once more per trip after the first
            cost = sum(1 for _ in ir.nodes(s.body)) * (len(trips) - 1) if trips else 0
            if trips is None or cost > self.budget:
                out.append(s)
                continue
            self.budget -= cost
            copies: list[ir.Stmt] = []
            for k in trips:
                value = ir.Const(k, s.var.type)
                copies.append(ir.Assign(s.var, value, s.line))  # the variable after the loop, as Python leaves it
                copies += _Fold({s.var.name: value}).node(s.body)
            out += self.stmts(copies)
        return out


def fold_integers(stmts: list[ir.Stmt]) -> list[ir.Stmt]:
    """A copy of ``stmts`` with the integer arithmetic of constants folded (see :class:`_Fold`)."""
    return _Fold({}).node(stmts)


def _trips(s: ir.ForRange, names: set[str]) -> range | None:
    """The values of ``s``'s variable when the loop is worth unrolling and may be, else None."""
    bounds = (s.start, s.stop, s.step)
    if not all(isinstance(b, ir.Const) and not isinstance(b.value, float) for b in bounds) or s.step.value == 0:
        return None
    trips = range(int(s.start.value), int(s.stop.value), int(s.step.value))
    if not trips:
        return trips  # no trip: the loop goes (its body may index an array by its variable)
    if len(trips) > UNROLL_TRIPS:
        return None
    var = s.var.name
    if _leaves(s.body) or any(_target(y) == var for y in ir.nodes(s.body)):
        return None
    indexes = any(
        isinstance(y, (ir.Load, ir.Store))
        and y.array.name in names
        and any(isinstance(v, ir.Var) and v.name == var for v in ir.nodes(list(y.indices)))
        for y in ir.nodes(s.body)
    )
    if not indexes or sum(1 for _ in ir.nodes(s.body)) * len(trips) > UNROLL_NODES:
        return None
    return trips


def _target(y: Any) -> str | None:
    if isinstance(y, ir.Assign):
        return y.target.name
    if isinstance(y, (ir.ForRange, ir.StridedLoop)):
        return y.var.name
    return None


def _leaves(body: list[ir.Stmt]) -> bool:
    """Whether ``body`` has a ``break`` or ``continue`` of its own loop (not of a loop inside it)."""
    for s in body:
        if isinstance(s, (ir.Break, ir.Continue)):
            return True
        if isinstance(s, ir.If) and (_leaves(s.body) or _leaves(s.orelse)):
            return True
    return False


class _Fold:
    """A copy of IR with variables replaced by constants (``values``) and the integer arithmetic
    of constants folded as every backend computes it (numpy's fixed-width rules)."""

    def __init__(self, values: dict[str, ir.Const]) -> None:
        self.values = values

    def node(self, x: Any) -> Any:
        if isinstance(x, ir.Var):
            return self.values.get(x.name, x)
        if isinstance(x, (list, tuple)):
            return type(x)(self.node(y) for y in x)
        if not isinstance(x, (ir.Expr, ir.Stmt)):
            return x
        y = type(x)(**{f: self.node(getattr(x, f)) for f in ir.field_names(type(x))})
        return _folded(y)


def _folded(e: Any) -> Any:
    """``e`` as a constant when it is integer arithmetic of constants, else ``e``."""
    if isinstance(e, ir.Cast) and isinstance(e.value, ir.Const) and e.type.is_integer and e.value.type.is_integer:
        return ir.Const(wrap(int(e.value.value), e.type), e.type)
    if (
        isinstance(e, ir.BinOp)
        and e.op in ("+", "-", "*", "//", "%")
        and e.type.is_integer
        and isinstance(e.left, ir.Const)
        and isinstance(e.right, ir.Const)
        and e.left.type == e.right.type == e.type
    ):
        return ir.Const(OPERATORS[e.op].fold(int(e.left.value), int(e.right.value), e.type), e.type)
    return e


__all__ = ["UNROLL_BUDGET", "UNROLL_TRIPS", "fold_integers", "scalarize_local_arrays", "unroll_for_local_arrays"]
