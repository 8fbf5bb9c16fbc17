"""Front-end, calls: of builtins (``int()``, ``min``, ``len``...), math and numpy functions,
numpy scalar types (casts), ``acc`` members (queries, loops, atomics, warps, random draws) and
``@pk.device_function`` functions, as IR expressions or compile-time values."""

from __future__ import annotations

import ast
import builtins
from typing import Any

from . import ir
from ._errors import KernelSyntaxError
from ._expressions import (
    ACC_COLLECTIVES,
    ACC_INTRINSICS,
    ACC_LOOPS,
    ACC_PREDICATES,
    ACC_QUERIES,
    ACC_RAND,
    ACC_WARP,
    binop,
    cast,
    compare,
    to_bool,
)
from ._folding import explicit_int, literal_int
from ._values import (
    AccMember,
    AccVal,
    BuiltinVal,
    DeviceFunctionVal,
    DTypeVal,
    FieldAccess,
    LoopVal,
    MultiCall,
    TupleVal,
    ViewVal,
)
from .operations import math_names
from .types import BOOL, FLOAT64, INDEX, INT64, ArrayType, ScalarType, TupleType, unify

_BOOL_RESULT = math_names(result="bool")
_INT_RESULT = math_names(result="int64")
_TWO_ARGS = math_names(arity=2)


class CallBuilder:
    """Mixin of the function builder: calls. Needs ``error``, ``ctx`` and the expressions of
    :class:`~portable.compiler._expressions.ExprBuilder` (``value``, ``scalar``...)."""

    #: the builder's count of enclosing ``if acc.block_collectives:`` bodies
    collective_depth: int

    def collectives_if(self, s: ast.If) -> list[ir.Stmt] | None:
        """``if acc.block_collectives:`` as an ``ir.If`` on ``ir.BlockCollectives`` (its body may
        call ``acc.block_scan_add`` / ``block_reduce_add``); None for any other ``if``."""
        test = s.test
        if not (isinstance(test, ast.Attribute) and test.attr == "block_collectives"):
            return None
        if not isinstance(self.value(test.value), AccVal):
            return None
        self.collective_depth += 1
        try:
            body = self.block(s.body)
        finally:
            self.collective_depth -= 1
        return [ir.If(ir.BlockCollectives(BOOL), body, self.block(s.orelse), self.line(s))]

    def single_thread_if(self, s: ast.If) -> list[ir.Stmt] | None:
        """``if acc.requires_single_thread_per_block:`` as an ``ir.If`` on
        ``ir.SingleThreadPerBlock`` (each emitter compiles one branch); None for any other ``if``."""
        test = s.test
        if not (isinstance(test, ast.Attribute) and test.attr == "requires_single_thread_per_block"):
            return None
        if not isinstance(self.value(test.value), AccVal):
            return None
        return [ir.If(ir.SingleThreadPerBlock(BOOL), self.block(s.body), self.block(s.orelse), self.line(s))]

    # --------------------------------------------------------------- builtins, math functions, casts
    def ex_Call(self, node: ast.Call) -> Any:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "print" and "print" not in self.assigned:
            raise self.error(
                node,
                'print() is a statement in kernels (it gives no value): call it on a line of its own, print("i =", i)',
            )
        callee = self.value(f)
        if isinstance(callee, AccMember):
            return self.acc_call(callee.name, node)
        if isinstance(callee, (ir.Expr, TupleVal)) and isinstance(f, ast.Attribute) and f.attr in ACC_QUERIES:
            if node.args or node.keywords:
                raise self.error(node, f"acc.{f.attr}() takes no arguments")
            return callee
        if isinstance(callee, DTypeVal):
            (arg,) = self.plain_args(node, 1, f"{callee.type}()")
            return self.explicit_cast(arg, callee.type)
        if isinstance(callee, BuiltinVal):
            return self.builtin_call(callee.name, node)
        if isinstance(callee, DeviceFunctionVal):
            return self.device_call(callee.function, node)
        if isinstance(f, ast.Name) and not self.is_kernel and f.id in self.p.params:
            raise self.error(
                node,
                f"parameter {f.id!r} is called, but the caller passed {self.describe(callee)} there; "
                "pass a @pk.device_function (or a def nested in the caller)",
            )
        raise self.error(node, f"cannot call {self.describe(callee)}")

    def explicit_cast(self, arg: ast.AST, t: ScalarType) -> ir.Expr:
        """``np.<t>(arg)`` / ``int(arg)``...: an int literal must fit ``t`` (numpy refuses a Python int
        out of range); other values convert as any cast does."""
        lit = literal_int(arg)
        if lit is not None:
            return ir.Const(explicit_int(lit, t, ast.unparse(arg)), t)
        return cast(self.scalar(arg), t)

    def plain_args(self, node: ast.Call, n: int | tuple, what: str) -> list[ast.AST]:
        ns = (n,) if isinstance(n, int) else n
        if node.keywords or len(node.args) not in ns or any(isinstance(a, ast.Starred) for a in node.args):
            want = " or ".join(map(str, ns))
            raise self.error(node, f"{what} takes {want} positional argument(s)")
        return list(node.args)

    def builtin_call(self, name: str, node: ast.Call) -> Any:
        if name == "range":
            return self.range_value(node)
        if name in ("int", "float", "bool"):
            (a,) = self.plain_args(node, 1, f"{name}()")
            return self.explicit_cast(a, {"int": INT64, "float": FLOAT64, "bool": BOOL}[name])
        if name == "len":
            (a,) = self.plain_args(node, 1, "len()")
            v = self.value(a)
            if isinstance(v, ir.ArrayRef) and v.extents:
                return v.extents[0]
            if isinstance(v, ViewVal):
                return v.size
            if isinstance(v, TupleVal):
                return ir.Const(len(v.items), INDEX)
            raise self.error(node, f"len() of {self.describe(v)}")
        fname = name.split(".", 1)[-1]
        if fname in ("min", "max") and name in ("min", "max", "math.min", "math.max"):
            args = [self.scalar(a) for a in node.args]
            if len(args) < 2 or node.keywords:
                raise self.error(node, f"{fname}() takes two or more numbers in kernels")
            t = args[0].type
            for a in args[1:]:
                t = t if t == a.type else unify(t, a.type)
            if t.is_bool:
                t = INT64
            out = cast(args[0], t)
            for a in args[1:]:
                out = ir.MathCall(fname, [out, cast(a, t)], t)
            return out
        if fname == "abs":
            (a,) = self.plain_args(node, 1, "abs()")
            e = self.scalar(a)
            t = INT64 if e.type.is_bool else e.type
            return ir.MathCall("abs", [cast(e, t)], t)
        nargs = 2 if fname in _TWO_ARGS else 1
        args = [self.scalar(a) for a in self.plain_args(node, nargs, f"{name}()")]
        t = args[0].type if nargs == 1 else unify(args[0].type, args[1].type)
        ct = t if t.is_float else FLOAT64
        if fname in _INT_RESULT:
            if not t.is_float:
                return cast(args[0], INT64)
            return ir.MathCall(fname, [cast(args[0], ct)], INT64)
        if fname in _BOOL_RESULT:
            if not t.is_float:
                return ir.Const(fname == "isfinite", BOOL)
            return ir.MathCall(fname, [cast(args[0], ct)], BOOL)
        if fname == "fabs":
            fname = "abs"
        return ir.MathCall(fname, [cast(a, ct) for a in args], ct)

    # --------------------------------------------------------------- acc queries
    def acc_query(self, name: str, node: ast.AST) -> Any:
        nd = self.ctx.ndim

        def per_dim(fn):
            vals = [fn(d) for d in range(nd)]
            return vals[0] if nd == 1 else TupleVal(vals)

        if name == "warp_size":
            return ir.WarpOp("size", [], INDEX)
        if name == "block_collectives":  # pk.tools' choice of work-group collectives: FunctionBuilder.st_If
            raise self.error(
                node, "acc.block_collectives is the whole condition of an if (if acc.block_collectives: ...)"
            )
        if name == "requires_single_thread_per_block":  # the target's trait: FunctionBuilder.st_If
            raise self.error(
                node,
                "acc.requires_single_thread_per_block is the whole condition of an if "
                "(if acc.requires_single_thread_per_block: ... else: ...)",
            )
        if name in ir.INDEX_QUERIES:
            return per_dim(lambda d: ir.Index(name, d))
        if name == "global_thread_idx":
            return per_dim(
                lambda d: binop(
                    "+", binop("*", ir.Index("block_idx", d), ir.Index("block_threads", d)), ir.Index("thread_idx", d)
                )
            )
        return per_dim(lambda d: binop("*", ir.Index("grid_blocks", d), ir.Index("block_threads", d)))

    def loop_value(self, name: str, node: ast.Call) -> LoopVal:
        dim = None
        for kw in node.keywords:
            if kw.arg != "dim":
                raise self.error(node, f"acc.{name}() takes no keyword {kw.arg!r} (only dim=)")
            d = self.value(kw.value)
            if not isinstance(d, ir.Const) or not 0 <= int(d.value) < self.ctx.ndim:
                raise self.error(node, f"dim= must be a constant in 0..{self.ctx.ndim - 1}")
            dim = int(d.value)
        args = [self.value(a) for a in node.args]
        return LoopVal(name, args, dim, node.lineno)

    def acc_call_common(self, name: str, node: ast.Call) -> Any:
        if name in ACC_LOOPS:
            return self.loop_value(name, node)
        if name in ("once_per_grid", "once_per_block"):
            self.plain_args(node, 0, f"acc.{name}()")
            q = "global_thread_idx" if name == "once_per_grid" else "thread_idx"
            v = self.acc_query(q, node)
            items = v.items if isinstance(v, TupleVal) else [v]
            parts = [compare("==", it, ir.Const(0, INDEX)) for it in items]
            return parts[0] if len(parts) == 1 else ir.BoolOp("and", parts)
        if name.startswith("atomic_"):
            return self.atomic(name[7:], node)
        if name in ("shared_array", "shared_scalar"):
            form = "shared_array(shape, dtype)" if name == "shared_array" else "shared_scalar(dtype)"
            example = "acc.shared_array(32, np.float32)" if name == "shared_array" else "acc.shared_scalar(np.int32)"
            raise self.error(node, f"assign acc.{form} to a name at the top level of the kernel (s = {example})")
        if name == "local_array":
            raise self.error(
                node,
                "assign acc.local_array(shape, dtype) to a name on a line of its own "
                "(m = acc.local_array((3, 3), np.float64)), then use or pass m",
            )
        if name == "dynamic_shared_array":
            return self.dynamic_shared(node)
        if name == "bit_cast":
            return self.bit_cast(node)
        if name in ACC_WARP:
            return self.warp_op(name[5:], node)
        if name in ACC_PREDICATES:
            (p,) = self.plain_args(node, 1, f"acc.{name}(predicate)")
            op = name[len("sync_block_threads_") :]
            return ir.BlockPredicate(op, to_bool(self.scalar(p)), INDEX if op == "count" else BOOL)
        if name in ACC_COLLECTIVES:
            if not self.collective_depth:
                raise self.error(
                    node,
                    f"acc.{name}(value) goes in the body of if acc.block_collectives:, with a portable else branch",
                )
            (v,) = self.plain_args(node, 1, f"acc.{name}(value)")
            v = self.scalar(v)
            if v.type.is_bool:
                raise self.error(node, f"acc.{name}(value) sums numbers, not bools: pass int(value)")
            return ir.BlockCollective(name[len("block_") :], v, v.type)
        if name == "rand_engine":
            raise self.error(
                node,
                "assign acc.rand_engine(seed, subsequence) to a name at the top level of the "
                "kernel (eng = acc.rand_engine(seed, i)) and pass eng to acc.rand_*",
            )
        if name in ACC_RAND:
            return self.rand_draw(name, node)
        if name in ACC_INTRINSICS:
            return self.bit_intrinsic(name, node)
        raise self.error(node, f"acc.{name}() is a statement, not a value")

    def atomic(self, op: str, node: ast.Call) -> ir.Expr:
        hierarchy = "grid"
        for kw in node.keywords:
            h = self.value(kw.value) if kw.arg == "hierarchy" else None
            if kw.arg != "hierarchy" or h not in ir.ATOMIC_HIERARCHIES:
                raise self.error(
                    node, f"acc.atomic_{op}() takes hierarchy='grid'|'block'|'threads' as its only keyword"
                )
            hierarchy = h
        if not node.args:
            raise self.error(node, f"acc.atomic_{op}(array, index, value) needs arguments")
        target = self.value(node.args[0])
        if isinstance(target, FieldAccess):
            arr, rest, idx = target.array, node.args[1:], target.index
        elif isinstance(target, ir.ArrayRef):
            arr = target
            if len(node.args) < 2:
                raise self.error(node, f"acc.atomic_{op}(array, index, value): index missing")
            idx, rest = tuple(self.index_list(node.args[1])), node.args[2:]
        else:
            raise self.error(
                node, f"acc.atomic_{op}() needs an array element or a scalar field first, got {self.describe(target)}"
            )
        nops = 2 if op == "cas" else 1
        if len(rest) != nops:
            form = "(array, [index,] compare, value)" if op == "cas" else "(array, [index,] value)"
            raise self.error(node, f"acc.atomic_{op}{form}: got {len(node.args)} argument(s)")
        self.check_index_count(arr, idx, node)
        self.check_writable(arr, node)
        if arr.type.kind == "private":
            label = self.ctx.labels.get(arr.name, arr.name)
            raise self.error(
                node,
                f"acc.atomic_{op} on {label}: a per-thread array belongs to one thread, which updates it "
                "with plain statements (a[i] += v); GPUs have no atomics on thread-local memory",
            )
        t = arr.type.dtype
        if t.is_bool or (t.is_float and op in ("and", "or", "xor", "inc", "dec")):
            raise self.error(node, f"acc.atomic_{op} is not defined for {t} elements")
        operands = tuple(cast(self.scalar(r), t) for r in rest)
        return ir.AtomicOp(op, arr, idx, operands, hierarchy, t, self.check_message(arr, idx, node))

    def check_writable(self, arr: ir.ArrayRef, node: ast.AST) -> None:
        if arr.type.const:
            label = self.ctx.labels.get(arr.name, arr.name)
            raise self.error(
                node,
                f"cannot write to {label}: it is const (a const view or read-only array); "
                "pass coll.view() instead of coll.const_view() to write",
            )

    def dynamic_shared(self, node: ast.Call) -> ir.ArrayRef:
        (a,) = self.plain_args(node, 1, "acc.dynamic_shared_array(dtype)")
        dt = self.value(a)
        if not isinstance(dt, DTypeVal):
            raise self.error(node, "acc.dynamic_shared_array(dtype) needs a numpy type such as np.float32")
        if not self.is_kernel:
            raise self.error(
                node,
                "acc.dynamic_shared_array() is allowed in the kernel body only; pass the array to device functions",
            )
        self.ctx.uses_dynamic_shared = True
        t = dt.type
        n = binop("//", ir.Var(ir.DYNAMIC_SHARED_BYTES, INDEX), ir.Const(t.dtype.itemsize, INDEX))
        name = f"dsh_{t.name}"
        self.ctx.labels[name] = f"dynamic shared array of {t}"
        return ir.ArrayRef(name, ArrayType(t, "dynamic_shared", 1), (n,))

    # for builtins referenced through globals
    @staticmethod
    def global_builtin(obj: Any) -> str | None:
        for n in ("min", "max", "abs", "range", "int", "float", "bool", "len"):
            if obj is getattr(builtins, n):
                return n
        return None

    # --------------------------------------------------------------- acc calls used as values
    def acc_call(self, name: str, node: ast.Call) -> Any:
        if name in ("sync_block_threads", "mem_fence"):
            raise self.error(node, f"acc.{name}() is a statement of its own")
        return self.acc_call_common(name, node)

    # --------------------------------------------------------------- device functions
    def device_call(self, df: Any, node: ast.Call) -> ir.Expr:
        if node.keywords:
            raise self.error(node, f"device function {df.__name__!r} takes positional arguments only")
        vals = []
        for a in node.args:
            if isinstance(a, ast.Starred):  # f(acc, j, *args): the items of a tuple, one argument each
                t = self.value(a.value)
                if not isinstance(t, TupleVal):
                    raise self.error(node, f"*{ast.unparse(a.value)} must be a tuple, got {self.describe(t)}")
                vals += t.items
            else:
                vals.append(self.value(a))
        vals = [self.as_scalar(v, node) if isinstance(v, (FieldAccess, MultiCall)) else v for v in vals]
        try:
            assert self.ctx.specialise is not None, "build_kernel was given no device-function builder"
            fname, ret, args = self.ctx.specialise(df, vals, self.ctx)
        except KernelSyntaxError:
            raise
        except TypeError as exc:
            raise self.error(node, str(exc)) from None
        call = ir.DeviceCall(fname, args, ret)
        return MultiCall(call, df.__name__) if isinstance(ret, TupleType) else call
