"""``verify(kernel)``: the conventions of :mod:`portable.compiler.ir` checked on a kernel's IR.

What the emitters take for granted, checked after the front end and after every compiler pass
where ``ALPYKA_VERIFY_IR=1`` (the test suite's setting, tests/conftest.py):

- explicit casts: every operand already has the type its operation computes in (BinOp and
  Compare operands, assigned, stored, returned and atomic values, Select arms, a device call's
  scalar arguments), conditions are bool, indices integers;
- typed locals: a variable has one type wherever it appears and is a parameter or a declared
  local (``locals``) of its function, or is assigned in it (the inliner's copies are not
  declared: see :mod:`portable.compiler._inline`);
- known operations: each operation field holds a value of its closed set
  (:data:`portable.compiler.ir.OPERATION_SETS`), each math function is declared, each device call
  names a function of the kernel, each index query's dimension is one of the kernel's.
"""

from __future__ import annotations

from typing import Any

from .._errors import AlpykaError
from ..env import SWITCHES, env_flag
from . import ir
from ._depth import deep_recursion
from .types import BOOL, INDEX, ScalarType, TupleType, VoidType
from .visit import Visitor

ENV_VERIFY = "ALPYKA_VERIFY_IR"


class IRVerifyError(AlpykaError, AssertionError):
    """A kernel's IR breaks a convention of :mod:`portable.compiler.ir`: a bug of the front end or
    of a compiler pass (the message names which ran last), never of the user's kernel."""


def verify_enabled() -> bool:
    """Whether ``ALPYKA_VERIFY_IR`` asks for :func:`verify` after the front end and every pass."""
    return env_flag(ENV_VERIFY, False, meaning=SWITCHES[ENV_VERIFY])


@deep_recursion
def verify(kernel: ir.KernelDef, after: str = "") -> None:
    """IRVerifyError listing every broken convention of ``kernel``'s IR (see the module
    docstring); ``after`` names the step that made it (for the message)."""
    problems: list[str] = []
    for fn in kernel.functions.values():
        _Check(kernel, fn, problems).function(fn)
    _Check(kernel, None, problems).function(None)
    if problems:
        where = f" after {after}" if after else ""
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise IRVerifyError(f"kernel {kernel.name!r}: its IR is not well-formed{where}:\n  {shown}")


def _declared(kernel: ir.KernelDef, fn: ir.Function | None) -> dict[str, Any]:
    """The types of the names a function (or the kernel, ``fn`` None) may read without assigning."""
    if fn is None:
        names = {p.name: p.type for p in kernel.params if isinstance(p.type, ScalarType)}
        names[ir.DYNAMIC_SHARED_BYTES] = INDEX
        return {**names, **kernel.locals}
    names = dict(fn.locals)
    for p in fn.params:
        if isinstance(p, ir.Var):
            names[p.name] = p.type
        else:
            names.update({e.name: e.type for e in (*p.extents, p.pitch) if isinstance(e, ir.Var)})
    return names


class _Check(Visitor):
    """One function's (or the kernel body's) walk; every problem appended to ``problems``."""

    visitor_name = "the IR verifier"

    def __init__(self, kernel: ir.KernelDef, fn: ir.Function | None, problems: list[str]) -> None:
        self.k, self.fn, self.problems = kernel, fn, problems
        self.where = f"device function {fn.name!r}" if fn is not None else "the kernel body"
        self.declared = _declared(kernel, fn)
        self.seen: dict[str, Any] = {}  # name -> the type it first appeared with
        self.assigned: set[str] = set()

    def bad(self, node: Any, msg: str) -> None:
        line = getattr(node, "line", 0)
        self.problems.append(f"{self.where}{f' (line {line})' if line else ''}: {type(node).__name__}: {msg}")

    def function(self, fn: ir.Function | None) -> None:
        body = self.k.body if fn is None else fn.body
        self.assigned = {
            t.name
            for s in ir.walk(body)
            for t in (
                [s.target]
                if isinstance(s, ir.Assign)
                else [s.var] + ([s.local_var] if getattr(s, "local_var", None) is not None else [])
                if isinstance(s, (ir.ForRange, ir.StridedLoop))
                else []
            )
        }
        self.stmts(body)

    # ------------------------------------------------------------------ helpers
    def stmts(self, body: list[ir.Stmt]) -> None:
        for s in body:
            if not isinstance(s, ir.Stmt):
                self.problems.append(f"{self.where}: {type(s).__name__} where a statement belongs")
                continue
            self.visit(s)

    def expr(self, e: Any, want: Any = None, what: str = "operand") -> None:
        """Check ``e`` and that it has type ``want`` (when given)."""
        if not isinstance(e, ir.Expr):
            self.problems.append(f"{self.where}: {type(e).__name__} where an expression belongs ({what})")
            return
        if not isinstance(e.type, (ScalarType, VoidType, TupleType)):
            self.bad(e, f"type {e.type!r} is not a scalar type")
        elif isinstance(e.type, TupleType) and not isinstance(e, (ir.Pack, ir.DeviceCall)):
            self.bad(e, f"a {type(e).__name__} of the several values {e.type}: only a Pack or a call has them")
        self.visit(e)
        if want is not None and e.type != want:
            self.bad(e, f"the {what} has type {e.type}, not {want}: a Cast is missing")

    def cond(self, e: Any, what: str = "condition") -> None:
        self.expr(e, BOOL, what)

    def indices(self, node: Any, arr: ir.ArrayRef, idx: tuple) -> None:
        self.array(arr)
        for i in idx:
            self.expr(i, what="index")
            if isinstance(i, ir.Expr) and not i.type.is_integer:
                self.bad(node, f"index of type {i.type} into {arr.name!r}: indices are integers")

    def array(self, arr: Any) -> None:
        if not isinstance(arr, ir.ArrayRef):
            self.problems.append(f"{self.where}: {type(arr).__name__} where an array belongs")
            return
        for e in (*arr.extents, *([arr.pitch] if arr.pitch is not None else [])):
            self.expr(e, what=f"extent of {arr.name!r}")

    def operation(self, node: Any, field: str) -> None:
        allowed = ir.OPERATION_SETS[(type(node).__name__, field)]
        value = getattr(node, field)
        if value not in allowed:
            self.bad(node, f"{field} {value!r} is none of the declared {', '.join(map(repr, allowed))}")

    # ------------------------------------------------------------------ expressions
    def visit_Const(self, e: ir.Const) -> None:
        if isinstance(e.value, bool) and not e.type.is_bool and e.type.is_float:
            self.bad(e, f"a bool constant of type {e.type}")

    def visit_Var(self, e: ir.Var) -> None:
        first = self.seen.setdefault(e.name, e.type)
        if first != e.type:
            self.bad(e, f"variable {e.name!r} appears as {first} and as {e.type}: one type per name")
        declared = self.declared.get(e.name)
        if declared is None and e.name not in self.assigned:
            self.bad(e, f"variable {e.name!r} is neither a parameter nor a declared local, and is never assigned")
        elif declared is not None and declared != e.type:
            self.bad(e, f"variable {e.name!r} is declared {declared} but used as {e.type}")

    def visit_Index(self, e: ir.Index) -> None:
        self.operation(e, "query")
        if e.type != INDEX or not 0 <= e.dim < self.k.ndim:
            self.bad(e, f"{e.query}[{e.dim}] of type {e.type} in a {self.k.ndim}D kernel")

    def visit_Cast(self, e: ir.Cast) -> None:
        self.expr(e.value, what="cast value")

    def visit_UnaryOp(self, e: ir.UnaryOp) -> None:
        self.operation(e, "op")
        self.expr(e.operand, BOOL if e.op == "not" else e.type)

    def visit_BinOp(self, e: ir.BinOp) -> None:
        self.operation(e, "op")
        self.expr(e.left, e.type, "left operand")
        if e.op in ("<<", ">>"):
            self.expr(e.right, what="shift count")
            if isinstance(e.right, ir.Expr) and not e.right.type.is_integer:
                self.bad(e, f"a shift count of type {e.right.type}")
        else:
            self.expr(e.right, e.type, "right operand")

    def visit_Compare(self, e: ir.Compare) -> None:
        self.operation(e, "op")
        self.expr(e.left, what="left operand")
        if isinstance(e.left, ir.Expr):
            self.expr(e.right, e.left.type, "right operand")
        if e.type != BOOL:
            self.bad(e, f"a comparison of type {e.type}")

    def visit_BoolOp(self, e: ir.BoolOp) -> None:
        self.operation(e, "op")
        for v in e.values:
            self.cond(v, "operand of and/or")

    def visit_Select(self, e: ir.Select) -> None:
        self.cond(e.cond)
        self.expr(e.if_true, e.type, "value if true")
        self.expr(e.if_false, e.type, "value if false")

    def visit_MathCall(self, e: ir.MathCall) -> None:
        self.operation(e, "func")
        for a in e.args:
            self.expr(a, what=f"argument of {e.func}")

    def visit_Load(self, e: ir.Load) -> None:
        self.indices(e, e.array, e.indices)
        if isinstance(e.array, ir.ArrayRef) and e.type != e.array.type.dtype:
            self.bad(e, f"a load of type {e.type} from {e.array.name!r} of {e.array.type.dtype}")

    def visit_AtomicOp(self, e: ir.AtomicOp) -> None:
        self.operation(e, "op")
        self.operation(e, "hierarchy")
        self.indices(e, e.array, e.indices)
        dtype = e.array.type.dtype if isinstance(e.array, ir.ArrayRef) else None
        if dtype is not None and e.type != dtype:
            self.bad(e, f"an atomic of type {e.type} on {e.array.name!r} of {dtype}")
        for v in e.operands:
            self.expr(v, dtype, "atomic operand")

    def visit_DeviceCall(self, e: ir.DeviceCall) -> None:
        fn = self.k.functions.get(e.function)
        if fn is None:
            self.bad(e, f"a call of {e.function!r}, which is not a function of the kernel")
            return
        if len(e.args) != len(fn.params):
            self.bad(e, f"{len(e.args)} argument(s) for {len(fn.params)} parameter(s) of {e.function!r}")
        for a, p in zip(e.args, fn.params):
            if isinstance(p, ir.ArrayRef):
                self.array(a)
            else:
                self.expr(a, p.type, f"argument for {p.name!r}")
        if e.type != fn.return_type:
            self.bad(e, f"a call of type {e.type} to {e.function!r} returning {fn.return_type}")

    def visit_Pack(self, e: ir.Pack) -> None:
        if len(e.items) != len(e.type.items):
            self.bad(e, f"{len(e.items)} value(s) packed as {e.type}")
        for item, t in zip(e.items, e.type.items):
            self.expr(item, t, "packed value")

    def visit_WarpOp(self, e: ir.WarpOp) -> None:
        self.operation(e, "op")
        for a in e.args:
            self.expr(a, what=f"operand of warp {e.op}")

    def visit_BlockPredicate(self, e: ir.BlockPredicate) -> None:
        self.operation(e, "op")
        self.cond(e.value, "block predicate")

    def visit_BlockCollectives(self, e: ir.BlockCollectives) -> None:
        return None

    def visit_SingleThreadPerBlock(self, e: ir.SingleThreadPerBlock) -> None:
        return None

    def visit_BlockCollective(self, e: ir.BlockCollective) -> None:
        self.operation(e, "op")
        self.expr(e.value, what=f"operand of a block {e.op}")

    # ------------------------------------------------------------------ statements
    def visit_Assign(self, s: ir.Assign) -> None:
        if not isinstance(s.target, ir.Var):
            self.bad(s, f"an assignment to {type(s.target).__name__}, not a local variable")
            return
        self.visit(s.target)
        self.expr(s.value, s.target.type, f"value assigned to {s.target.name!r}")

    def visit_DeclareLocal(self, s: ir.DeclareLocal) -> None:
        self.array(s.array)

    def visit_Store(self, s: ir.Store) -> None:
        self.indices(s, s.array, s.indices)
        dtype = s.array.type.dtype if isinstance(s.array, ir.ArrayRef) else None
        self.expr(s.value, dtype, "stored value")

    def visit_CallAssign(self, s: ir.CallAssign) -> None:
        self.expr(s.call, what="call of several values")
        t = s.call.type
        if not isinstance(t, TupleType) or len(t.items) != len(s.targets):
            self.bad(s, f"{len(s.targets)} target(s) for a call returning {t}")
            return
        for v, item in zip(s.targets, t.items):
            self.visit(v)
            if v.type != item:
                self.bad(s, f"target {v.name!r} of type {v.type} for a value of type {item}: a Cast is missing")

    def visit_ExprStmt(self, s: ir.ExprStmt) -> None:
        self.expr(s.value, what="expression statement")

    def visit_If(self, s: ir.If) -> None:
        self.cond(s.cond)
        self.stmts(s.body)
        self.stmts(s.orelse)

    def visit_While(self, s: ir.While) -> None:
        self.cond(s.cond)
        self.stmts(s.body)

    def visit_ForRange(self, s: ir.ForRange) -> None:
        self.visit(s.var)
        for head in (s.start, s.stop, s.step):
            self.expr(head, s.var.type, "range bound")
        self.stmts(s.body)

    def visit_StridedLoop(self, s: ir.StridedLoop) -> None:
        self.operation(s, "kind")
        for v in (s.var, s.local_var):
            if v is not None:
                self.visit(v)
        for head in (s.start, s.stop, s.stride, s.chunk, s.group_base):
            if head is not None:
                self.expr(head, INDEX, "loop bound")
        if not 0 <= s.dim < self.k.ndim:
            self.bad(s, f"dimension {s.dim} in a {self.k.ndim}D kernel")
        self.stmts(s.body)

    def visit_Return(self, s: ir.Return) -> None:
        if self.fn is None or isinstance(self.fn.return_type, VoidType):
            if s.value is not None:
                self.bad(s, "a return value where nothing is returned")
            return
        if s.value is None:
            self.bad(s, f"a bare return in a function returning {self.fn.return_type}")
            return
        self.expr(s.value, self.fn.return_type, "returned value")

    def visit_MemFence(self, s: ir.MemFence) -> None:
        self.operation(s, "scope")

    def visit_Assert(self, s: ir.Assert) -> None:
        self.cond(s.cond, "asserted condition")

    def visit_Print(self, s: ir.Print) -> None:
        for x in s.items:
            if not isinstance(x, str):
                self.expr(x, what="printed value")

    def nothing(self, s: ir.Stmt) -> None:
        """A statement without operands."""

    visit_Break = visit_Continue = visit_SyncBlockThreads = nothing


__all__ = ["ENV_VERIFY", "IRVerifyError", "verify", "verify_enabled"]
