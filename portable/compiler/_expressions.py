"""Front-end, expressions: Python ``ast`` expressions to typed IR expressions (and the
compile-time values of :mod:`._values`)."""

from __future__ import annotations

import ast
import math
from typing import Any

import numpy as np

from . import ir
from ._errors import KernelArgumentError
from ._folding import ConstantError, fold_binop, fold_cast, fold_unary, literal_int
from ._folding import literal_type as int_literal_type
from ._values import (
    AccMember,
    AccVal,
    BuiltinVal,
    DeviceFunctionVal,
    DTypeVal,
    FieldAccess,
    LoopVal,
    ModuleVal,
    MultiCall,
    TupleVal,
    ViewVal,
)
from .operations import INTRINSICS, UNARY
from .types import (
    BOOL,
    FLOAT32,
    INDEX,
    ScalarType,
    binary_result,
    literal_type,
    operand_type,
    scalar_type,
    unify,
)

_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
_UNARY_OPS = {ast.UAdd: "+", ast.USub: "-", ast.Invert: "~", ast.Not: "not"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

#: acc index queries; derived ones are built from ir.INDEX_QUERIES
ACC_QUERIES = (
    "block_idx",
    "thread_idx",
    "grid_blocks",
    "block_threads",
    "thread_elements",
    "global_thread_idx",
    "grid_threads",
    "warp_size",
    "block_collectives",
    "requires_single_thread_per_block",
)
ACC_LOOPS = (
    "uniform_elements",
    "uniform_elements_nd",
    "uniform_groups",
    "uniform_group_elements",
    "independent_groups",
    "independent_group_elements",
    "pairs",
)
ACC_WARP = tuple(f"warp_{op}" for op in ir.WARP_OPS if op not in ("size", "shfl_width"))
ACC_PREDICATES = tuple(f"sync_block_threads_{op}" for op in ir.BLOCK_PREDICATES)
ACC_COLLECTIVES = tuple(f"block_{op}" for op in ir.BLOCK_COLLECTIVES)
ACC_RAND = ("rand_engine", "rand_u32", "rand_uniform", "rand_normal")
ACC_INTRINSICS = tuple(INTRINSICS)  # bit intrinsics: portable/compiler/operations.py
ACC_CALLS = (
    ("once_per_grid", "once_per_block", "shared_array", "shared_scalar", "local_array", "dynamic_shared_array")
    + ("sync_block_threads", "mem_fence", "bit_cast")
    + tuple(f"atomic_{op}" for op in ir.ATOMIC_OPS)
    + ACC_WARP
    + ACC_PREDICATES
    + ACC_COLLECTIVES
    + ACC_RAND
    + ACC_INTRINSICS
)
ACC_MEMBERS = ACC_QUERIES + ACC_LOOPS + ACC_CALLS

_MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}
_NP_ALIASES = {
    "minimum": "min",
    "maximum": "max",
    "absolute": "abs",
    "power": "pow",
    "arctan2": "atan2",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
}
_NP_TYPES = {
    getattr(np, n): n
    for n in ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
}

_PASS_HINT = {
    "a SoA view": "pass a view of a collection (coll.view() or coll.const_view())",
    "an array": "pass a pk.Buffer or a numpy array (CPU backends); a view is indexed through its fields (view.x[i])",
}

ALLOWED_HINT = (
    "kernels may use: local scalars, arithmetic, comparisons, if/elif/else, for/while "
    "loops over range() and acc loops, break/continue, the acc members, math functions, "
    "min/max/abs, numpy scalar casts and @pk.device_function calls"
)


def cast(e: ir.Expr, t: ScalarType) -> ir.Expr:
    """``e`` converted to ``t`` (constants folded)."""
    if e.type == t:
        return e
    if isinstance(e, ir.Const):
        return ir.Const(fold_cast(e.value, t), t)
    return ir.Cast(e, t)


def const(value: Any) -> ir.Const:
    """A Python or numpy constant; a Python int is int64, or uint64 from 2**63 (numba's literal
    types), and one that fits neither is a :class:`ConstantError`."""
    if isinstance(value, int) and not isinstance(value, (bool, np.bool_)):
        return ir.Const(value, int_literal_type(value))
    t = literal_type(value)
    return ir.Const(fold_cast(value.item() if isinstance(value, np.generic) else value, t), t)


def binop(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a <op> b``; two constants fold with numpy's fixed-width rules (:mod:`._folding`)."""
    t = binary_result(op, a.type, b.type)
    if op in ("<<", ">>"):
        ca, cb = cast(a, t), b
    else:
        ot = operand_type(op, a.type, b.type)
        ca, cb = cast(a, ot), cast(b, ot)
    if isinstance(ca, ir.Const) and isinstance(cb, ir.Const):
        return ir.Const(fold_binop(op, ca.value, cb.value, t), t)
    return ir.BinOp(op, ca, cb, t)


def compare(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    t = operand_type(op, a.type, b.type)
    return ir.Compare(op, cast(a, t), cast(b, t))


def to_bool(e: ir.Expr) -> ir.Expr:
    return cast(e, BOOL)


def imin(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.MathCall("min", [cast(a, INDEX), cast(b, INDEX)], INDEX)


class ExprBuilder:
    """Mixin of the function builder: expression translation. Needs ``error``, ``lookup``,
    ``ctx`` (the compile context) defined by the builder, and the calls of
    :class:`~portable.compiler._calls.CallBuilder` (``ex_Call``, ``acc_query``)."""

    # --------------------------------------------------------------- helpers
    def scalar(self, node: ast.AST, what: str = "a number") -> ir.Expr:
        v = self.value(node)
        return self.as_scalar(v, node, what)

    def as_scalar(self, v: Any, node: ast.AST, what: str = "a number") -> ir.Expr:
        if isinstance(v, FieldAccess):
            return self.load(v.array, v.index, node)
        if isinstance(v, ir.Expr):
            return v
        raise self.error(node, f"expected {what} here, got {self.describe(v)}")

    def describe(self, v: Any) -> str:
        if isinstance(v, ir.ArrayRef) and v.name in self.ctx.engines:
            return (
                f"a {self.ctx.labels.get(v.name, v.name)}, per-thread state that never leaves the thread: "
                "use what it draws (acc.rand_uniform(eng)...) or pass the engine to a device function"
            )
        if isinstance(v, ir.ArrayRef):
            return f"an array ({self.ctx.labels.get(v.name, v.name)})"
        if isinstance(v, ViewVal):
            return f"a view ({v.label}); index one of its fields, e.g. view.x[i]"
        if isinstance(v, TupleVal):
            return f"a tuple of {len(v.items)}"
        if isinstance(v, MultiCall):
            names = ", ".join("abcdefgh"[k] if k < 8 else f"v{k}" for k in range(len(v.call.type.items)))
            return (
                f"the {len(v.call.type.items)} values {v.call.type} that device function {v.name!r} returns; "
                f"unpack them first ({names} = {v.name}(...)) and use each"
            )
        if isinstance(v, AccVal):
            return "acc"
        if isinstance(v, LoopVal):
            return f"acc.{v.kind}(...) (use it as a for loop's iterable)"
        if isinstance(v, ir.Var) and v.name in self.ctx.labels:
            return f"a number ({self.ctx.labels[v.name]})"
        if isinstance(v, ir.Expr):
            return f"a {v.type} number"
        if isinstance(v, FieldAccess):
            return f"a number ({v.label})"
        if isinstance(v, ModuleVal):
            return f"the module {v.name}"
        if isinstance(v, DTypeVal):
            return f"the type np.{v.type}"
        if isinstance(v, (BuiltinVal, DeviceFunctionVal, AccMember)):
            return "a function"
        if isinstance(v, str):
            return "a string"
        return type(v).__name__

    def argument_misuse(self, node: ast.AST, expected: str, use: str) -> Exception | None:
        """A KernelArgumentError when ``node`` names a kernel argument of the wrong kind (a scalar
        or a buffer where the kernel needs a view, a scalar where it indexes an array): which
        argument of which kernel got which type and what the kernel expected. None otherwise."""
        if not (self.is_kernel and isinstance(node, ast.Name) and node.id in self.ctx.args):
            return None
        spec = self.ctx.args[node.id]
        line = self.line(node)
        return KernelArgumentError(
            f"kernel {self.ctx.kernel_name!r} ({self.p.filename}:{line}): argument {node.id!r} "
            f"(#{spec.index} after acc) has type {spec.describe()}, but the kernel uses it as {expected} "
            f"({use}); {_PASS_HINT[expected]}"
        )

    def index_list(self, node: ast.AST) -> list[ir.Expr]:
        v = self.value(node) if not isinstance(node, ast.Tuple) else TupleVal([self.value(e) for e in node.elts])
        items = v.items if isinstance(v, TupleVal) else [v]
        out = []
        for it in items:
            if isinstance(it, TupleVal):
                items2 = it.items
            else:
                items2 = [it]
            for x in items2:
                e = self.as_scalar(x, node, "an integer index")
                if e.type.is_float:
                    raise self.error(node, f"array index of type {e.type}; indices must be integers (use int(...))")
                out.append(cast(e, INDEX))
        return out

    def load(self, arr: ir.ArrayRef, idx: tuple, node: ast.AST) -> ir.Expr:
        self.check_index_count(arr, idx, node)
        return ir.Load(arr, tuple(idx), arr.type.dtype, self.check_message(arr, idx, node))

    def check_index_count(self, arr: ir.ArrayRef, idx: tuple, node: ast.AST) -> None:
        if len(idx) != arr.type.ndim:
            label = self.ctx.labels.get(arr.name, arr.name)
            raise self.error(node, f"{label} takes {arr.type.ndim} index(es), got {len(idx)}")
        self.check_constant_indices(arr, idx, node)

    def check_constant_indices(self, arr: ir.ArrayRef, idx: tuple, node: ast.AST) -> None:
        """Refuse constant indices that are surely out of range, on every backend and with or
        without ALPYKA_DEBUG: a negative constant (kernel indices never wrap around, unlike
        numpy's ``x[-1]``) and a constant at or past a constant extent (vector/matrix
        components, shared arrays)."""
        for d, i in enumerate(idx):
            if not isinstance(i, ir.Const):
                continue
            label = self.ctx.labels.get(arr.name, arr.name)
            if i.value < 0:
                raise self.error(
                    node,
                    f"negative index {i.value} into {label}: kernel indices do not wrap "
                    "around as numpy's do (an index is an offset from the first element, "
                    "as in alpaka and CUDA); write the index from the front, e.g. "
                    "x[n - 1] for the last of n elements",
                )
            ext = arr.extents[d] if d < len(arr.extents) else None
            if isinstance(ext, ir.Const) and i.value >= ext.value:
                raise self.error(
                    node,
                    f"index {i.value} (dimension {d}) is out of range for {label}, whose extent there is {ext.value}",
                )

    # --------------------------------------------------------------- dispatch
    def value(self, node: ast.AST) -> Any:
        meth = getattr(self, "ex_" + type(node).__name__, None)
        if meth is None:
            raise self.error(node, self.unsupported(node))
        try:
            return meth(node)
        except ConstantError as exc:  # a constant that does not fit its type: at the user's line
            raise self.error(node, str(exc)) from None

    def unsupported(self, node: ast.AST) -> str:
        kind = type(node).__name__
        names = {
            "ListComp": "list comprehensions",
            "SetComp": "set comprehensions",
            "DictComp": "dict comprehensions",
            "GeneratorExp": "generator expressions",
            "Lambda": "lambda",
            "List": "lists",
            "Dict": "dicts",
            "Set": "sets",
            "JoinedStr": "f-strings",
            "Starred": "starred arguments",
            "Await": "await",
            "Yield": "yield",
            "YieldFrom": "yield",
            "NamedExpr": "the walrus operator",
            "Slice": "slices",
        }
        return f"{names.get(kind, kind)} are not allowed in kernels; {ALLOWED_HINT}"

    def ex_Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, str):
            return node.value
        try:
            return const(node.value)
        except TypeError as exc:
            raise self.error(node, str(exc)) from None

    def ex_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def ex_Tuple(self, node: ast.Tuple) -> Any:
        return TupleVal([self.value(e) for e in node.elts])

    def ex_Attribute(self, node: ast.Attribute) -> Any:
        base = self.value(node.value)
        name = node.attr
        if isinstance(base, AccVal):
            return self.acc_attribute(name, node)
        if isinstance(base, ViewVal):
            return self.view_attribute(base, name, node)
        if isinstance(base, ir.ArrayRef) and name == "shape":
            return TupleVal(list(base.extents))
        if isinstance(base, ir.ArrayRef) and name == "dtype":
            return DTypeVal(base.type.dtype)
        if isinstance(base, DTypeVal) and name in ("kind", "itemsize"):
            return base.type.dtype.kind if name == "kind" else const(base.type.dtype.itemsize)
        if isinstance(base, ModuleVal) and base.name not in ("math", "numpy"):
            return self.module_attribute(base, name, node)
        if isinstance(base, ModuleVal):
            return self.math_attribute(base, name, node)
        raise self.attribute_error(base, name, node)

    def acc_attribute(self, name: str, node: ast.Attribute) -> Any:
        """``acc.<name>``: a query (``acc.block_idx``...) or a member called later."""
        if name in ACC_QUERIES:
            return self.acc_query(name, node)
        if name in ACC_MEMBERS:
            return AccMember(name)
        raise self.error(node, self.unknown_acc_member(name))

    def view_attribute(self, base: ViewVal, name: str, node: ast.Attribute) -> Any:
        """``view.<name>`` of a SoA view: its size, or a field (a scalar field is read bare)."""
        if name == "size":
            return base.size
        if name not in base.fields:
            raise self.error(node, f"{base.label} has no field {name!r}; its fields are {', '.join(base.fields)}")
        arr = base.fields[name]
        if arr.type.kind == "scalar_field":
            return FieldAccess(arr, self.ctx.labels.get(arr.name, name))
        return arr

    def module_attribute(self, base: ModuleVal, name: str, node: ast.Attribute) -> Any:
        """``module.<name>`` of a user's module: a device function, a submodule or a number."""
        obj = getattr(base.module, name, None)
        if getattr(obj, "__alpyka_device_function__", False):
            return DeviceFunctionVal(obj)
        if isinstance(obj, type(math)):
            return ModuleVal(obj.__name__, obj)
        if isinstance(obj, (bool, int, float, np.bool_, np.integer, np.floating)):
            return const(obj)
        raise self.error(
            node,
            f"{base.name}.{name} is not available in kernels: from a module, kernels may use "
            "its @pk.device_function functions, submodules and number constants",
        )

    def math_attribute(self, base: ModuleVal, name: str, node: ast.Attribute) -> Any:
        """``math.<name>`` / ``numpy.<name>``: a constant, a numpy scalar type or a math function."""
        if name in _MATH_CONSTANTS:
            return const(_MATH_CONSTANTS[name])
        obj = getattr(base.module, name, None)
        if obj in _NP_TYPES:
            return DTypeVal(scalar_type(np.dtype(obj)))
        fname = _NP_ALIASES.get(name, name) if base.name == "numpy" else name
        if fname in ir.MATH_FUNCTIONS or (base.name == "math" and name == "gamma"):
            return BuiltinVal("math." + ("tgamma" if name == "gamma" else fname))
        raise self.error(
            node, f"{base.name}.{name} is not available in kernels; math functions: {', '.join(ir.MATH_FUNCTIONS)}"
        )

    def attribute_error(self, base: Any, name: str, node: ast.Attribute) -> Exception:
        """The error for an attribute of anything else (an argument misused names its kind)."""
        wrong = self.argument_misuse(node.value, "a SoA view", ast.unparse(node))
        if wrong is not None:
            return wrong
        if isinstance(base, ir.ArrayRef):
            return self.error(
                node,
                f"{self.describe(base)} has no attribute {name!r} (arrays have .shape; fields belong to SoA views)",
            )
        return self.error(node, f"cannot take attribute {name!r} of {self.describe(base)}")

    def ex_Subscript(self, node: ast.Subscript) -> Any:
        base = self.value(node.value)
        if isinstance(base, TupleVal):
            idx = self.value(node.slice)
            if not isinstance(idx, ir.Const) or idx.type.is_float:
                raise self.error(node, "a tuple (an index tuple of acc) takes a constant integer index")
            try:
                return base.items[int(idx.value)]
            except IndexError:
                raise self.error(node, f"index {idx.value} out of range for a tuple of {len(base.items)}") from None
        if isinstance(base, ir.ArrayRef):
            idx = tuple(self.index_list(node.slice))
            return self.load(base, idx, node)
        if isinstance(base, FieldAccess):
            raise self.error(node, f"{base.label} is a scalar: use it without an index")
        wrong = self.argument_misuse(node.value, "an array", ast.unparse(node))
        if wrong is not None:
            raise wrong
        query = self.acc_query_of(node.value)
        if query is not None:  # alpaka's getIdx(...)[0u]: a 1-D kernel's queries are ints
            raise self.error(
                node,
                f"acc.{query} is an int in a 1-D kernel (the work division is 1-D): write acc.{query}, not "
                f"{ast.unparse(node)}; in 2-D/3-D kernels it is a tuple (index [0] is the slowest dimension)",
            )
        raise self.error(node, f"cannot index {self.describe(base)}")

    def acc_query_of(self, node: ast.expr) -> str | None:
        """The query's name where ``node`` is ``acc.<index query>`` or ``acc.<index query>()``."""
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            node = node.func
        if not (isinstance(node, ast.Attribute) and node.attr in ACC_QUERIES and isinstance(node.value, ast.Name)):
            return None
        return node.attr if isinstance(self.value(node.value), AccVal) else None

    def ex_BinOp(self, node: ast.BinOp) -> ir.Expr:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, "the @ operator is not allowed in kernels")
        lit = literal_int(node)  # Python int literals only: exact, then typed as numba types literals
        if lit is not None:
            return ir.Const(lit, int_literal_type(lit, ast.unparse(node)))
        a, b = self.scalar(node.left), self.scalar(node.right)
        try:
            return binop(op, a, b)
        except TypeError as exc:
            raise self.error(node, str(exc)) from None

    def ex_UnaryOp(self, node: ast.UnaryOp) -> ir.Expr:
        lit = literal_int(node)
        if lit is not None:
            return ir.Const(lit, int_literal_type(lit, ast.unparse(node)))
        a = self.scalar(node.operand)
        u = UNARY[_UNARY_OPS[type(node.op)]]  # its rules: portable/compiler/operations.py
        if u.identity:
            return a
        try:
            t = u.result(a.type)
        except TypeError as exc:
            raise self.error(node, str(exc)) from None
        a = to_bool(a) if t.is_bool else cast(a, t)
        if isinstance(a, ir.Const) and u.fold is not None:
            return ir.Const(fold_unary(u.symbol, a.value, t), t)
        return ir.UnaryOp(u.symbol, a, t)

    def ex_BoolOp(self, node: ast.BoolOp) -> ir.Expr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        return ir.BoolOp(op, [to_bool(self.scalar(v)) for v in node.values])

    def ex_Compare(self, node: ast.Compare) -> ir.Expr:
        known = self.type_test(node)  # a.dtype == np.float32: known when compiled
        if known is not None:
            return const(known)
        parts = []
        left = self.scalar(node.left)
        for op_node, right_node in zip(node.ops, node.comparators):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise self.error(node, "only < <= > >= == != comparisons are allowed in kernels (no is/in)")
            right = self.scalar(right_node)
            parts.append(compare(op, left, right))
            left = right
        return parts[0] if len(parts) == 1 else ir.BoolOp("and", parts)

    def ex_IfExp(self, node: ast.IfExp) -> ir.Expr:
        c = to_bool(self.scalar(node.test))
        a, b = self.scalar(node.body), self.scalar(node.orelse)
        t = a.type if a.type == b.type else unify(a.type, b.type)
        return ir.Select(c, cast(a, t), cast(b, t), t)


__all__ = [
    "ExprBuilder",
    "cast",
    "binop",
    "compare",
    "const",
    "to_bool",
    "imin",
    "ACC_MEMBERS",
    "ACC_INTRINSICS",
    "ACC_QUERIES",
    "ACC_LOOPS",
    "ALLOWED_HINT",
    "FLOAT32",
]
