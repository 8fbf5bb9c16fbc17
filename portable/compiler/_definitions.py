"""Fewer definitions per variable in the numba emitter's thread body (its compile time, not its code).

numba turns a generated function into SSA form: every variable assigned more than once is
rewritten by a pass over the whole function (``numba.core.ssa``), so its compile time grows with
(variables defined twice) x (statements). Unrolled loops and scalarized per-thread arrays
(:mod:`portable.compiler._local_arrays`) make such variables by the hundred: the loop variable
assigned once per copy, a temporary of the loop body assigned again in each copy, every local
zeroed at the thread's start and assigned later. :func:`fewer_definitions` rewrites the thread's
statements into the same computation with fewer of them:

- an assignment of a constant or a variable to a local that nothing reads is dropped;
- a local's zeroing at the thread's start (or at its per-thread array's declaration) is dropped
  where no read can see the zero (every path assigns the local before reading it);
- a top-level assignment that a later top-level assignment of the same list replaces, with no
  nested assignment, ``break``, ``continue`` or ``return`` in between, gets a name of its own
  (``<name>__<n>``) that its readers use.

The same floating-point operations run in the same order: the results keep their bits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import ir
from ._known_values import EXITS as _EXITS
from ._known_values import fold_known_branches


def fewer_definitions(body: list[ir.Stmt], zeroed: dict[str, Any]) -> tuple[list[ir.Stmt], dict[str, Any]]:
    """``(body, zeroed)`` rewritten as the module docstring says: ``zeroed`` are the locals the
    emitter sets to zero before ``body`` (the thread's start); the result keeps those that some
    read may see."""
    body = _drop_dead_stores(fold_known_branches(body))
    names = _mentioned(body) | set(zeroed)
    firsts = _first_zeroings(body)
    seen = undefined_reads(_without(body, {id(s) for s in firsts.values()}), set())
    keep = {n: t for n, t in zeroed.items() if n in seen}
    body = _without(body, {id(s) for n, s in firsts.items() if n not in seen})
    return _Renamer(names).stmts(body), keep


def _without(stmts: list[ir.Stmt], gone: set[int]) -> list[ir.Stmt]:
    """``stmts`` less the statements whose ``id`` is in ``gone``, nested ones too."""
    out: list[ir.Stmt] = []
    for s in stmts:
        if id(s) in gone:
            continue
        if isinstance(s, ir.If):
            s = dataclasses.replace(s, body=_without(s.body, gone), orelse=_without(s.orelse, gone))
        elif isinstance(s, (ir.While, ir.ForRange, ir.StridedLoop)):
            s = dataclasses.replace(s, body=_without(s.body, gone))
        out.append(s)
    return out


def _first_zeroings(body: list[ir.Stmt]) -> dict[str, ir.Assign]:
    """Assignments of a constant to a local that no statement before it (in the order of the
    text) mentions: a local's or a scalarized per-thread array's zeroing, ``{name: statement}``."""
    out: dict[str, ir.Assign] = {}
    before: set[str] = set()
    for s in ir.walk(body):
        if isinstance(s, ir.Assign) and isinstance(s.value, ir.Const) and s.target.name not in before:
            out.setdefault(s.target.name, s)
        before |= _mentioned_here(s)
    return out


def _mentioned_here(s: ir.Stmt) -> set[str]:
    """The names a statement itself reads or assigns (not those of the statements nested in it)."""
    if isinstance(s, ir.If):
        return _reads(s.cond)
    if isinstance(s, ir.While):
        return _reads(s.cond)
    if isinstance(s, (ir.ForRange, ir.StridedLoop)):
        return _reads(_heads(s)) | _loop_vars(s)
    return _mentioned([s])


def undefined_reads(stmts: list[ir.Stmt], defined: set[str]) -> set[str]:
    """The locals that some read in ``stmts`` may see before any assignment (``defined``: those
    assigned before ``stmts``)."""
    out: set[str] = set()
    _scan(stmts, set(defined), out)
    return out


def _scan(stmts: list[ir.Stmt], defined: set[str], out: set[str]) -> set[str]:
    for s in stmts:
        if isinstance(s, ir.Assign):
            out |= _reads(s.value) - defined
            defined = defined | {s.target.name}
        elif isinstance(s, ir.CallAssign):
            out |= _reads(s.call) - defined
            defined = defined | {t.name for t in s.targets}
        elif isinstance(s, ir.If):
            out |= _reads(s.cond) - defined
            defined = _scan(s.body, defined, out) & _scan(s.orelse, defined, out)
        elif isinstance(s, ir.While):
            out |= _reads(s.cond) - defined
            _scan(s.body, defined, out)  # it may not run: what it assigns is not sure after it
        elif isinstance(s, (ir.ForRange, ir.StridedLoop)):
            out |= _reads(_heads(s)) - defined
            _scan(s.body, defined | _loop_vars(s), out)
        else:
            out |= _reads([v for v in vars(s).values() if isinstance(v, (ir.Expr, tuple, list))]) - defined
    return defined


def _heads(s: ir.ForRange | ir.StridedLoop) -> list[Any]:
    if isinstance(s, ir.ForRange):
        return [s.start, s.stop, s.step]
    return [s.start, s.stop, s.stride, s.chunk, s.group_base]


def _loop_vars(s: ir.ForRange | ir.StridedLoop) -> set[str]:
    local = getattr(s, "local_var", None)
    return {s.var.name} | ({local.name} if local is not None else set())


def _reads(x: Any) -> set[str]:
    """Names of the variables that expressions under ``x`` read (statements' targets excluded)."""
    out: set[str] = set()
    stack = [x]
    while stack:
        y = stack.pop()
        if isinstance(y, ir.Var):
            out.add(y.name)
        elif isinstance(y, (list, tuple)):
            stack.extend(y)
        elif isinstance(y, ir.Assign):
            stack.append(y.value)
        elif isinstance(y, ir.CallAssign):
            stack.append(y.call)
        elif isinstance(y, (ir.ForRange, ir.StridedLoop)):
            stack.extend(_heads(y))
            stack.append(y.body)
        elif isinstance(y, (ir.Expr, ir.Stmt, ir.ArrayRef)):
            stack.extend(v for v in vars(y).values() if isinstance(v, (list, tuple, ir.Expr, ir.Stmt, ir.ArrayRef)))
    return out


def _assigned(x: Any) -> set[str]:
    """Names that statements under ``x`` assign (loop variables included)."""
    out: set[str] = set()
    for s in ir.walk(x if isinstance(x, list) else [x]):
        if isinstance(s, ir.Assign):
            out.add(s.target.name)
        elif isinstance(s, ir.CallAssign):
            out.update(t.name for t in s.targets)
        elif isinstance(s, (ir.ForRange, ir.StridedLoop)):
            out |= _loop_vars(s)
    return out


def _mentioned(stmts: list[ir.Stmt]) -> set[str]:
    return _reads(stmts) | _assigned(stmts)


def _drop_dead_stores(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """``body`` less its assignments of a constant or a variable to names nothing reads."""
    read = _reads(body)

    def keep(stmts: list[ir.Stmt]) -> list[ir.Stmt]:
        out = []
        for s in stmts:
            if isinstance(s, ir.Assign) and s.target.name not in read and isinstance(s.value, (ir.Const, ir.Var)):
                continue
            if isinstance(s, ir.If):
                s = dataclasses.replace(s, body=keep(s.body), orelse=keep(s.orelse))
            elif isinstance(s, (ir.While, ir.ForRange, ir.StridedLoop)):
                s = dataclasses.replace(s, body=keep(s.body))
            out.append(s)
        return out

    return keep(body)


class _Renamer:
    """Gives each replaced top-level definition of a statement list a name of its own (see the
    module docstring); ``taken``: the names already in use."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)

    def fresh(self, name: str) -> str:
        k = 1
        while f"{name}__{k}" in self.taken:
            k += 1
        self.taken.add(f"{name}__{k}")
        return f"{name}__{k}"

    def stmts(self, stmts: list[ir.Stmt]) -> list[ir.Stmt]:
        stmts = [self.nested(s) for s in stmts]
        renamed = self.replaced_definitions(stmts)
        if not renamed:
            return stmts
        out: list[ir.Stmt] = []
        alias: dict[str, ir.Var] = {}
        for i, s in enumerate(stmts):
            if isinstance(s, ir.Assign):
                value = _rename(s.value, alias) if alias else s.value
                alias.pop(s.target.name, None)
                target = s.target
                if i in renamed:
                    target = ir.Var(self.fresh(target.name), target.type)
                    alias[s.target.name] = target
                out.append(dataclasses.replace(s, target=target, value=value))
            else:
                out.append(_rename(s, alias) if alias else s)
        return out

    def nested(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.If):
            return dataclasses.replace(s, body=self.stmts(s.body), orelse=self.stmts(s.orelse))
        if isinstance(s, (ir.While, ir.ForRange, ir.StridedLoop)):
            return dataclasses.replace(s, body=self.stmts(s.body))
        return s

    @staticmethod
    def replaced_definitions(stmts: list[ir.Stmt]) -> set[int]:
        """Positions of the top-level assignments whose value only the statements up to the
        next top-level assignment of the same name read."""
        out: set[int] = set()
        last: dict[str, int] = {}  # name -> position of its latest top-level assignment still open
        for i, s in enumerate(stmts):
            if isinstance(s, ir.Assign):
                j = last.get(s.target.name)
                if j is not None:
                    out.add(j)
                last[s.target.name] = i
                continue
            if any(isinstance(y, _EXITS) for y in ir.walk([s])):
                last.clear()  # a value may leave the list here: no earlier definition is replaced
                continue
            for name in _assigned(s) & last.keys():
                del last[name]  # assigned nested: readers after may see either definition
        return out


def _rename(x: Any, alias: dict[str, ir.Var]) -> Any:
    """``x`` with its reads of ``alias``'s names replaced (no statement under it assigns them)."""
    if isinstance(x, ir.Var):
        return alias.get(x.name, x)
    if isinstance(x, list):
        return [_rename(y, alias) for y in x]
    if isinstance(x, tuple):
        return tuple(_rename(y, alias) for y in x)
    if not isinstance(x, (ir.Expr, ir.Stmt)):
        return x
    return type(x)(**{f.name: _rename(getattr(x, f.name), alias) for f in dataclasses.fields(x) if f.init})


__all__ = ["fewer_definitions", "undefined_reads"]
