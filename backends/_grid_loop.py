"""When the blocks of a CPU launch can run as one flat element loop.

A 1D kernel whose body is (side-effect-free set-up, then) one ``acc.uniform_elements`` loop
gives every block a contiguous chunk of ``elements`` indices per wave of the grid. Running
blocks ``[lo, hi)`` one thread each is then the same, element by element, as one loop over
``[first + lo*e, first + hi*e)`` per wave (every thread still sees its own indices in increasing
order: the flat loop is one legal interleaving of those threads), as long as nothing in the
loop tells two threads apart. That holds when the loop body

- never reads ``block_idx`` (directly, or through a device function taking ``acc``),
- never ``return``s and has no ``break`` of the loop itself (both end one thread only),
- uses no shared memory (per block), and
- reads no local variable that an earlier iteration may have left behind (a value carried from
  one element to the next would leak from one thread into the next).

:func:`flat_grid_loop` checks this on the IR; the numba emitter then replaces the per-block loop
(one call and one grid-stride loop set-up per block) by that flat loop, which LLVM vectorises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from portable.compiler import ir
from portable.compiler.visit import Visitor

#: the array kinds of one block's memory (what the IR's ArrayType says, never the array's name)
SHARED_KINDS = frozenset({"shared", "dynamic_shared"})


@dataclass
class FlatGridLoop:
    """A kernel body as ``prelude`` (assignments run once) and the one ``loop`` after it."""

    prelude: list[ir.Stmt]
    loop: ir.StridedLoop


_nodes = ir.nodes


def _uses_block_identity(x: Any, k: ir.KernelDef) -> bool:
    for y in _nodes(x):
        if isinstance(y, ir.Index) and y.query == "block_idx":
            return True
        if isinstance(y, ir.DeviceCall) and k.functions[y.function].uses_acc:
            return True
        if isinstance(y, ir.ArrayRef) and y.type.kind in SHARED_KINDS:
            return True
    return False


def _has_side_effects(x: Any) -> bool:
    return any(isinstance(y, (ir.AtomicOp, ir.DeviceCall)) for y in _nodes(x))


def _reads(x: Any, local_names: dict) -> set[str]:
    return {y.name for y in _nodes(x) if isinstance(y, ir.Var) and y.name in local_names}


def assigned_names(x: Any) -> set[str]:
    out = set()
    for y in _nodes(x):
        if isinstance(y, ir.Assign):
            out.add(y.target.name)
        elif isinstance(y, ir.CallAssign):
            out.update(t.name for t in y.targets)
        elif isinstance(y, (ir.ForRange, ir.StridedLoop)):
            out.add(y.var.name)
            if isinstance(y, ir.StridedLoop) and y.local_var is not None:
                out.add(y.local_var.name)
    return out


class _DefinedBeforeRead(Visitor):
    """``visit(stmt, defined)``: the locals (of ``locs``) surely assigned after ``stmt`` when
    every local it reads was assigned before (in ``defined``), else None; ``body(stmts,
    defined)`` the same for a statement list."""

    visitor_name = "the flat grid loop's analysis"

    def __init__(self, locs: dict) -> None:
        self.locs = locs

    def body(self, stmts: list[ir.Stmt], defined: set[str]) -> set[str] | None:
        for s in stmts:
            got = self.visit(s, defined)
            if got is None:
                return None
            defined = got
        return defined

    def missing(self, node: Any, *args: Any) -> None:
        return None  # a statement kind not known here: be safe

    def reading(self, x: Any, defined: set[str]) -> set[str] | None:
        """``defined`` when ``x`` reads no local outside it, else None."""
        return None if _reads(x, self.locs) - defined else defined

    def visit_Assign(self, s: ir.Assign, defined: set[str]) -> set[str] | None:
        return None if self.reading(s.value, defined) is None else defined | {s.target.name}

    def visit_CallAssign(self, s: ir.CallAssign, defined: set[str]) -> set[str] | None:
        return None if self.reading(s.call, defined) is None else defined | {t.name for t in s.targets}

    def operands(self, s: ir.Stmt, defined: set[str]) -> set[str] | None:
        """A statement that only reads its operands."""
        return self.reading([v for v in vars(s).values() if isinstance(v, (ir.Expr, tuple, list))], defined)

    visit_Store = visit_ExprStmt = visit_Return = visit_Assert = visit_Print = operands

    def visit_If(self, s: ir.If, defined: set[str]) -> set[str] | None:
        if self.reading(s.cond, defined) is None:
            return None
        a, b = self.body(s.body, defined), self.body(s.orelse, defined)
        return None if a is None or b is None else a & b

    def visit_While(self, s: ir.While, defined: set[str]) -> set[str] | None:
        if self.reading(s.cond, defined) is None or self.body(s.body, defined) is None:
            return None
        return defined

    def visit_ForRange(self, s: ir.ForRange, defined: set[str]) -> set[str] | None:
        return self.loop([s.start, s.stop, s.step], {s.var.name}, s.body, defined)

    def visit_StridedLoop(self, s: ir.StridedLoop, defined: set[str]) -> set[str] | None:
        own = {s.var.name} | ({s.local_var.name} if s.local_var is not None else set())
        return self.loop([s.start, s.stop, s.stride, s.chunk], own, s.body, defined)

    def loop(self, heads: list, own: set[str], body: list[ir.Stmt], defined: set[str]) -> set[str] | None:
        """A loop whose ``heads`` are read before it and whose ``own`` variables its body sees."""
        if self.reading(heads, defined) is None or self.body(body, defined | own) is None:
            return None
        return defined

    def nothing(self, s: ir.Stmt, defined: set[str]) -> set[str]:
        """A statement that reads no local."""
        return defined

    visit_Break = visit_Continue = visit_SyncBlockThreads = visit_DeclareLocal = nothing


def defined_before_read(stmts: list[ir.Stmt], defined: set[str], locs: dict) -> set[str] | None:
    """The locals surely assigned after ``stmts`` when every local they read was assigned
    before (in ``defined`` or earlier in ``stmts``); None when some read may see an older value."""
    return _DefinedBeforeRead(locs).body(stmts, set(defined))


def _direct_breaks(body: list[ir.Stmt]) -> bool:
    for s in body:
        if isinstance(s, ir.Break):
            return True
        if isinstance(s, ir.If) and (_direct_breaks(s.body) or _direct_breaks(s.orelse)):
            return True
    return False


def flat_grid_loop(k: ir.KernelDef) -> FlatGridLoop | None:
    """The kernel as prelude + one flat-able ``uniform_elements`` loop, or None (see module doc)."""
    if k.ndim != 1 or k.shared or k.private or k.uses_dynamic_shared or not k.body:
        return None
    *prelude, loop = k.body
    if not isinstance(loop, ir.StridedLoop) or loop.kind != "uniform_elements" or loop.local_var is not None:
        return None
    for s in prelude:
        if not isinstance(s, ir.Assign) or _uses_block_identity(s, k) or _has_side_effects(s):
            return None
    if _uses_block_identity([loop.stop, loop.stride, loop.chunk, loop.body], k):
        return None
    if _direct_breaks(loop.body) or any(isinstance(y, ir.Return) for y in _nodes(loop.body)):
        return None
    # locals set once before the loop and never reassigned in it are the same for every thread
    body_assigned = assigned_names(loop.body)
    fixed = {s.target.name for s in prelude} - body_assigned
    if defined_before_read(loop.body, fixed | {loop.var.name}, k.locals) is None:
        return None
    return FlatGridLoop(list(prelude), loop)


def non_negative(e: ir.Expr, known: set[str]) -> bool:
    """True when ``e`` is surely >= 0: constants >= 0, index queries, names in ``known`` and
    sums/products of those."""
    if isinstance(e, ir.Const):
        return not isinstance(e.value, float) and e.value >= 0
    if isinstance(e, ir.Index):
        return True
    if isinstance(e, ir.Var):
        return e.name in known
    if isinstance(e, ir.BinOp) and e.op in ("+", "*"):
        return non_negative(e.left, known) and non_negative(e.right, known)
    return False


__all__ = ["SHARED_KINDS", "FlatGridLoop", "assigned_names", "defined_before_read", "flat_grid_loop", "non_negative"]
