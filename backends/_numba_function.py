"""The numba emitter's statements and expressions: one generated function's body written from the
kernel IR (:class:`FunctionEmitter`), numpy's fixed-width integer rules where numba's operators
differ, and the constants and loops of the CPU backends' one-thread blocks. The module around the
functions (its header, helpers and ``launch``) is :mod:`backends._numba_emit`'s."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from portable.compiler import ir
from portable.compiler.operations import INTRINSICS, MATH, OPERATORS, UNARY
from portable.compiler.types import ScalarType
from portable.compiler.visit import Visitor

from ._numba_atomics import numba_atomic
from ._numba_fold import KnownIntegers

if TYPE_CHECKING:
    from ._numba_emit import ModuleEmitter

_MATH = {name: f.numba for name, f in MATH.items()}  #: numba spelling of each math function


# numpy's fixed-width rules where numba's operators differ (declared with each operator in
# portable/compiler/operations.py, as the C helpers and the front-end's folding are):
#: (operator, unsigned result) -> the helper of NUMBA_HELPERS that computes it
ARITH_HELPER = {
    (op.symbol, unsigned): helper
    for op in OPERATORS.values()
    for unsigned, helper in ((False, op.numba_signed), (True, op.numba_unsigned))
    if helper is not None
}


def _count_in_range(count: int | None, t: ScalarType) -> bool:
    """A shift count known when the code is written and in ``[0, bits)``, where numba's ``<<``
    and ``>>`` give numpy's bits (numba wraps other counts modulo 64: the helpers)."""
    return count is not None and 0 <= count < t.bits


def _const(value: object, t: ScalarType) -> str:
    """``value`` of type ``t`` as numba source (numpy's scalar of ``t`` where it is not int64 or float64)."""
    if t.is_bool:
        return "True" if value else "False"
    if t.is_float:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            s = "math.nan"
        elif math.isinf(v):
            s = "math.inf" if v > 0 else "(-math.inf)"
        else:
            s = repr(v)
        return s if t.name == "float64" else f"np.float32({s})"
    if t.name == "int64":
        return str(int(value)) if int(value) >= 0 else f"({int(value)})"  # type: ignore[arg-type]
    return f"np.{t.name}({int(value)})"  # type: ignore[arg-type]


class FunctionEmitter(Visitor):
    """One generated function: ``ex`` renders an expression, ``stmt`` appends a statement's lines at
    a depth (one ``visit_`` method per node kind of the IR)."""

    visitor_name = "the numba emitter"

    def __init__(self, module: ModuleEmitter, ndim: int) -> None:
        self.m = module
        self.ndim = ndim
        self.lines: list[str] = []
        self.loops: list[tuple[str, str | None]] = []  # (kind, break flag name)
        self.nflag = 0
        self.ints = KnownIntegers()  # integer values known as the code is written (folded away)
        self.known, self.fold = self.ints.known, self.ints.fold

    # ------------------------------------------------------------------ expressions
    def ex(self, e: object) -> str:
        return self.visit(e)

    def visit_Const(self, e: ir.Const) -> str:
        return _const(e.value, e.type)

    def visit_Var(self, e: ir.Var) -> str:
        return e.name

    def visit_Index(self, e: ir.Index) -> str:
        if e.query == "block_idx" and self.ints.block_idx_zero:
            return "0"
        return {
            "block_idx": f"bi{e.dim}",
            "thread_idx": "0",
            "grid_blocks": f"gb{e.dim}",
            "block_threads": "1",
            "thread_elements": f"te{e.dim}",
        }[e.query]

    def visit_Cast(self, e: ir.Cast) -> str:
        inner = self.ex(e.value)
        if e.type.is_bool:
            return f"({inner} != 0)"
        if e.value.type.is_float and e.type.is_integer:  # saturating: backends/_float_to_int.py
            return f"{self.m.float_to_int(e.value.type, e.type)}({inner})"
        return f"np.{e.type.name}({inner})"

    def visit_UnaryOp(self, e: ir.UnaryOp) -> str:
        return UNARY[e.op].numba_text(self.ex(e.operand), e.type)  # declared in operations.py

    def visit_BinOp(self, e: ir.BinOp) -> str:
        folded = self.fold(e)
        if folded is not None:  # less for numba to type and compile (the first launch's cost)
            return _const(folded, e.type) if isinstance(folded, int) else self.ex(folded)
        if _wrapping(e):  # a chain of them: one cast back to the signed type, not one per operator
            return f"np.{e.type.name}({self.wrapping_chain(e)})"
        a, b, t = self.ex(e.left), self.ex(e.right), e.type
        # a + b + c, not ((a + b) + c): CPython nests 200 parentheses at most (a folded left
        # operand is written without its parentheses already)
        if _same_group(e, e.left) and self.fold(e.left) is None:
            a = a[1:-1]
        helper = ARITH_HELPER.get((e.op, t.is_unsigned)) if t.is_integer else None
        if helper is not None and e.op in ("<<", ">>") and _count_in_range(self.known(e.right), t):
            helper = None  # numba's operator is numpy's there: no helper call to type and inline
        if helper is not None:  # numpy's fixed-width rule where numba's differs (see NUMBA_HELPERS)
            if e.right.type.is_bool:
                b = f"np.int64({b})"
            r = f"{self.m.helper(helper)}({a}, {b})"
        else:
            r = f"({a} {e.op} {b})"
        if e.op in ("**", "<<", ">>") and e.type.name not in ("int64", "float64"):
            r = f"np.{e.type.name}({r})"
        return r

    def wrapping_chain(self, e: ir.BinOp) -> str:
        """``np.uint64(a) op np.uint64(b) op ...`` of a left-deep chain of signed ``+ -`` or ``*``:
        numba marks signed arithmetic ``nsw`` (no signed wrap), so LLVM may fold ``(x + 1) > x``
        to True or drop a zero-divisor check (SIGFPE); unsigned arithmetic wraps, and the cast
        back gives numpy's bits (the C emitter computes through the unsigned twin too)."""
        left = e.left
        if (
            _wrapping(left)
            and left.type == e.type
            and _PLAIN_GROUP[left.op] == _PLAIN_GROUP[e.op]
            and self.fold(left) is None
        ):
            head = self.wrapping_chain(left)
        else:
            head = self._unsigned(left)
        return f"{head} {e.op} {self._unsigned(e.right)}"

    def _unsigned(self, x: object) -> str:
        if isinstance(x, ir.Const) and x.type.is_integer:
            return f"np.uint64({int(x.value) % 2**64})"
        return f"np.uint64({self.ex(x)})"

    def visit_Compare(self, e: ir.Compare) -> str:
        return f"({self.ex(e.left)} {e.op} {self.ex(e.right)})"

    def visit_BoolOp(self, e: ir.BoolOp) -> str:
        return "(" + f" {e.op} ".join(self.ex(v) for v in e.values) + ")"

    def visit_Select(self, e: ir.Select) -> str:
        return f"({self.ex(e.if_true)} if {self.ex(e.cond)} else {self.ex(e.if_false)})"

    def visit_MathCall(self, e: ir.MathCall) -> str:
        if e.func in INTRINSICS:  # the bit intrinsics, declared in operations.py
            return INTRINSICS[e.func].numba_text(self.ex(e.args[0]), e.args[0].type, self.m.helper)
        if e.func == "bit_cast":  # acc.bit_cast: numba views numpy scalars
            return f"np.{e.args[0].type.name}({self.ex(e.args[0])}).view(np.{e.type.name})"
        if e.func in ("floor", "ceil", "trunc") and e.type.is_integer:  # of a float: saturating
            return f"{self.m.float_to_int(e.args[0].type, e.type)}(np.{e.func}({self.ex(e.args[0])}))"
        r = f"{_MATH[e.func]}({', '.join(self.ex(a) for a in e.args)})"
        if e.type.name not in ("int64", "float64", "bool"):
            r = f"np.{e.type.name}({r})"
        return r

    def visit_Load(self, e: ir.Load) -> str:
        return f"{e.array.name}[{self.index(e.array, e.indices, e.check)}]"

    def visit_AtomicOp(self, e: ir.AtomicOp) -> str:
        ops = ", ".join(self.ex(o) for o in e.operands)
        idx = self.index(e.array, e.indices, e.check) if e.indices else ""
        if len(e.indices) == 1:
            idx += ","
        fn = numba_atomic(e.op, e.array.type, e.hierarchy, self.m.serial)  # plain where nothing contends
        return f"{fn}({e.array.name}, ({idx}), {ops})"

    def visit_DeviceCall(self, e: ir.DeviceCall) -> str:
        fn = self.m.kernel.functions[e.function]
        args = [a.name if isinstance(a, ir.ArrayRef) else self.ex(a) for a in e.args]
        if fn.uses_acc:
            args = self.m.ctx_args() + args
        return f"{e.function}({', '.join(args)})"

    def visit_Pack(self, e: ir.Pack) -> str:  # return a, b of a function not inlined
        return f"({', '.join(self.ex(x) for x in e.items)},)"

    def visit_WarpOp(self, e: ir.WarpOp) -> str:  # one-thread warps: the thread is lane 0 of a warp of 1
        if e.op == "size":
            return "1"
        if e.op in ("active_mask", "match_any", "match_all"):  # the lane itself, which agrees with itself
            return "np.uint64(1)"
        if e.op == "ballot":
            return f"np.uint64(1 if {self.ex(e.args[0])} else 0)"
        if e.op == "ballot_mask":  # the lane's bit where the mask names it
            return f"(np.uint64(1 if {self.ex(e.args[1])} else 0) & np.uint64({self.ex(e.args[0])}))"
        if e.op == "shfl_mask":
            return self.ex(e.args[1])
        return self.ex(e.args[0])  # all/any of p: p; every shuffle (shfl_width too): the thread's own value

    def visit_BlockPredicate(self, e: ir.BlockPredicate) -> str:  # one thread per block: a barrier of one
        p = self.ex(e.value)
        return f"(1 if {p} else 0)" if e.op == "count" else p

    def visit_BlockCollectives(self, e: ir.BlockCollectives) -> str:
        return "False"

    def visit_SingleThreadPerBlock(self, e: ir.SingleThreadPerBlock) -> str:
        return "True"

    def visit_BlockCollective(self, e: ir.BlockCollective) -> str:  # the scan or sum of one thread's value
        return self.ex(e.value)

    def index(self, arr: ir.ArrayRef, indices: tuple, check: str | None) -> str:
        if not indices:
            return "()"
        parts = [self.ex(i) for i in indices]
        if check is not None:
            fn = self.m.checker(check)
            parts = [f"{fn}({p}, {arr.name}.shape[{d}])" for d, p in enumerate(parts)]
        else:
            # the kernel language has no wrap-around (an index is an offset, as in C): a uint64
            # index turns numba's negative-index wrap off, so ``x[i]`` addresses ``base + i *
            # stride`` exactly as the C emitter's, for every i (and LLVM can vectorise the loop)
            parts = [_unsigned_index(i, p, self.ex) for i, p in zip(indices, parts)]
        return ", ".join(parts)

    # ------------------------------------------------------------------ statements
    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def block(self, stmts: list, depth: int) -> None:
        if not stmts:
            self.emit("pass", depth)
        for s in stmts:
            self.stmt(s, depth)

    def stmt(self, s: object, d: int) -> None:
        self.visit(s, d)

    def visit_Assign(self, s: ir.Assign, d: int) -> None:
        self.emit(f"{s.target.name} = {self.ex(s.value)}", d)

    def visit_Store(self, s: ir.Store, d: int) -> None:
        self.emit(f"{s.array.name}[{self.index(s.array, s.indices, s.check)}] = {self.ex(s.value)}", d)

    def visit_ExprStmt(self, s: ir.ExprStmt, d: int) -> None:
        self.emit(self.ex(s.value), d)

    def visit_CallAssign(self, s: ir.CallAssign, d: int) -> None:  # (inlined before the emitter sees it)
        self.emit(f"{', '.join(t.name for t in s.targets)}, = {self.ex(s.call)}", d)

    def visit_If(self, s: ir.If, d: int) -> None:
        if isinstance(s.cond, ir.BlockCollectives):  # one-thread blocks have no work-group collectives
            self.block(s.orelse, d) if s.orelse else self.emit("pass", d)
            return
        if isinstance(s.cond, ir.SingleThreadPerBlock):  # what the CPU backends are
            self.block(s.body, d) if s.body else self.emit("pass", d)
            return
        self.emit(f"if {self.ex(s.cond)}:", d)
        self.block(s.body, d + 1)
        if s.orelse:
            self.emit("else:", d)
            self.block(s.orelse, d + 1)

    def visit_While(self, s: ir.While, d: int) -> None:
        self.emit(f"while {self.ex(s.cond)}:", d)
        self.loops.append(("while", None))
        self.block(s.body, d + 1)
        self.loops.pop()

    def visit_ForRange(self, s: ir.ForRange, d: int) -> None:
        bounds = [self.ex(s.start), self.ex(s.stop), self.ex(s.step)]
        if s.check is not None:  # a run-time step: 0 raises the kernel's error, not numba's bare ValueError
            self.nflag += 1
            names = [f"_range{self.nflag}_{part}" for part in ("start", "stop", "step")]
            for name, value in zip(names, bounds):
                self.emit(f"{name} = {value}", d)
            self.emit(f"if {names[2]} == 0:", d)
            self.emit(f"raise KernelValueError({s.check!r})", d + 1)
            bounds = names
        self.emit(f"for {s.var.name} in range({', '.join(bounds)}):", d)
        self.loops.append(("range", None))
        self.block(s.body, d + 1)
        self.loops.pop()

    def visit_Break(self, s: ir.Break, d: int) -> None:
        kind, flag = self.loops[-1]
        if flag is not None:
            self.emit(f"{flag} = True", d)
        self.emit("break", d)

    def visit_Continue(self, s: ir.Continue, d: int) -> None:
        self.emit("continue", d)

    def visit_Return(self, s: ir.Return, d: int) -> None:
        self.emit("return" + (f" {self.ex(s.value)}" if s.value is not None else ""), d)

    def visit_DeclareLocal(self, s: ir.DeclareLocal, d: int) -> None:  # the launch's buffer, zeroed
        self.emit(f"{s.array.name}[{', '.join(':' * len(s.array.extents))}] = 0", d)

    def visit_SyncBlockThreads(self, s: ir.SyncBlockThreads, d: int) -> None:
        self.emit("pass  # sync_block_threads: one thread per block on CPU backends", d)

    def visit_MemFence(self, s: ir.MemFence, d: int) -> None:  # blocks run concurrently on cpu_threads
        self.emit("fence()", d)

    def visit_Assert(self, s: ir.Assert, d: int) -> None:  # the launch stops (numba raises out of it)
        self.emit(f"if not {self.ex(s.cond)}:", d)
        self.emit(f"raise KernelAssertionError({str(s.message)!r})", d + 1)

    def visit_Print(self, s: ir.Print, d: int) -> None:  # numba's print: Python's str() of each item
        self.emit(f"print({', '.join(repr(x) if isinstance(x, str) else self.ex(x) for x in s.items)})", d)

    def visit_StridedLoop(self, s: ir.StridedLoop, d: int) -> None:
        self.nflag += 1
        n = self.nflag
        stop, base, flag = f"_stop{n}", f"_base{n}", f"_brk{n}"
        self.emit(f"{stop} = {self.ex(s.stop)}", d)
        if s.kind in _CONTIGUOUS:
            self.contiguous_loop(s, d, stop, base)
            return
        has_break = any(isinstance(x, ir.Break) for x in _direct(s.body))
        chunk = self.ex(s.chunk)
        if has_break:
            self.emit(f"{flag} = False", d)
        # a while loop: range() with a step costs a division per thread to count its trips
        self.emit(f"{base} = {self.ex(s.start)}", d)
        self.emit(f"_stride{n} = {self.ex(s.stride)}", d)
        if chunk != "1":
            # a stride of one chunk (one block) makes the thread's indices contiguous: one trip
            # over all of them, not a trip (and a min) per chunk (a start >= 0: stop - start fits int64)
            self.emit(f"_chunk{n} = {chunk}", d)
            self.emit(f"if _stride{n} == _chunk{n} and {base} >= 0:", d)
            self.emit(f"_chunk{n} = _stride{n} = {stop} - {base}", d + 1)
            chunk = f"_chunk{n}"
        self.emit(f"while {base} < {stop}:", d)
        if chunk == "1":
            self.emit(f"{s.var.name} = {base}", d + 1)
            self.emit(f"{base} += _stride{n}", d + 1)  # before the body: a continue skips the rest
            inner = d + 1
            self.loops.append(("strided1", None))
        else:
            self.emit(f"_lo{n} = {base}", d + 1)
            self.emit(f"{base} += _stride{n}", d + 1)
            self.emit(f"for {s.var.name} in range(_lo{n}, min(_lo{n} + {chunk}, {stop})):", d + 1)
            inner = d + 2
            self.loops.append(("strided", flag if has_break else None))
        if s.local_var is not None:
            self.emit(f"{s.local_var.name} = {s.var.name} - {self.ex(s.group_base)}", inner)
        self.block(s.body, inner)
        self.loops.pop()
        if has_break and chunk != "1":
            self.emit(f"if {flag}:", d + 1)
            self.emit("break", d + 2)

    def contiguous_loop(self, s: ir.StridedLoop, d: int, stop: str, base: str) -> None:
        """A loop of a kind whose stride is one chunk here (a block of one thread, so ``block_threads
        * thread_elements == thread_elements``): the thread's indices ``[start, stop)`` are
        contiguous, one ``range`` numba compiles as a plain loop."""
        self.emit(f"{base} = {self.ex(s.start)}", d)
        self.emit(f"for {s.var.name} in range({base}, {stop}):", d)
        self.loops.append(("range", None))
        if s.local_var is not None:
            self.emit(f"{s.local_var.name} = {s.var.name} - {self.ex(s.group_base)}", d + 1)
        self.block(s.body, d + 1)
        self.loops.pop()

    def declare(self, local_types: dict[str, ScalarType], depth: int) -> None:
        for name, t in local_types.items():
            self.emit(f"{name} = {_const(0, t)}", depth)


#: operators that numba's source writes as a plain ``(a op b)``, by precedence group
_PLAIN_GROUP = {"+": 0, "-": 0, "*": 1, "/": 1, "&": 2, "|": 3, "^": 4}


# the loop kinds striding by block_threads * thread_elements with chunks of thread_elements
_CONTIGUOUS = ("uniform_group_elements", "independent_group_elements")


def _unsigned_index(i: ir.Expr, text: str, ex: Callable[[object], str]) -> str:
    """The index ``i`` (written ``text``) as numba reads it without a wrap-around check: a
    non-negative constant as it is (one the emitter folded too), else a uint64 of the value; an
    integer made int64 first is made uint64 at once (numba sign- or zero-extends it by its own
    type either way: the same bits, one call fewer to type)."""
    if text.isdigit():
        return text
    if isinstance(i, ir.Cast) and i.type.name == "int64" and i.value.type.is_integer:
        return f"np.uint64({ex(i.value)})"
    return f"np.uint64({text})"


def _same_group(e: ir.BinOp, left: object) -> bool:
    """Whether ``left``, the left operand of ``e``, is a plain operation of ``e``'s precedence
    group, so that ``(l0 op1 l1) op2 r`` may be written ``l0 op1 l1 op2 r`` (left-associative)."""
    g = _PLAIN_GROUP.get(e.op)
    return g is not None and isinstance(left, ir.BinOp) and _PLAIN_GROUP.get(left.op) == g and not _wrapping(left)


def _wrapping(e: object) -> bool:
    """A signed integer ``+ - *`` (computed in uint64, see :meth:`FunctionEmitter.wrapping_chain`)."""
    return isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.type.is_integer and not e.type.is_unsigned


def _direct(body: list) -> list:
    """Statements of ``body`` not nested in an inner loop (where a break belongs to ``body``'s loop)."""
    out = []
    for s in body:
        out.append(s)
        if isinstance(s, ir.If):
            out += _direct(s.body) + _direct(s.orelse)
    return out
