"""Which locals a statement list of the kernel IR reads and assigns, and which of them a read may
see before any assignment: the analyses that the folding of :mod:`portable.compiler._known_values`
and the renaming of :mod:`portable.compiler._definitions` share."""

from __future__ import annotations

from typing import Any

from . import ir


def undefined_reads(stmts: list[ir.Stmt], defined: set[str]) -> set[str]:
    """The locals that some read in ``stmts`` may see before any assignment (``defined``: those
    assigned before ``stmts``)."""
    out: set[str] = set()
    _scan(stmts, set(defined), out)
    return out


def _scan(stmts: list[ir.Stmt], defined: set[str], out: set[str]) -> set[str]:
    for s in stmts:
        if isinstance(s, ir.Assign):
            out |= reads(s.value) - defined
            defined = defined | {s.target.name}
        elif isinstance(s, ir.CallAssign):
            out |= reads(s.call) - defined
            defined = defined | {t.name for t in s.targets}
        elif isinstance(s, ir.If):
            out |= reads(s.cond) - defined
            defined = _scan(s.body, defined, out) & _scan(s.orelse, defined, out)
        elif isinstance(s, ir.While):
            out |= reads(s.cond) - defined
            _scan(s.body, defined, out)  # it may not run: what it assigns is not sure after it
        elif isinstance(s, (ir.ForRange, ir.StridedLoop)):
            out |= reads(heads(s)) - defined
            _scan(s.body, defined | loop_vars(s), out)
        else:
            out |= reads([v for v in vars(s).values() if isinstance(v, (ir.Expr, tuple, list))]) - defined
    return defined


def heads(s: ir.ForRange | ir.StridedLoop) -> list[Any]:
    """The expressions a loop evaluates before its first trip (its bounds, its step)."""
    if isinstance(s, ir.ForRange):
        return [s.start, s.stop, s.step]
    return [s.start, s.stop, s.stride, s.chunk, s.group_base]


def loop_vars(s: ir.ForRange | ir.StridedLoop) -> set[str]:
    """The names a loop assigns at each trip (its variable; a group loop's local index too)."""
    local = getattr(s, "local_var", None)
    return {s.var.name} | ({local.name} if local is not None else set())


def reads(x: Any) -> set[str]:
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
            stack.extend(heads(y))
            stack.append(y.body)
        elif isinstance(y, (ir.Expr, ir.Stmt, ir.ArrayRef)):
            stack.extend(v for v in vars(y).values() if isinstance(v, (list, tuple, ir.Expr, ir.Stmt, ir.ArrayRef)))
    return out


def assigned(x: Any) -> set[str]:
    """Names that statements under ``x`` assign (loop variables included)."""
    out: set[str] = set()
    for s in ir.walk(x if isinstance(x, list) else [x]):
        if isinstance(s, ir.Assign):
            out.add(s.target.name)
        elif isinstance(s, ir.CallAssign):
            out.update(t.name for t in s.targets)
        elif isinstance(s, (ir.ForRange, ir.StridedLoop)):
            out |= loop_vars(s)
    return out


__all__ = ["assigned", "heads", "loop_vars", "reads", "undefined_reads"]
