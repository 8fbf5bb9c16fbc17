"""Front-end, statements and functions: a kernel's Python source plus a launch signature to an
:class:`~portable.compiler.ir.KernelDef`."""

from __future__ import annotations

import ast
import math
import types as pytypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ir
from ._assignments import AssignBuilder
from ._calls import CallBuilder
from ._closures import ClosureBuilder, LocalFunction, bound_names
from ._depth import deep_recursion
from ._errors import KernelSyntaxError
from ._expressions import ALLOWED_HINT, ExprBuilder, cast, const, to_bool
from ._folding import ConstantError
from ._loops import LoopBuilder
from ._messages import MessageBuilder
from ._signature import ArgSpec, params_of
from ._source import ParsedFunction
from ._values import AccVal, BuiltinVal, DeviceFunctionVal, DTypeVal, ModuleVal, MultiCall, TupleVal, ViewVal
from ._vocabulary import VocabularyBuilder
from .types import INDEX, VOID, ScalarType, TupleType, scalar_type, variable_type


@dataclass
class CompileContext:
    """State shared by the kernel and the device functions it calls."""

    kernel_name: str
    ndim: int
    debug: bool
    functions: dict[str, ir.Function] = field(default_factory=dict)
    specialisations: dict[tuple, str] = field(default_factory=dict)
    shared: dict[str, ir.SharedArray] = field(default_factory=dict)
    private: dict[str, ir.SharedArray] = field(default_factory=dict)
    #: bytes of each per-thread array (``acc.local_array``) of the kernel and its device functions
    local_bytes: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    #: the IR names of the random engines (``acc.rand_engine``) and of the device functions'
    #: parameters passed one: ``acc.rand_*`` draws from these only
    engines: set[str] = field(default_factory=set)
    uses_dynamic_shared: bool = False
    stack: list[Any] = field(default_factory=list)
    #: the kernel's Python arguments by parameter name (for argument errors)
    args: dict[str, ArgSpec] = field(default_factory=dict)
    #: ``(device function, argument values, ctx) -> (name, return type, IR arguments)``: the
    #: layer above (portable.compiler._kernel) builds device functions; the front-end only calls it
    specialise: Callable[..., tuple] | None = None
    #: shared-size needs (see ir.SharedNeed): of the kernel's shared arrays, by (array, parameter);
    #: of each specialised device function's array parameters, by function name; the device
    #: function (name, parameter index) each array parameter belongs to
    shared_needs: dict[tuple, Any] = field(default_factory=dict)
    param_needs: dict[str, dict] = field(default_factory=dict)
    param_owner: dict[str, tuple] = field(default_factory=dict)
    #: the defs nested in the kernel's functions, by id of their ``def`` node (see _closures)
    local_functions: dict[int, Any] = field(default_factory=dict)


def assigned_names(fdef: ast.FunctionDef) -> set[str]:
    """The names ``fdef`` binds (its locals, in Python's scoping; not those of a def nested in it,
    which binds its own)."""
    return bound_names(fdef)


class FunctionBuilder(
    AssignBuilder, ClosureBuilder, MessageBuilder, LoopBuilder, VocabularyBuilder, CallBuilder, ExprBuilder
):
    """Translates one function body; rerun until the local variables' types are stable."""

    def __init__(
        self,
        parsed: ParsedFunction,
        ctx: CompileContext,
        is_kernel: bool,
        bindings: dict[str, Any],
        var_types: dict[str, ScalarType],
        prologue: list[ir.Stmt],
        return_type: Any = None,
    ) -> None:
        self.p = parsed
        self.ctx = ctx
        self.is_kernel = is_kernel
        self.scope = dict(bindings)
        self.var_types = var_types
        self.assigned = assigned_names(parsed.tree) - set(bindings)
        self.locals: dict[str, ScalarType] = {}
        self.changed = False
        self.prologue = prologue
        self.return_type = return_type
        self.loops: list[str] = []
        self.ntmp = 0
        self.first_return: int | None = None  # the line of the first return (for messages)
        self.binding_locals: list[LocalFunction] = []
        #: this function's per-thread arrays (``acc.local_array``) by IR name; their names start
        #: with ``local_prefix`` (a device function's IR name: unique once functions are inlined)
        self.local_arrays: dict[str, ir.SharedArray] = {}
        self.local_prefix = ""
        #: how many ``if acc.block_collectives:`` bodies enclose the statement being translated
        self.collective_depth = 0

    # --------------------------------------------------------------- errors
    def error(self, node: ast.AST, msg: str) -> KernelSyntaxError:
        line = self.p.line_offset + getattr(node, "lineno", 1)
        what = "kernel" if self.is_kernel else "device function"
        return KernelSyntaxError(f"{self.p.filename}:{line}: in {what} {self.p.name!r}: {msg}", self.p.filename, line)

    def line(self, node: ast.AST) -> int:
        return self.p.line_offset + getattr(node, "lineno", 1)

    # --------------------------------------------------------------- names
    def var(self, name: str) -> ir.Var:
        t = self.var_types[name]
        self.locals["v_" + name] = t
        return ir.Var("v_" + name, t)

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.scope:
            v = self.scope[name]
            return self.bind_local(v, node) if isinstance(v, LocalFunction) else v
        if name in self.var_types:
            return self.var(name)
        if name in self.assigned:
            raise self.error(node, f"local variable {name!r} is used before it is assigned")
        if name in self.p.closure:
            return self.global_value(name, self.p.closure[name], node)
        if name in self.p.globals:
            return self.global_value(name, self.p.globals[name], node)
        import builtins

        if hasattr(builtins, name):
            return self.global_value(name, getattr(builtins, name), node)
        raise self.error(node, f"name {name!r} is not defined")

    def global_value(self, name: str, obj: Any, node: ast.AST) -> Any:
        if obj is math:
            return ModuleVal("math", math)
        if obj is np:
            return ModuleVal("numpy", np)
        if isinstance(obj, pytypes.ModuleType):  # its device functions: pk.tools.block_sum(acc, ...)
            return ModuleVal(obj.__name__, obj)
        if isinstance(obj, type) and issubclass(obj, np.generic):
            try:
                return DTypeVal(scalar_type(np.dtype(obj)))
            except TypeError as exc:
                raise self.error(node, str(exc)) from None
        if isinstance(obj, (bool, int, float, np.bool_, np.integer, np.floating)):
            return const(obj)
        if getattr(obj, "__alpyka_device_function__", False):
            return DeviceFunctionVal(obj)
        b = self.global_builtin(obj)
        if b is not None:
            return BuiltinVal(b)
        if getattr(obj, "__alpyka_kernel__", False):
            raise self.error(
                node, f"kernel {name!r} cannot be called from a kernel; call @pk.device_function helpers instead"
            )
        if isinstance(obj, (pytypes.FunctionType, pytypes.BuiltinFunctionType)):
            if obj is print:
                raise self.error(node, 'print is a statement in kernels: call it on a line of its own, print("i =", i)')
            raise self.error(
                node,
                f"{name!r} is a plain Python function; kernels may call only "
                "@pk.device_function functions, math functions and min/max/abs",
            )
        if isinstance(obj, np.ndarray) or hasattr(obj, "__array__") or hasattr(obj, "layout"):
            raise self.error(
                node,
                f"the kernel captures {name!r}, an array/buffer/view from outside; "
                "pass arrays as kernel arguments (closures may capture only int, float, "
                "bool and numpy scalar constants)",
            )
        raise self.error(
            node,
            f"the kernel uses the global {name!r} of type {type(obj).__name__}; closures "
            "and globals may be only int/float/bool/numpy scalar constants, math, numpy "
            "types and @pk.device_function functions",
        )

    # --------------------------------------------------------------- statements
    def block(self, stmts: list[ast.stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            meth = getattr(self, "st_" + type(s).__name__, None)
            if meth is None:
                raise self.error(s, self.unsupported_stmt(s))
            try:
                r = meth(s)
            except ConstantError as exc:  # a constant converted to a type it does not fit
                raise self.error(s, str(exc)) from None
            if r is not None:
                out.extend(r if isinstance(r, list) else [r])
        return out

    def unsupported_stmt(self, s: ast.stmt) -> str:
        kind = type(s).__name__
        names = {
            "Try": "try/except",
            "TryStar": "try/except*",
            "With": "with",
            "Raise": "raise",
            "Import": "import",
            "ImportFrom": "import",
            "Global": "global",
            "Nonlocal": "nonlocal",
            "FunctionDef": "nested functions",
            "ClassDef": "classes",
            "Delete": "del",
            "AsyncFor": "async for",
            "AsyncWith": "async with",
            "Match": "match",
        }
        return f"{names.get(kind, kind)} is not allowed in kernels; {ALLOWED_HINT}"

    def st_Pass(self, s: ast.Pass) -> None:
        return None

    def st_Expr(self, s: ast.Expr) -> Any:
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return None  # docstring
        if isinstance(s.value, ast.Call):
            f = s.value.func
            if isinstance(f, ast.Name) and f.id == "print" and "print" not in self.assigned:
                return self.print_stmt(s, s.value)
            on_acc = isinstance(f, ast.Attribute) and isinstance(self.value(f.value), AccVal)
            if on_acc and f.attr == "sync_block_threads":
                self.plain_args(s.value, 0, "acc.sync_block_threads()")
                return ir.SyncBlockThreads(self.line(s))
            if on_acc and f.attr == "mem_fence":
                return self.mem_fence(s)
        v = self.value(s.value)
        if isinstance(v, MultiCall):  # f(...) whose values are not used
            return self.results(v, s)[0]
        if isinstance(v, ir.Expr):
            keep = (ir.AtomicOp, ir.DeviceCall, ir.BlockPredicate, ir.BlockCollective)
            return ir.ExprStmt(v, self.line(s)) if isinstance(v, keep) else None
        raise self.error(s, f"this expression has no effect ({self.describe(v)})")

    def st_If(self, s: ast.If) -> list[ir.Stmt]:
        known = self.type_test(s.test)  # if a.dtype.kind == "f": only the branch taken is compiled
        if known is not None:
            return self.block(s.body if known else s.orelse)
        chosen = self.collectives_if(s)
        if chosen is None:
            chosen = self.single_thread_if(s)
        if chosen is not None:
            return chosen
        c = to_bool(self.scalar(s.test))
        return [ir.If(c, self.block(s.body), self.block(s.orelse), self.line(s))]

    def st_While(self, s: ast.While) -> ir.Stmt:
        if s.orelse:
            raise self.error(s, "while ... else is not allowed in kernels")
        c = to_bool(self.scalar(s.test))
        self.loops.append("while")
        body = self.block(s.body)
        self.loops.pop()
        return ir.While(c, body, self.line(s))

    def st_Break(self, s: ast.Break) -> ir.Stmt:
        self.check_loop(s, "break")
        return ir.Break(self.line(s))

    def st_Continue(self, s: ast.Continue) -> ir.Stmt:
        self.check_loop(s, "continue")
        return ir.Continue(self.line(s))

    def check_loop(self, s: ast.stmt, what: str) -> None:
        if not self.loops:
            raise self.error(s, f"{what} outside a loop")
        if self.loops[-1] == "nd":
            raise self.error(
                s,
                f"{what} is not allowed directly inside acc.uniform_elements_nd loops; use a flag variable or 1D loops",
            )

    def st_Return(self, s: ast.Return) -> ir.Stmt:
        if self.is_kernel:
            if s.value is not None:
                raise self.error(
                    s, "kernels return nothing; write results to an output array (a bare 'return' ends the thread)"
                )
            return ir.Return(None, self.line(s))
        if s.value is None:
            self.note_return(VOID, s)
            return ir.Return(None, self.line(s))
        pre, v = self.results(self.value(s.value), s)
        if isinstance(v, TupleVal):  # return a, b: several values
            what = "a number (each value a device function returns is a number)"
            items = [self.as_scalar(it, s, what) for it in v.items]
            if not items:
                raise self.error(s, "a device function returns one value or more: 'return ()' gives none")
            t = self.note_return(TupleType(tuple(it.type for it in items)), s)
            pack = ir.Pack([cast(it, want) for it, want in zip(items, t.items)], t)
            return pre + [ir.Return(pack, self.line(s))]
        v = self.as_scalar(v, s, "a number or several (return a, b)")
        t = self.note_return(v.type, s)
        return [ir.Return(cast(v, t), self.line(s))]

    def note_return(self, t: Any, s: ast.AST) -> Any:
        """The function's return type so far with ``t`` (a return at ``s``) unified in: VOID, a
        scalar type, or a TupleType unified position by position."""
        cur = self.var_types.get("<return>")
        if self.first_return is None:
            self.first_return = self.line(s)
        if cur is None:
            self.var_types["<return>"] = t
            return t
        if (cur is VOID) != (t is VOID):
            raise self.error(s, "a device function must return a value on every return or on none")
        if t is VOID:
            return t
        if isinstance(cur, TupleType) != isinstance(t, TupleType) or (
            isinstance(t, TupleType) and len(t.items) != len(cur.items)
        ):
            raise self.error(
                s,
                f"this return gives {_count(t)}, the return at line {self.first_return} {_count(cur)}: every "
                "return of a device function gives the same number of values",
            )
        if isinstance(t, TupleType):
            new: Any = TupleType(tuple(variable_type(a, b) for a, b in zip(cur.items, t.items)))
        else:
            new = variable_type(cur, t)
        if new != cur:
            self.var_types["<return>"] = new
            self.changed = True
        return new

    def results(self, v: Any, node: ast.AST) -> tuple[list[ir.Stmt], Any]:
        """``v`` made usable as a compile-time tuple: a call returning several values becomes a
        CallAssign into fresh temporaries (the statements) and the TupleVal of those; anything
        else is returned as it is, with no statements."""
        if not isinstance(v, MultiCall):
            return [], v
        temps = []
        for k, t in enumerate(v.call.type.items):
            self.ntmp += 1
            name = f"t{self.ntmp}_r{k}"
            self.locals[name] = t
            temps.append(ir.Var(name, t))
        return [ir.CallAssign(temps, v.call, self.line(node))], TupleVal(list(temps))

    # --------------------------------------------------------------- debug range checks
    def check_message(self, arr: ir.ArrayRef, idx: tuple, node: ast.AST) -> str | None:
        if not self.ctx.debug or not idx:
            return None
        label = self.ctx.labels.get(arr.name, arr.name)
        return f"kernel {self.ctx.kernel_name!r} ({self.p.filename}:{self.line(node)}): index out of range for {label}"


def _count(t: Any) -> str:
    """``one value`` / ``2 values``: what a return of type ``t`` gives."""
    return f"{len(t.items)} values" if isinstance(t, TupleType) else "one value"


_FORBIDDEN_EXPRS = (
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.Lambda,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.NamedExpr,
    ast.JoinedStr,
)
_FORBIDDEN_STMTS = (
    ast.Try,
    ast.With,
    ast.AsyncWith,
    ast.AsyncFor,
    ast.Raise,
    ast.Import,
    ast.ImportFrom,
    ast.Global,
    ast.Nonlocal,
    ast.ClassDef,
    ast.AsyncFunctionDef,
    ast.Delete,
) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _prescan(b: FunctionBuilder, body: list[ast.stmt]) -> None:
    """Refuse constructs the kernel language lacks before translating anything (first in source order)."""
    bad = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, _FORBIDDEN_EXPRS) or isinstance(node, _FORBIDDEN_STMTS):
                bad.append(node)
    if bad:
        node = min(bad, key=lambda n: (n.lineno, n.col_offset))
        msg = b.unsupported_stmt(node) if isinstance(node, ast.stmt) else b.unsupported(node)
        raise b.error(node, msg)


def run_builder(make: Any, body: list[ast.stmt]) -> tuple[FunctionBuilder, list[ir.Stmt]]:
    """Translate ``body`` until the locals' types stop changing (numba-like unification)."""
    var_types: dict[str, Any] = {}
    for attempt in range(8):
        b = make(var_types)
        if attempt == 0:
            _prescan(b, body)
        stmts = b.prologue + b.block(body)
        if not b.changed:
            return b, stmts
    raise b.error(body[0], "the types of the local variables do not settle; assign each variable one type")


def view_binding(spec: ArgSpec, ctx: CompileContext, params: list[ir.Param], prefix: str) -> ViewVal:
    size = ir.Var(f"{prefix}_size", INDEX)
    fields = {}
    byname = {p.name: p for p in params}
    for f in spec.layout.iter_fields():
        p = byname[f"{prefix}_{f.name}"]
        t = p.type
        pitch = ir.Var(f"{prefix}_{f.name}_pitch", INDEX) if f.kind in ("vector", "matrix") else None
        extents = (size,) + tuple(ir.Const(c, INDEX) for c in f.shape) if f.kind != "scalar" else ()
        fields[f.name] = ir.ArrayRef(p.name, t, extents, pitch)
        kind = {"column": "column", "vector": "vector", "matrix": "matrix", "scalar": "scalar"}[f.kind]
        ctx.labels[p.name] = f"{kind} {f.name!r} of argument {spec.name!r} ({spec.describe()})"
    return ViewVal(spec.layout, spec.const, fields, size, f"argument {spec.name!r} ({spec.describe()})")


@deep_recursion
def build_kernel(
    parsed: ParsedFunction, specs: list[ArgSpec], ndim: int, debug: bool, specialise: Callable[..., tuple] | None = None
) -> ir.KernelDef:
    """The IR of a kernel for one launch signature; ``specialise`` builds the device functions
    it calls (see :attr:`CompileContext.specialise`)."""
    if not parsed.params:
        raise KernelSyntaxError(
            f"{parsed.filename}:{parsed.line_offset + 1}: kernel {parsed.name!r} must take acc as its first parameter",
            parsed.filename,
            parsed.line_offset + 1,
        )
    ctx = CompileContext(parsed.name, ndim, debug, specialise=specialise)
    ctx.args = dict(zip(parsed.params[1:], specs))
    params: list[ir.Param] = []
    per_arg = []
    for spec in specs:
        ps = params_of(spec)
        params += ps
        per_arg.append(ps)
    assigned = assigned_names(parsed.tree)

    def make(var_types: dict) -> FunctionBuilder:
        bindings: dict[str, Any] = {parsed.params[0]: AccVal()}
        prologue: list[ir.Stmt] = []
        for spec, ps, pname in zip(specs, per_arg, parsed.params[1:]):
            if spec.kind == "view":
                bindings[pname] = view_binding(spec, ctx, ps, f"a{spec.index}")
            elif spec.kind == "scalar":
                pv = ir.Var(ps[0].name, spec.dtype)
                ctx.labels[ps[0].name] = f"argument {spec.name!r} ({spec.describe()})"
                if pname in assigned:
                    var_types.setdefault(pname, spec.dtype)
                    prologue.append(("init", pname, pv))
                else:
                    bindings[pname] = pv
            else:
                ext = tuple(ir.Var(p.name, INDEX) for p in ps[1:])
                bindings[pname] = ir.ArrayRef(ps[0].name, ps[0].type, ext)
                ctx.labels[ps[0].name] = f"argument {spec.name!r} ({spec.describe()})"
        b = FunctionBuilder(parsed, ctx, True, bindings, var_types, [])
        b.prologue = [ir.Assign(b.var(n), cast(pv, var_types[n])) for _, n, pv in prologue]
        return b

    b, body = run_builder(make, parsed.tree.body)
    k = ir.KernelDef(
        parsed.name,
        ndim,
        params,
        b.locals,
        body,
        list(ctx.shared.values()),
        ctx.functions,
        ctx.uses_dynamic_shared,
        debug,
        parsed.filename,
        parsed.line_offset + 1,
        per_arg,
        list(ctx.private.values()) + list(b.local_arrays.values()),
        list(ctx.shared_needs.values()),
    )
    return k
