"""Device functions inlined into a kernel's IR for the numba emitter.

The C backends mark device functions ``static inline`` / ``__forceinline__``; numba compiles each
``@njit`` function apart and calls it through its calling convention (a reference count per array
argument, a status code per call), and LLVM inlines none of the big ones (Philox's ten rounds
ran at 45-90 ns a draw). numba's own ``inline="always"`` works on its IR and doubled the compile
time of the suite's random-number kernels (one kernel 7 s -> 45 s), so this inliner works on the
kernel's IR before the emitter sees it: :func:`inline_device_functions` gives a kernel whose body
has no :class:`~portable.compiler.ir.DeviceCall` left, every call replaced by a copy of the
function's body with

- its locals and scalar parameters renamed ``i<N>_<name>`` (``N`` one per inlined call),
  scalar parameters bound to the call's arguments (a variable or constant used as it is, any
  other expression assigned once, before the body),
- its array parameters replaced by the caller's arrays (shared, private, kernel arrays: the
  emitter sees what it addresses), their ``<name>_e<d>`` / ``<name>_pitch`` variables by the
  caller's extents and pitch,
- ``return value`` as an assignment of the call's result variable (``return a, b``: of the
  CallAssign's targets, one each; and, where a return is not
  the body's last statement, a ``break`` out of a one-trip ``while True`` around the body, with
  a flag that carries it out of the function's own loops),
- its locals set to zero first where the function may read one before assigning it (each call
  of a function starts with zeroed locals); otherwise they are not declared at all (the emitter
  zeroes the kernel's locals first: a second definition of each that numba's SSA pass would merge,
  which made the compile time grow with every inlined copy).

A call inside an expression is evaluated before the statement that holds it, in Python's order:
operands evaluated before it that read memory are bound to temporaries first, a call in a lazy
operand (``a if c else f()``, ``c and f()``) becomes an ``if``, one in a ``while`` condition moves
into the loop (``while True: ...; if not cond: break``).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from . import ir
from ._grid_loop import defined_before_read
from .types import BOOL, VoidType

#: node kinds whose value depends on memory (bound to a temporary when a later call could change it)
_READS = (ir.Load, ir.AtomicOp, ir.WarpOp, ir.BlockPredicate, ir.BlockCollective)
_LOOPS = (ir.While, ir.ForRange, ir.StridedLoop)


def inline_device_functions(kernel: ir.KernelDef) -> ir.KernelDef:
    """``kernel`` with every device-function call inlined (a new Kernel; ``kernel`` is unchanged)."""
    if not kernel.functions or not any(isinstance(y, ir.DeviceCall) for y in ir.nodes(kernel.body)):
        return kernel
    inl = _Inliner(kernel)
    body = inl.stmts(kernel.body)
    # every call is inlined: the functions are emitted no more
    # the inlined locals are left out of ``locals`` (which the emitter declares, zeroed): each is
    # assigned before it is read, so numba's SSA pass has one definition fewer of each to merge;
    # the functions' per-thread arrays become the kernel's (one per function: never two live at once)
    private = list(kernel.private) + [a for fn in kernel.functions.values() for a in fn.private]
    return dataclasses.replace(kernel, body=body, functions={}, private=private)


class _Inliner:
    def __init__(self, kernel: ir.KernelDef) -> None:
        self.functions = kernel.functions
        self.new_locals: dict[str, Any] = {}
        self.count = itertools.count()
        self.ready: dict[str, tuple[list[ir.Stmt], dict[str, Any]]] = {}  # name -> (body, locals), calls inlined
        self.calls: dict[int, bool] = {}

    # ------------------------------------------------------------------ names
    def fresh(self, name: str, t: Any) -> ir.Var:
        """A new local of the kernel (``i<N>_<name>``)."""
        full = f"i{next(self.count)}_{name}"
        self.new_locals[full] = t
        return ir.Var(full, t)

    def has_call(self, x: Any) -> bool:
        got = self.calls.get(id(x))
        if got is None:
            got = any(isinstance(y, ir.DeviceCall) for y in ir.nodes(x))
            self.calls[id(x)] = got
        return got

    # ------------------------------------------------------------------ statements
    def stmts(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in body:
            out += self.stmt(s) if self.has_call(s) else [s]
        return out

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        pre: list[ir.Stmt] = []
        if isinstance(s, ir.ExprStmt) and isinstance(s.value, ir.DeviceCall):
            self.call(s.value, pre, want=False)
            return pre
        if isinstance(s, ir.CallAssign):  # several values: the returns assign the targets
            self.call(s.call, pre, want=True, into=s.targets)
            return pre
        if isinstance(s, ir.Assign):
            return pre + [ir.Assign(s.target, self.lift(s.value, pre), s.line)]
        if isinstance(s, ir.ExprStmt):
            return pre + [ir.ExprStmt(self.lift(s.value, pre), s.line)]
        if isinstance(s, ir.Store):
            value, *idx = self.lift_all([s.value, *s.indices], pre)
            return pre + [ir.Store(s.array, tuple(idx), value, s.line, s.check)]
        if isinstance(s, ir.If):
            cond = self.lift(s.cond, pre)
            return pre + [ir.If(cond, self.stmts(s.body), self.stmts(s.orelse), s.line)]
        if isinstance(s, ir.While):
            if not self.has_call(s.cond):
                return [ir.While(s.cond, self.stmts(s.body), s.line)]
            cond = self.lift(s.cond, pre)
            stop = ir.If(ir.UnaryOp("not", cond, BOOL), [ir.Break(s.line)], [], s.line)
            return [ir.While(ir.Const(True, BOOL), pre + [stop] + self.stmts(s.body), s.line)]
        if isinstance(s, ir.ForRange):
            start, stop, step = self.lift_all([s.start, s.stop, s.step], pre)
            return pre + [dataclasses.replace(s, start=start, stop=stop, step=step, body=self.stmts(s.body))]
        if isinstance(s, ir.StridedLoop):
            heads = [s.start, s.stop, s.stride, s.chunk] + ([s.group_base] if s.group_base is not None else [])
            start, stop, stride, chunk, *base = self.lift_all(heads, pre)
            return pre + [
                dataclasses.replace(
                    s,
                    start=start,
                    stop=stop,
                    stride=stride,
                    chunk=chunk,
                    group_base=base[0] if base else None,
                    body=self.stmts(s.body),
                )
            ]
        if isinstance(s, ir.Return):
            return pre + [ir.Return(self.lift(s.value, pre), s.line)]
        if isinstance(s, ir.Assert):
            return pre + [ir.Assert(self.lift(s.cond, pre), s.message, s.line)]
        if isinstance(s, ir.Print):
            exprs = self.lift_all([x for x in s.items if not isinstance(x, str)], pre)
            items = [x if isinstance(x, str) else exprs.pop(0) for x in s.items]
            return pre + [ir.Print(items, s.line)]
        raise TypeError(f"the inliner does not know {type(s).__name__}")  # pragma: no cover

    # ------------------------------------------------------------------ expressions
    def lift_all(self, exprs: list, pre: list[ir.Stmt]) -> list:
        """``exprs`` evaluated left to right with their calls moved into ``pre``: an operand that
        reads memory before a later operand's call is bound to a temporary first."""
        out = []
        for k, e in enumerate(exprs):
            e = self.lift(e, pre)
            if any(self.has_call(x) for x in exprs[k + 1 :]) and any(isinstance(y, _READS) for y in ir.nodes(e)):
                tmp = self.fresh("t", e.type)
                pre.append(ir.Assign(tmp, e))
                e = tmp
            out.append(e)
        return out

    def lift(self, e: Any, pre: list[ir.Stmt]) -> Any:
        """``e`` without calls: their bodies go to ``pre``, their results are variables."""
        if e is None or not self.has_call(e):
            return e
        if isinstance(e, ir.DeviceCall):
            return self.call(e, pre, want=True)
        if isinstance(e, ir.Select):
            cond = self.lift(e.cond, pre)
            if not (self.has_call(e.if_true) or self.has_call(e.if_false)):
                return ir.Select(cond, e.if_true, e.if_false, e.type)
            tmp = self.fresh("t", e.type)
            pre.append(ir.If(cond, self._assigning(tmp, e.if_true), self._assigning(tmp, e.if_false)))
            return tmp
        if isinstance(e, ir.BoolOp):
            first = self.lift(e.values[0], pre)
            rest = e.values[1:]
            if not any(self.has_call(v) for v in rest):
                return ir.BoolOp(e.op, [first, *rest], e.type)
            tmp = self.fresh("t", BOOL)
            pre.append(ir.Assign(tmp, first))
            target = pre
            for v in rest:  # a and b and c: tmp = a; if tmp: tmp = b; if tmp: tmp = c
                test = tmp if e.op == "and" else ir.UnaryOp("not", tmp, BOOL)
                body = self._assigning(tmp, v)
                target.append(ir.If(test, body, []))
                target = body
            return tmp
        fields = ir.field_names(type(e))
        values = [getattr(e, f) for f in fields]
        slots = [
            k
            for k, v in enumerate(values)
            if isinstance(v, ir.Expr) or (isinstance(v, (list, tuple)) and v and all(isinstance(x, ir.Expr) for x in v))
        ]
        flat: list = []
        for k in slots:
            flat += list(values[k]) if isinstance(values[k], (list, tuple)) else [values[k]]
        lifted = self.lift_all(flat, pre)
        for k in slots:
            v = values[k]
            if isinstance(v, (list, tuple)):
                values[k] = type(v)(lifted[: len(v)])
                del lifted[: len(v)]
            else:
                values[k] = lifted.pop(0)
        return type(e)(**dict(zip(fields, values)))

    def _assigning(self, tmp: ir.Var, e: Any) -> list[ir.Stmt]:
        """Statements that evaluate ``e`` (calls inlined) into ``tmp``."""
        body: list[ir.Stmt] = []
        body.append(ir.Assign(tmp, self.lift(e, body)))
        return body

    # ------------------------------------------------------------------ calls
    def call(self, c: ir.DeviceCall, pre: list[ir.Stmt], want: bool, into: list[ir.Var] | None = None) -> Any:
        """Append the inlined body of call ``c`` to ``pre``; return its result variable (None for
        a void function or when not ``want``ed). ``into``: the variables a function returning
        several values assigns (a CallAssign's targets, fresh temporaries its body never reads)."""
        fn = self.functions[c.function]
        body, locs = self.function_body(fn)
        args = self.lift_all(list(c.args), pre) if any(self.has_call(a) for a in c.args) else list(c.args)
        n = next(self.count)
        subst: dict[str, Any] = {}
        arrays: dict[str, ir.ArrayRef] = {}
        for p, a in zip(fn.params, args):
            if isinstance(p, ir.ArrayRef):
                arrays[p.name] = a
                for ext, got in zip(p.extents, a.extents):
                    subst[ext.name] = got
                if p.pitch is not None:
                    subst[p.pitch.name] = a.pitch
            elif isinstance(a, (ir.Var, ir.Const, ir.Index)):
                subst[p.name] = a
            else:
                v = self._local(n, p.name, p.type, subst)
                pre.append(ir.Assign(v, a))
        for name, t in locs.items():
            self._local(n, name, t, subst)
        params = {p.name for p in fn.params if not isinstance(p, ir.ArrayRef)}
        if defined_before_read(body, params, locs) is None:  # each call starts with zeroed locals
            pre += [ir.Assign(subst[name], ir.Const(0, t)) for name, t in locs.items()]
        result: Any = None
        if into is not None:
            result = list(into)
        elif want and not isinstance(fn.return_type, VoidType):
            result = self._local(n, "ret", fn.return_type, subst)
        copied = _Copy(subst, arrays).stmts(body)
        pre += returns_as_breaks(copied, result, lambda: self._local(n, "done", BOOL, {}))
        return result

    def _local(self, n: int, name: str, t: Any, subst: dict[str, Any]) -> ir.Var:
        full = f"i{n}_{name}"
        self.new_locals[full] = t
        subst[name] = v = ir.Var(full, t)
        return v

    def function_body(self, fn: ir.Function) -> tuple[list[ir.Stmt], dict[str, Any]]:
        """``fn``'s body with its own calls inlined, and its locals (the inlined ones included)."""
        got = self.ready.get(fn.name)
        if got is None:
            saved, self.new_locals = self.new_locals, {}
            try:
                body = self.stmts(fn.body)
                got = (body, {**fn.locals, **self.new_locals})
            finally:
                self.new_locals = saved
            self.ready[fn.name] = got
        return got


class _Copy:
    """A copy of IR with variables renamed (``subst``: name -> expression) and array parameters
    replaced (``arrays``: name -> the caller's ArrayRef)."""

    def __init__(self, subst: dict[str, Any], arrays: dict[str, ir.ArrayRef]) -> None:
        self.subst = subst
        self.arrays = arrays

    def stmts(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        return [self.node(s) for s in body]

    def node(self, x: Any) -> Any:
        if isinstance(x, ir.Var):
            return self.subst.get(x.name, x)
        if isinstance(x, ir.ArrayRef):
            got = self.arrays.get(x.name)
            if got is not None:
                return got
        if isinstance(x, (list, tuple)):
            return type(x)(self.node(y) for y in x)
        if not isinstance(x, (ir.Expr, ir.Stmt, ir.ArrayRef)):
            return x
        return type(x)(**{f: self.node(getattr(x, f)) for f in ir.field_names(type(x))})


def kernel_body_in_block_loop(kernel: ir.KernelDef) -> tuple[list[ir.Stmt], dict[str, Any]]:
    """The kernel's body for the numba emitter to write inside its loop over blocks: a
    ``return`` (the thread ends) becomes a ``break`` out of a one-trip loop around the body; and
    the locals that adds (a flag when a return sits inside a loop)."""
    extra: dict[str, Any] = {}

    def flag() -> ir.Var:
        extra["_thread_done"] = BOOL
        return ir.Var("_thread_done", BOOL)

    return returns_as_breaks(kernel.body, None, flag), extra


def returns_as_breaks(body: list[ir.Stmt], result: ir.Var | None, new_flag: Any) -> list[ir.Stmt]:
    """``body`` (of a function or a thread) with its ``return``s replaced: ``result = value``
    (when ``result`` is given), then a ``break`` out of a one-trip ``while True`` around the
    body; a return inside one of the body's loops also sets a flag (``new_flag()`` makes it) that
    breaks each enclosing loop. A body whose only return is its last statement needs no loop."""
    rets = [s for s in ir.walk(body) if isinstance(s, ir.Return)]
    if not rets:
        return body
    if len(rets) == 1 and body and body[-1] is rets[0]:
        return body[:-1] + _result(result, rets[0])
    flag = (
        new_flag()
        if any(
            isinstance(y, ir.Return) for loop in ir.walk(body) if isinstance(loop, _LOOPS) for y in ir.walk(loop.body)
        )
        else None
    )

    def rewrite(stmts: list[ir.Stmt], depth: int) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            if isinstance(s, ir.Return):
                out += _result(result, s)
                if depth:
                    out.append(ir.Assign(flag, ir.Const(True, BOOL), s.line))
                out.append(ir.Break(s.line))
                continue
            if isinstance(s, ir.If):
                out.append(ir.If(s.cond, rewrite(s.body, depth), rewrite(s.orelse, depth), s.line))
                continue
            if isinstance(s, _LOOPS) and any(isinstance(y, ir.Return) for y in ir.walk(s.body)):
                out.append(dataclasses.replace(s, body=rewrite(s.body, depth + 1)))
                out.append(ir.If(flag, [ir.Break(s.line)], [], s.line))
                continue
            out.append(s)
        return out

    inner = rewrite(body, 0)
    if not (inner and isinstance(inner[-1], ir.Break)):
        inner.append(ir.Break())
    head = [ir.Assign(flag, ir.Const(False, BOOL))] if flag is not None else []
    # the result is assigned before every break, but not as any analysis sees it
    head += [ir.Assign(r, ir.Const(0, r.type)) for r in _as_list(result)]
    return head + [ir.While(ir.Const(True, BOOL), inner)]


def _as_list(result: ir.Var | list[ir.Var] | None) -> list[ir.Var]:
    return [] if result is None else result if isinstance(result, list) else [result]


def _result(result: ir.Var | list[ir.Var] | None, ret: ir.Return) -> list[ir.Stmt]:
    """The assignments that stand for ``ret`` (``result = value``; for several values, each
    target its item of the Pack, in order)."""
    if result is None or ret.value is None:
        return []
    if isinstance(ret.value, ir.Pack):
        return [ir.Assign(r, v, ret.line) for r, v in zip(result, ret.value.items)]
    return [ir.Assign(result, ret.value, ret.line)]


__all__ = ["inline_device_functions", "kernel_body_in_block_loop", "returns_as_breaks"]
