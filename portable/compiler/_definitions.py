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
  (``<name>__<n>``) that its readers use;
- a copy ``x = y`` of locals assigned once each is dropped, its readers read ``y``.

The same floating-point operations run in the same order: the results keep their bits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import ir
from ._known_values import EXITS as _EXITS
from ._known_values import fold_known_branches
from ._reads import assigned, heads, loop_vars, reads, undefined_reads


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
    return _without_copies(_Renamer(names).stmts(body)), keep


def _without_copies(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """``body`` less its copies ``x = y`` of one local into another where each is assigned by
    one statement only and no read may see either unassigned: every read of ``x`` then sees the
    value ``y`` has for good, and reads ``y`` instead (a chain ``x = y; z = x`` reads ``y``)."""
    count: dict[str, int] = {}
    copies: dict[str, ir.Assign] = {}
    for s in ir.walk(body):
        for name in _defined_here(s):
            count[name] = count.get(name, 0) + 1
        if isinstance(s, ir.Assign) and isinstance(s.value, ir.Var) and s.value.type == s.target.type:
            copies[s.target.name] = s
    unset = undefined_reads(body, set())
    alias: dict[str, ir.Var] = {}
    for name, s in copies.items():
        source = s.value.name
        if count.get(name) == 1 and count.get(source) == 1 and not {name, source} & unset:
            alias[name] = s.value
    for name, var in alias.items():  # a chain: to its first source
        while var.name in alias:
            var = alias[var.name]
        alias[name] = var
    if not alias:
        return body
    gone = {id(s) for name, s in copies.items() if name in alias}
    return _rename(_without(body, gone), alias)


def _defined_here(s: ir.Stmt) -> list[str]:
    """The names a statement itself assigns (a loop: its variables)."""
    if isinstance(s, ir.Assign):
        return [s.target.name]
    if isinstance(s, ir.CallAssign):
        return [t.name for t in s.targets]
    if isinstance(s, (ir.ForRange, ir.StridedLoop)):
        return sorted(loop_vars(s))
    return []


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
        return reads(s.cond)
    if isinstance(s, ir.While):
        return reads(s.cond)
    if isinstance(s, (ir.ForRange, ir.StridedLoop)):
        return reads(heads(s)) | loop_vars(s)
    return _mentioned([s])


def _mentioned(stmts: list[ir.Stmt]) -> set[str]:
    return reads(stmts) | assigned(stmts)


def _drop_dead_stores(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """``body`` less its assignments of a constant or a variable to names nothing reads."""
    read = reads(body)

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
            for name in assigned(s) & last.keys():
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
    return type(x)(**{f: _rename(getattr(x, f), alias) for f in ir.field_names(type(x))})


__all__ = ["fewer_definitions"]
