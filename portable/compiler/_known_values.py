"""Values the compiler knows before numba sees the kernel: a compiler pass of the numba emitter's
pipeline (:data:`portable.compiler.passes.CPU_PIPELINE`), after device functions are inlined.

An inlined call binds a function's parameters to the caller's constants (CMSSW's ``template <int
N>``: the hit count of a track fit), so its ``range(1, n - 1)``, ``h = n // 2``, ``if n == 3:``
and ``x if i < n else 0.0`` are known when the kernel is built. :func:`fold_known_values` folds
them: integer arithmetic of constants (wrapping in the IR's fixed-width types, as every backend computes it),
a local assigned once, a constant, before every read of it replaced by that constant, and each
``if`` or ``a if c else b`` of a known condition by the branch taken (the statements after an
exit dropped, a one-trip ``while True:`` that an inlined early ``return`` left replaced by its
body). The loops then have constant bounds that :mod:`portable.compiler._local_arrays` unrolls,
more per-thread arrays become scalars, and numba types and lowers less code. Floating-point
values are never folded: the results keep their bits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import ir
from ._local_arrays import fold_integers
from ._reads import undefined_reads

#: statements after which the rest of their list never runs
EXITS = (ir.Break, ir.Continue, ir.Return)
#: rounds of folding (each may make constants for the next): two are enough for the nesting seen
ROUNDS = 3


def fold_known_values(kernel: ir.KernelDef) -> ir.KernelDef:
    """``kernel`` (device functions inlined) with what is known folded (a new KernelDef)."""
    body = kernel.body
    for _ in range(ROUNDS):
        body = fold_known_branches(fold_integers(body))
        known = _assigned_once(body, undefined_reads(body, set()))
        if not known:
            break
        body = _Substitute(known).node(body)
    return dataclasses.replace(kernel, body=fold_known_branches(fold_integers(body)))


def _assigned_once(body: list[ir.Stmt], maybe_unset: set[str]) -> dict[str, ir.Const]:
    """Locals assigned by one statement only, an integer or bool constant of their own type,
    that no read may see unassigned: ``{name: constant}``."""
    count: dict[str, int] = {}
    value: dict[str, ir.Const] = {}
    for s in ir.walk(body):
        names: list[str] = []
        if isinstance(s, ir.Assign):
            names = [s.target.name]
            if isinstance(s.value, ir.Const) and s.value.type == s.target.type and _known(s.value) is not None:
                value[s.target.name] = s.value
        elif isinstance(s, ir.CallAssign):
            names = [t.name for t in s.targets]
        elif isinstance(s, (ir.ForRange, ir.StridedLoop)):
            names = [s.var.name] + ([s.local_var.name] if getattr(s, "local_var", None) is not None else [])
        for n in names:
            count[n] = count.get(n, 0) + 1
    return {n: c for n, c in value.items() if count[n] == 1 and n not in maybe_unset}


class _Substitute:
    """A copy of IR whose reads of ``values``' names are those constants (assignments stay)."""

    def __init__(self, values: dict[str, ir.Const]) -> None:
        self.values = values

    def node(self, x: Any) -> Any:
        if isinstance(x, ir.Var):
            return self.values.get(x.name, x)
        if isinstance(x, list):
            return [self.node(y) for y in x]
        if isinstance(x, tuple):
            return tuple(self.node(y) for y in x)
        if isinstance(x, ir.Assign):
            return dataclasses.replace(x, value=self.node(x.value))
        if isinstance(x, (ir.ForRange, ir.StridedLoop)):
            heads = {f: self.node(getattr(x, f)) for f in ir.field_names(type(x))}
            return dataclasses.replace(x, **{k: v for k, v in heads.items() if k not in ("var", "local_var")})
        if not isinstance(x, (ir.Expr, ir.Stmt)):
            return x
        return type(x)(**{f: self.node(getattr(x, f)) for f in ir.field_names(type(x))})


def fold_known_branches(stmts: list[ir.Stmt]) -> list[ir.Stmt]:
    """``stmts`` with each ``if`` and ``a if c else b`` whose condition compares integer constants
    (an unrolled loop's index, an inlined function's constant argument) replaced by the branch
    taken, the statements after a ``break``, ``continue`` or ``return`` of the same list dropped,
    and a ``while True:`` whose body runs once (its only exit, a ``break``, is its last statement)
    replaced by that body."""
    out: list[ir.Stmt] = []
    for s in stmts:
        if isinstance(s, ir.If):
            known = _known(s.cond)
            if known is not None:
                out += fold_known_branches(s.body if known else s.orelse)
                if out and isinstance(out[-1], EXITS):
                    break
                continue
            s = dataclasses.replace(
                s, cond=_fold_selects(s.cond), body=fold_known_branches(s.body), orelse=fold_known_branches(s.orelse)
            )
        elif isinstance(s, (ir.While, ir.ForRange, ir.StridedLoop)):
            s = dataclasses.replace(_fold_selects(dataclasses.replace(s, body=[])), body=fold_known_branches(s.body))
            if isinstance(s, ir.While) and _known(s.cond) and _runs_once(s.body):
                out += s.body[:-1]
                continue
        else:
            s = _fold_selects(s)
        out.append(s)
        if isinstance(s, EXITS):
            break  # the rest of the list is never reached
    return out


def _known(e: ir.Expr) -> bool | int | None:
    """The value of ``e`` when it is an integer or bool constant or compares or combines such
    constants (each within 2**53, where every integer rule agrees); else None."""
    if isinstance(e, ir.Const):
        v = e.value
        ok = isinstance(v, (bool, int)) or (e.type.is_integer or e.type.is_bool) and not isinstance(v, float)
        return int(v) if ok and abs(int(v)) < 2**53 else None
    if isinstance(e, ir.Compare):
        a, b = _known(e.left), _known(e.right)
        if a is None or b is None:
            return None
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}.get(e.op)
    if isinstance(e, ir.BoolOp) and e.op in ("and", "or"):
        values = [_known(v) for v in e.values]
        if any(v is None for v in values):
            return None
        return all(values) if e.op == "and" else any(values)
    return None


def _runs_once(body: list[ir.Stmt]) -> bool:
    """Whether a ``while True:`` of ``body`` ends at its last statement, a ``break``, and nowhere
    else (no other ``break`` or ``continue`` of its own)."""
    if not body or not isinstance(body[-1], ir.Break):
        return False
    return not any(isinstance(y, (ir.Break, ir.Continue)) for y in _own_statements(body[:-1]))


def _own_statements(stmts: list[ir.Stmt]) -> list[ir.Stmt]:
    """The statements of ``stmts`` and of its ``if``s, not of its loops (whose exits are theirs)."""
    out: list[ir.Stmt] = []
    for s in stmts:
        out.append(s)
        if isinstance(s, ir.If):
            out += _own_statements(s.body) + _own_statements(s.orelse)
    return out


def _fold_selects(x: Any) -> Any:
    """``x`` with each ``a if c else b`` of a known ``c`` replaced by the branch taken."""
    if isinstance(x, ir.Select):
        known = _known(x.cond)
        if known is not None:
            return _fold_selects(x.if_true if known else x.if_false)
    if isinstance(x, list):
        return [_fold_selects(y) for y in x]
    if isinstance(x, tuple):
        return tuple(_fold_selects(y) for y in x)
    if not isinstance(x, (ir.Expr, ir.Stmt)):
        return x
    return type(x)(**{f: _fold_selects(getattr(x, f)) for f in ir.field_names(type(x))})


__all__ = ["EXITS", "fold_known_branches", "fold_known_values"]
