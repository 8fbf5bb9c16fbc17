"""The C emitter of the device backends: kernel IR -> OpenCL C, CUDA C or HIP source.

One walk over :mod:`portable.compiler.ir` serves the three dialects (:mod:`backends._c_dialect`
holds what differs). Real multi-thread blocks: shared arrays are ``__local`` / ``__shared__``
arrays, ``sync_block_threads`` is a barrier, atomics are native where the device has them and a
compare-and-swap loop otherwise; ``//``, ``%`` and ``/`` keep Python's semantics. Indices are
plain C offsets (no wrap-around, as the kernel language defines them and the numba emitter
matches with uint64 indices); under range checks ``alpyka_chk`` reports any index outside
``[0, extent)``, negative ones included.

Every C line that comes from a kernel statement ends with a ``// file.py:line`` comment and
:attr:`CSource.line_map` maps C lines back to Python lines, so a build error can show both.

C arguments of a kernel, in order (:attr:`CSource.args` says which is which):

- each IR parameter; an array is a pointer on CUDA/HIP and a (``__global u8*`` buffer, ``i64``
  byte offset) pair on OpenCL, whose buffers have no addresses;
- ``alpyka_te<d>``: the work division's elements per thread, one per dimension;
- ``dynamic_shared_bytes`` (and on OpenCL the ``__local`` block) when the kernel uses dynamic
  shared memory; ``alpyka_err`` (an int32 flag) for kernels compiled with range checks and for
  kernels with a ``range()`` step known only at run time (a step of 0 reports a KernelValueError).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from portable.compiler import deep_recursion, ir
from portable.compiler.operations import INTRINSICS, MATH, OPERATORS, UNARY
from portable.compiler.types import ArrayType, ScalarType, TupleType
from portable.compiler.visit import Visitor

from ._c_dialect import CTYPE, DIALECTS, STORAGE, Dialect
from ._c_helpers import Helpers
from ._c_messages import MessageEmitter, barrier_functions
from ._c_source import CEmitError, CSource
from ._c_statements import GLOBAL_KINDS, OUT_POINTER, StatementEmitter, ident
from ._float_to_int import c_helper


@dataclass(frozen=True)
class _Raw:
    """An index already rendered as C (a range-checked index)."""

    text: str


@dataclass(frozen=True)
class _Implicit:
    """A C parameter the emitter adds to the kernel and its device functions: its C type and
    name, and its entry in :attr:`CSource.args` (None: the kernel declares it, no argument)."""

    ctype: str
    name: str
    arg: tuple[str, Any] | None

    @property
    def decl(self) -> str:
        return f"{self.ctype} {self.name}"


class _Emitter(StatementEmitter, MessageEmitter, Visitor):
    """One kernel's C: ``expr`` renders an expression, ``stmt`` appends a statement's lines (one
    ``visit_`` method per node kind of the IR; the statements' in :mod:`backends._c_statements`)."""

    visitor_name = "the C emitter"

    def __init__(
        self, kernel: ir.KernelDef, dialect: Dialect, unit_elements: bool = False, checks: bool = False
    ) -> None:
        self.k, self.d = kernel, dialect
        self.unit_elements = unit_elements
        self.checks = checks  # shared accesses through ALPYKA_SH_* (the GPU emulator's checks)
        self.h = Helpers(dialect)
        self.lines: list[tuple[str, int]] = []  # (text, python line)
        self.indent = 1
        self.loops: list[str | None] = []  # None: a C loop; a label: a StridedLoop's exit
        self.counter = 0
        self.messages: list[str] = []
        self.used_labels: set[str] = set()
        self.cur_line = 0
        self.in_function: ir.Function | None = None
        self.base = os.path.basename(kernel.source_file) if kernel.source_file else "<kernel>"
        # block predicates that count in a __local int of the kernel, passed to device functions
        self.bpred = dialect.block_predicate_counter and _uses(kernel, ir.BlockPredicate)
        # kernel code with a barrier where a failed assert must let its thread reach the barriers
        self.barrier_functions = barrier_functions(kernel) if dialect.failed_thread_reaches_barriers else None
        # the error flag: range checks (ALPYKA_DEBUG), range() steps known only at run time, asserts
        self.err = kernel.debug or _uses(kernel, ir.ForRange, lambda s: s.check is not None) or _uses(kernel, ir.Assert)

    # ------------------------------------------------------------------ output
    def out(self, text: str, line: int = 0) -> None:
        self.lines.append(("    " * self.indent + text, line))

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def fail(self, message: str) -> CEmitError:
        return CEmitError(message, self.cur_line)

    # ------------------------------------------------------------------ types and constants
    def ctype(self, t: ScalarType) -> str:
        return CTYPE[t.name]

    def const(self, value: Any, t: ScalarType) -> str:
        c = CTYPE[t.name]
        if t.is_bool:
            return "true" if value else "false"
        if t.is_float:
            v = float(value)
            suffix = "F32" if t.name == "float32" else "F64"
            if math.isnan(v):
                return f"ALPYKA_NAN_{suffix}"
            if math.isinf(v):
                return f"ALPYKA_INF_{suffix}" if v > 0 else f"(-ALPYKA_INF_{suffix})"
            return f"(({c}){v!r})"
        v = int(value)
        if t.is_unsigned:
            return f"(({c}){v}ULL)" if t.bits == 64 else f"(({c}){v}u)"
        if v == -(2**63):
            return "((i64)(-9223372036854775807LL - 1))"
        return f"(({c}){v}LL)" if t.bits == 64 else f"(({c}){v})"

    # ------------------------------------------------------------------ arrays
    def array_base(self, ref: ir.ArrayRef) -> str:
        if ref.type.kind == "dynamic_shared":
            q = "const " if ref.type.const else ""
            return f"(({self.d.space('dynamic_shared')}{q}{STORAGE[ref.type.dtype.name]}*)alpyka_dyn_shared)"
        return ident(ref.name)

    def flat_index(self, ref: ir.ArrayRef, idx: tuple[Any, ...]) -> str:
        t, e = ref.type, [i.text if isinstance(i, _Raw) else self.expr(i) for i in idx]
        kind = t.kind
        if kind == "scalar_field":
            return "0"
        if kind == "column":
            return e[0]
        if kind == "vector":
            return f"({e[1]}) * ({self.expr(ref.pitch)}) + ({e[0]})"
        if kind == "matrix":
            rows = t.component_shape[0]
            return f"(({e[2]}) * {rows} + ({e[1]})) * ({self.expr(ref.pitch)}) + ({e[0]})"
        flat = e[0]
        for d in range(1, len(e)):
            flat = f"({flat}) * ({self.expr(ref.extents[d])}) + ({e[d]})"
        return flat

    def element(self, ref: ir.ArrayRef, idx: tuple[ir.Expr, ...], check: str | None = None) -> str:
        return f"{self.array_base(ref)}[{self.flat_index(ref, self.checked(ref, idx, check))}]"

    def pointer_decl(self, t: ArrayType, name: str) -> str:
        q = "const " if t.const else ""
        return f"{self.d.space(t.kind)}{q}{STORAGE[t.dtype.name]}* {name}"

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Any) -> str:
        return self.visit(e)

    def missing(self, node: Any, *args: Any) -> Any:
        if args:  # a statement (tag, line)
            raise self.fail(f"the C emitter cannot express the statement {type(node).__name__}")
        raise self.fail(f"the C emitter cannot express {type(node).__name__}")

    def visit_Const(self, e: ir.Const) -> str:
        return self.const(e.value, e.type)

    def visit_Var(self, e: ir.Var) -> str:
        return ident(e.name)

    def visit_Index(self, e: ir.Index) -> str:
        if e.query == "thread_elements":
            # a plan for one element per thread folds the chunked loops away at compile time
            return "((i64)1)" if self.unit_elements else f"alpyka_te{e.dim}"
        return self.d.index(e.query, e.dim, self.k.ndim)

    def visit_Cast(self, e: ir.Cast) -> str:
        inner = self.expr(e.value)
        if e.type.is_bool:
            return f"(({inner}) != 0)"
        if e.value.type.is_float and e.type.is_integer:  # saturating: backends/_float_to_int.py
            return f"{self.h.add(*c_helper(e.value.type, e.type))}({inner})"
        return f"(({self.ctype(e.type)})({inner}))"

    def visit_UnaryOp(self, e: ir.UnaryOp) -> str:
        return UNARY[e.op].c_text(self.expr(e.operand), e.type)  # declared in operations.py

    def visit_Compare(self, e: ir.Compare) -> str:
        return f"({self.expr(e.left)} {e.op} {self.expr(e.right)})"

    def visit_BoolOp(self, e: ir.BoolOp) -> str:
        op = " && " if e.op == "and" else " || "
        return "(" + op.join(self.expr(v) for v in e.values) + ")"

    def visit_Select(self, e: ir.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.if_true)} : {self.expr(e.if_false)})"

    def shared_access(self, ref: ir.ArrayRef, macro: str, text: str) -> str:
        """``text`` (an element, or its address for atomics) wrapped in the shared-access macro
        ``ALPYKA_SH_<macro>`` when emitting for the emulator's checks (:data:`SHARED_ACCESS`);
        global memory's in ``ALPYKA_GL_<macro>``."""
        if self.checks and ref.type.kind in ("shared", "dynamic_shared"):
            return f"ALPYKA_SH_{macro}({text})"
        if self.checks and ref.type.kind in GLOBAL_KINDS:
            return f"ALPYKA_GL_{macro}({text})"
        return text

    def visit_Load(self, e: ir.Load) -> str:
        el = self.shared_access(e.array, "LD", self.element(e.array, e.indices, getattr(e, "check", None)))
        return f"({el} != 0)" if e.array.type.dtype.is_bool else el

    def visit_BlockPredicate(self, e: ir.BlockPredicate) -> str:
        p = self.expr(e.value)
        native = self.d.block_predicate(e.op, p)
        return native if native is not None else f"{self.h.block_predicate(e.op, self.k.ndim)}(alpyka_bpred, {p})"

    def visit_BlockCollectives(self, e: ir.BlockCollectives) -> str:
        raise self.fail("acc.block_collectives is only the whole condition of an if (if acc.block_collectives: ...)")

    def visit_SingleThreadPerBlock(self, e: ir.SingleThreadPerBlock) -> str:
        raise self.fail(
            "acc.requires_single_thread_per_block is only the whole condition of an if "
            "(if acc.requires_single_thread_per_block: ...)"
        )

    def visit_BlockCollective(self, e: ir.BlockCollective) -> str:
        got = self.d.block_collective(e.op, e.type, self.expr(e.value)) if e.type.is_integer else None
        if got is None:
            raise self.fail(f"acc.block_{e.op}(value) of an integer, in the body of if acc.block_collectives: only")
        return got

    def visit_WarpOp(self, e: ir.WarpOp) -> str:
        args = [self.expr(a) for a in e.args]
        if e.op == "ballot_mask":
            native = self.d.warp_vote("ballot", args[1], args[0])
            return native if native is not None else f"({self.h.warp_vote('ballot')}({args[1]}) & (u64)({args[0]}))"
        if e.op == "shfl_mask":
            return self.warp_shuffle("shfl", e.type, args[1], args[2], args[0])
        if e.op in ("match_any", "match_all"):
            return f"{self.h.warp_match(e.op, e.args[0].type)}({args[0]})"
        if e.op == "shfl_width":  # shfl from the lane of the caller's segment of width lanes
            return self.warp_shuffle("shfl", e.type, args[0], f"{self.h.segment_lane()}({args[1]}, {args[2]})")
        if e.op in ("size", "active_mask", "all", "any", "ballot"):
            p = args[0] if args else ""
            native = self.d.warp_vote(e.op, p)
            return native if native is not None else f"{self.h.warp_vote(e.op)}({p})"
        return self.warp_shuffle(e.op, e.type, args[0], args[1])

    def warp_shuffle(self, op: str, t: ScalarType, v: str, k: str, mask: str | None = None) -> str:
        """A shuffle of ``v`` (type ``t``) by ``k``, over ``mask``'s lanes (None: the warp's)."""
        if self.d.warps_by_helpers:
            return f"{self.h.warp_shuffle(op, t)}({v}, {k})"  # the sub-group's lanes that run it
        if t.is_bool:
            return f"({self.d.warp_shuffle(op, f'(i32)({v})', k, mask)} != 0)"
        if t.bits < 32:  # the intrinsics take 32- and 64-bit values
            return f"(({self.ctype(t)}){self.d.warp_shuffle(op, f'(i32)({v})', k, mask)})"
        return f"(({self.ctype(t)}){self.d.warp_shuffle(op, v, k, mask)})"

    def visit_BinOp(self, e: ir.BinOp) -> str:
        if _wrapping(e):  # a chain of them: one cast to the signed type, not one per operator
            return f"(({self.ctype(e.type)})({self.wrapping_chain(e)}))"
        a, b, t = self.expr(e.left), self.expr(e.right), e.type
        if _plain(e) and _plain(e.left) and _GROUP[e.left.op] == _GROUP[e.op]:
            a = a[1:-1]  # a + b + c, not ((a + b) + c): clang nests 256 parentheses at most
        if e.op in ("+", "-", "*") and t.is_integer and not t.is_unsigned:
            # signed overflow wraps (numpy's rule) instead of being C's undefined behaviour
            u = "u" + self.ctype(t)[1:]
            return f"(({self.ctype(t)})(({u}){a} {e.op} ({u}){b}))"
        op = OPERATORS.get(e.op)
        if op is None:
            raise self.fail(f"operator {e.op} is not supported by the C emitter")
        if op.c_helper is None:  # C's operator (its fixed-width rule is C's)
            return f"({a} {e.op} {b})"
        if op.c_float is not None and t.is_float:
            return f"{self.d.math(op.c_float, t)}({a}, {b})"
        return f"{self.h.declared(op.c_helper, t)}({a}, {b})"  # numpy's rule (operations.py)

    def wrapping_chain(self, e: ir.BinOp) -> str:
        """``(u)a op (u)b op (u)c...`` of a left-deep chain of wrapping ``+ -`` or ``*`` in the
        unsigned twin ``u`` of a signed type of 32 or 64 bits (modular arithmetic: the same bits
        as a cast back after each operator)."""
        u = "u" + self.ctype(e.type)[1:]
        left = e.left
        head = (
            self.wrapping_chain(left)
            if _wrapping(left) and left.type == e.type and _GROUP[left.op] == _GROUP[e.op]
            else f"({u}){self.expr(left)}"
        )
        return f"{head} {e.op} ({u}){self.expr(e.right)}"

    def visit_MathCall(self, e: ir.MathCall) -> str:
        f, args = e.func, e.args
        at = args[0].type if args else e.type
        s = [self.expr(a) for a in args]
        if f in INTRINSICS:  # the bit intrinsics, declared in operations.py
            return self.d.bit_intrinsic(INTRINSICS[f], s[0], at, self.h.declared)
        if f in ("min", "max"):
            fn = self.h.declared(MATH[f].c_helper, e.type)
            acc = s[0]
            for x in s[1:]:
                acc = f"{fn}({acc}, {x})"
            return acc
        if f == "abs":
            if e.type.is_float:
                return f"{self.d.math('fabs', e.type)}({s[0]})"
            return f"{self.h.declared(MATH['abs'].c_helper, e.type)}({s[0]})"
        if f in ("isnan", "isinf", "isfinite"):
            return f"({f}({s[0]}) != 0)"
        if f == "bit_cast":  # acc.bit_cast between a float and an integer of its size
            if at.is_float:
                return f"(({self.ctype(e.type)}){self.d.bits_of(at, s[0])})"
            return self.d.from_bits(e.type, f"(({'u32' if at.bits == 32 else 'u64'})({s[0]}))")
        if not at.is_float:
            raise self.fail(f"math.{f} needs float arguments here, got {at}")
        call = f"{self.d.math(f, at)}({', '.join(s)})"
        if e.type.is_integer:  # floor/ceil/trunc of a float: saturating (backends/_float_to_int.py)
            return f"{self.h.add(*c_helper(at, e.type))}({call})"
        if e.type != at:
            return f"(({self.ctype(e.type)}){call})"
        return call

    def visit_AtomicOp(self, e: ir.AtomicOp) -> str:
        t = e.array.type
        try:
            fn = self.h.atomic(e.op, e.type, t.kind, self.k.ndim)
        except NotImplementedError as exc:
            raise self.fail(f"{exc}") from None
        ops = ", ".join(self.expr(o) for o in e.operands)
        at = self.shared_access(e.array, "AT", f"&{self.element(e.array, e.indices, getattr(e, 'check', None))}")
        return f"{fn}({at}, {ops})"

    def visit_DeviceCall(self, e: ir.DeviceCall) -> str:
        return self.call(e, [])

    def visit_Pack(self, e: ir.Pack) -> str:
        raise self.fail("several values are returned by a return statement only (the front-end gives nothing else)")

    def call(self, e: ir.DeviceCall, outs: list[str]) -> str:
        """The C call of ``e``: its arguments (an array's base, extents and pitch), ``outs`` (the
        addresses a function returning several values writes them to), the implicit arguments."""
        fn = self.k.functions[e.function]
        args: list[str] = []
        for p, a in zip(fn.params, e.args):
            if isinstance(p, ir.ArrayRef):
                if not isinstance(a, ir.ArrayRef):
                    raise self.fail(f"device function {fn.name}: array parameter {p.name} got a value")
                args.append(self.array_base(a))
                for d in range(len(p.extents)):
                    args.append(self.expr(a.extents[d]) if d < len(a.extents) else "((i64)0)")
                if p.pitch is not None:
                    args.append(self.expr(a.pitch) if a.pitch is not None else "((i64)0)")
            else:
                args.append(self.expr(a))
        args += outs + self.implicit_args()
        return f"df_{ident(fn.name)}({', '.join(args)})"

    def implicit(self) -> list[_Implicit]:
        """The C parameters every function of the kernel takes after its own (see the module
        docstring), in order."""
        out = [_Implicit("i64", f"alpyka_te{d}", ("elements", d)) for d in range(self.k.ndim)]
        if self.k.uses_dynamic_shared:
            out.append(_Implicit("i64", "dynamic_shared_bytes", ("dyn_bytes", None)))
            param = self.d.dynamic_shared_param()
            if param is not None:  # a kernel parameter, passed on to device functions
                out.append(_Implicit(*param, ("dyn_local", None)))
        if self.bpred:  # the kernel's own __local counter (declared in its body, not an argument)
            out.append(_Implicit("__local volatile i32*", "alpyka_bpred", None))
        if self.err:
            out.append(_Implicit(f"{self.d.space('buffer')}i32*", "alpyka_err", ("err", None)))
        return out

    def implicit_args(self) -> list[str]:
        """The implicit arguments a call of a device function passes on."""
        return [p.name for p in self.implicit()]

    def implicit_params(self) -> list[str]:
        """The implicit parameters of a device function."""
        return [p.decl for p in self.implicit()]

    def checked(self, ref: ir.ArrayRef, idx: tuple[ir.Expr, ...], check: str | None) -> tuple[ir.Expr | str, ...]:
        """The indices of an access, each wrapped in a range check when ``check`` is set: an index
        outside ``[0, extent)`` reports ``check`` (the first report of a launch wins) and reads
        element 0 instead, so the access itself stays in bounds."""
        if not check or not idx:
            return idx
        self.messages.append(check)
        ident = len(self.messages)
        fn = self.h.range_check()
        return tuple(
            _Raw(f"{fn}({self.expr(i)}, {self.expr(e)}, {ident}, alpyka_err)") for i, e in zip(idx, ref.extents)
        )

    # ------------------------------------------------------------------ functions and the kernel
    def declarations(self, local_types: dict[str, ScalarType], skip: set[str]) -> None:
        for name, t in local_types.items():
            if name in skip:
                continue
            init = "false" if t.is_bool else "0"
            self.out(f"{self.ctype(t)} {ident(name)} = {init};")

    def private_arrays(self, arrays: list[ir.SharedArray]) -> None:
        """The per-thread arrays of a function or the kernel (OpenCL's private memory, CUDA's and
        HIP's registers or local memory), flat and C-contiguous."""
        for pv in arrays:
            self.out(f"{STORAGE[pv.dtype.name]} {ident(pv.name)}[{int(math.prod(pv.shape))}];")

    def function(self, fn: ir.Function) -> tuple[str, list[tuple[str, int]]]:
        saved = self.lines
        self.lines, self.in_function, self.indent = [], fn, 1
        params: list[str] = []
        names: set[str] = set()
        for p in fn.params:
            if isinstance(p, ir.ArrayRef):
                params.append(self.pointer_decl(p.type, ident(p.name)))
                params += [f"i64 {ident(p.name)}_e{d}" for d in range(len(p.extents))]
                if p.pitch is not None:
                    params.append(f"i64 {ident(p.name)}_pitch")
            else:
                params.append(f"{self.ctype(p.type)} {ident(p.name)}")
                names.add(p.name)
        if isinstance(fn.return_type, TupleType):  # several values: an out-pointer each
            params += [f"{self.ctype(t)}* {OUT_POINTER}{k}" for k, t in enumerate(fn.return_type.items)]
        params += self.implicit_params()
        ret = "void" if not isinstance(fn.return_type, ScalarType) else self.ctype(fn.return_type)
        proto = f"ALPYKA_FN {ret} df_{ident(fn.name)}({', '.join(params)})"
        self.private_arrays(fn.private)
        self.declarations(fn.locals, names)
        for s in fn.body:
            self.stmt(s)
        if ret != "void":
            self.out(f"return ({ret})0;")
        body, self.lines, self.in_function = self.lines, saved, None
        return proto, body

    def kernel(self) -> tuple[str, list[tuple[str, Any]]]:
        k = self.k
        params: list[str] = []
        args: list[tuple[str, Any]] = []
        prologue: list[str] = []
        scalar_names: set[str] = set()
        for p in k.params:
            name = ident(p.name)
            if isinstance(p.type, ArrayType):
                buffer = self.d.array_param(name, p.type.const, STORAGE[p.type.dtype.name])
                if buffer is not None:
                    params += buffer[0]
                    prologue.append(buffer[1])
                else:
                    params.append(self.pointer_decl(p.type, name))
            else:
                scalar_names.add(p.name)
                if p.type.is_bool:
                    params.append(f"u8 {name}_raw")
                    prologue.append(f"const bool {name} = {name}_raw != 0;")
                else:
                    params.append(f"{self.ctype(p.type)} {name}")
            args.append(("param", p))
        for p in self.implicit():
            if p.arg is not None:  # (alpyka_bpred: declared in the kernel's body)
                params.append(p.decl)
                args.append(p.arg)
        self.lines, self.indent = [], 1
        for line in prologue:
            self.out(line)
        for sh in k.shared:
            size = int(math.prod(sh.shape)) if sh.shape else 1
            self.out(self.d.shared_decl(STORAGE[sh.dtype.name], ident(sh.name), size))
        if k.uses_dynamic_shared and self.d.dynamic_shared_base():
            self.out(self.d.dynamic_shared_base())
        if self.bpred:
            self.out(self.d.shared_decl("i32", "alpyka_bpred", 1))
        self.private_arrays(k.private)
        self.declarations(k.locals, scalar_names)
        for s in k.body:
            self.stmt(s)
        entry = f"alpyka_{ident(k.name)}"
        header = f"{self.d.kernel_qualifier()} {entry}({', '.join(params)})"
        return header, args


#: the shared- and global-memory access macros of a source emitted with ``checks``: a load, a
#: store's target and an atomic's address; plain accesses unless defined first (the emulator's
#: cuda_on_cpu.h)
SHARED_ACCESS = """\
#ifndef ALPYKA_SH_LD
#define ALPYKA_SH_LD(x) (x)
#define ALPYKA_SH_ST(x) (x)
#define ALPYKA_SH_AT(p) (p)
#define ALPYKA_SH_STV(x, v) ((x) = (v))
#endif
#ifndef ALPYKA_GL_LD
#define ALPYKA_GL_LD(x) (x)
#define ALPYKA_GL_ST(x) (x)
#define ALPYKA_GL_AT(p) (p)
#define ALPYKA_GL_STV(x, v) ((x) = (v))
#endif
#ifndef ALPYKA_LOOP
#define ALPYKA_LOOP()
#endif
"""


#: precedence groups of the operators a chain may be written without parentheses in
_GROUP = {"+": 0, "-": 0, "*": 1, "/": 1, "&": 2, "|": 3, "^": 4}


def _wrapping(e: Any) -> bool:
    """A signed ``+ - *`` of 32 or 64 bits (computed in the unsigned twin, see visit_BinOp)."""
    return (
        isinstance(e, ir.BinOp)
        and e.op in ("+", "-", "*")
        and e.type.is_integer
        and not e.type.is_unsigned
        and e.type.bits >= 32
    )


def _plain(e: Any) -> bool:
    """An operator the emitter writes as ``(a op b)``."""
    return (
        isinstance(e, ir.BinOp)
        and e.op in _GROUP
        and not (e.op in ("+", "-", "*") and e.type.is_integer and not e.type.is_unsigned)
    )


def _uses(kernel: ir.KernelDef, node_type: type, which: Any = None) -> bool:
    """Whether ``kernel`` or one of its device functions holds a node of ``node_type`` (for which
    ``which(node)`` is true, when given)."""
    bodies = [kernel.body] + [fn.body for fn in kernel.functions.values()]
    return any(isinstance(x, node_type) and (which is None or which(x)) for body in bodies for x in ir.nodes(body))


@deep_recursion
def emit(kernel: ir.KernelDef, dialect: str, unit_elements: bool = False, checks: bool = False) -> CSource:
    """The C source of ``kernel`` in ``dialect`` ("opencl", "cuda" or "hip"); ``unit_elements``
    specialises it for work divisions with one element per thread (the GPU-style ones);
    ``checks`` (CUDA/HIP for the GPU emulator only) writes shared-memory accesses through the
    ``ALPYKA_SH_*`` macros (:data:`SHARED_ACCESS`: plain accesses unless the emulator's header
    defines them to check each one).

    Raises :class:`CEmitError` (with the kernel's line) for constructs C cannot express.
    """
    d = DIALECTS[dialect]
    em = _Emitter(kernel, d, unit_elements, checks and d.emulator_checks)
    functions = [em.function(fn) for fn in kernel.functions.values()]
    header, args = em.kernel()
    kernel_body = em.lines
    text: list[str] = []
    line_map: dict[int, int] = {}

    def put(s: str, py: int = 0) -> None:
        for part in s.split("\n"):
            text.append(part)
            if py:
                line_map[len(text)] = py

    src = kernel.source_file or "<kernel>"
    unit = ", one element per thread" if unit_elements else ""
    fast = ", fast_math" if kernel.fast_math else ""  # also keeps the text-keyed build caches apart
    put(f"// alpyka kernel {kernel.name} from {src}:{kernel.first_line} ({dialect}{unit}{fast})")
    if not kernel.fast_math and d.no_contraction:
        put(d.no_contraction)  # numpy's bits: a*b - c*d not fused
    put(em.d.prologue(warps=_uses(kernel, ir.WarpOp)).rstrip("\n"))
    if em.checks:
        put(SHARED_ACCESS.rstrip("\n"))
    helpers = em.h.source().rstrip("\n")
    if helpers:
        put(helpers)
    for proto, _ in functions:
        put(proto + ";")
    for proto, body in functions:
        put(proto + " {")
        for line, py in body:
            put(line, py)
        put("}")
    put(header + " {")
    for line, py in kernel_body:
        put(line, py)
    put("}")
    return CSource(
        "\n".join(text) + "\n",
        header.split("(")[0].split()[-1],
        dialect,
        args,
        line_map,
        src,
        em.messages,
        kernel.name,
        kernel.fast_math,
    )
