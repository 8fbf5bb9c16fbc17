"""Front-end, the kernel vocabulary of CMSSW's alpaka code: warps, block predicates, fences and
random engines (``acc.warp_*``, ``acc.sync_block_threads_*``, ``acc.mem_fence``, ``acc.rand_*``)."""

from __future__ import annotations

import ast
import difflib
import re
from typing import Any

from . import ir
from ._expressions import ACC_MEMBERS, cast, to_bool
from ._library import RAND_STATE_WORDS, library_function
from ._values import DTypeVal
from .operations import INTRINSICS
from .types import BOOL, FLOAT64, INDEX, INT32, UINT32, UINT64, ArrayType

#: alpaka and CUDA names whose snake_case is not the acc member (alpaka::getIdx<Grid, Threads>...)
_ALPAKA_NAMES = {
    "getIdx": ("global_thread_idx", "thread_idx", "block_idx"),
    "getWorkDiv": ("grid_blocks", "block_threads", "thread_elements"),
    "declareSharedVar": ("shared_scalar", "shared_array"),
    "getDynSharedMem": ("dynamic_shared_array",),
    "blockDim": ("block_threads",),
    "gridDim": ("grid_blocks",),
    "syncthreads": ("sync_block_threads",),
    "__syncthreads": ("sync_block_threads",),
    "threadfence": ("mem_fence",),
    "__threadfence": ("mem_fence",),
    "syncBlockThreadsPredicate": ("sync_block_threads_count", "sync_block_threads_and", "sync_block_threads_or"),
    "activemask": ("warp_active_mask",),
    "__activemask": ("warp_active_mask",),
    "shfl": ("warp_shfl",),
    "shflUp": ("warp_shfl_up",),
    "shflDown": ("warp_shfl_down",),
    "shflXor": ("warp_shfl_xor",),
    "ballot": ("warp_ballot",),
    "__float_as_uint": ("bit_cast",),
    "__float_as_int": ("bit_cast",),
    "__int_as_float": ("bit_cast",),
    "__double_as_longlong": ("bit_cast",),
    "bit_cast": ("bit_cast",),
    # CMSSW's alpakatools (HeterogeneousCore/AlpakaInterface/interface/workdivision.h), old and new
    "elements_with_stride": ("uniform_elements",),
    "elements_with_stride_nd": ("uniform_elements_nd",),
    "blocks_with_stride": ("uniform_groups",),
    "elements_in_block": ("uniform_group_elements",),
    "for_each_element_in_grid_strided": ("uniform_elements",),
    "for_each_element_in_block_strided": ("independent_group_elements",),
    "independent_group": ("independent_groups",),
    "uniform_elements_along": ("uniform_elements",),
    "independent_groups_along": ("independent_groups",),
    "independent_group_elements_along": ("independent_group_elements",),
    "uniform_groups_along": ("uniform_groups",),
    "uniform_group_elements_along": ("uniform_group_elements",),
    "requires_single_thread_per_block": ("block_threads",),
}


def snake_case(name: str) -> str:
    """``syncBlockThreads`` -> ``sync_block_threads``, ``atomicCAS`` -> ``atomic_cas``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def acc_member_suggestions(name: str) -> list[str]:
    """The acc members a misspelt or alpaka-style (camelCase) ``name`` most likely means."""
    if name in _ALPAKA_NAMES:
        return list(_ALPAKA_NAMES[name])
    along = re.fullmatch(r"(\w+)_(x|y|z)", name)  # CMSSW's uniform_elements_x: a dim= argument here
    if along and along.group(1) in ACC_MEMBERS:
        return [along.group(1)]
    snake = snake_case(name)
    if snake != name and snake in _ALPAKA_NAMES:
        return list(_ALPAKA_NAMES[snake])
    if snake in ACC_MEMBERS:
        return [snake]
    return difflib.get_close_matches(snake, ACC_MEMBERS, n=3, cutoff=0.6)


class VocabularyBuilder:
    """Mixin of the function builder (uses ``error``, ``value``, ``scalar``, ``plain_args``,
    ``describe``, ``ctx``, ``scope``, ``line`` and ``is_kernel`` of the others)."""

    # --------------------------------------------------------------- errors
    def unknown_acc_member(self, name: str) -> str:
        """The message for ``acc.<name>`` that is no member: the likely ones first, then all."""
        close = [f"acc.{m}" for m in acc_member_suggestions(name)]
        hint = ""
        if close:
            hint = f"; did you mean {close[0] if len(close) == 1 else ', '.join(close[:-1]) + ' or ' + close[-1]}?"
            if name.endswith(("_along", "_x", "_y", "_z")):
                hint += " (in 2D/3D kernels the 1D loops take dim=d)"
        return f"acc has no member {name!r}{hint} (acc members are: {', '.join(ACC_MEMBERS)})"

    def module_attribute(self, base: Any, name: str, node: ast.Attribute) -> Any:
        """``module.<name>``; CMSSW's free functions of the acc (``cms::alpakatools::uniform_elements(acc,
        n)``, ``once_per_block(acc)``) written on a module name the acc member they are here."""
        if not hasattr(base.module, name):
            member = name if name in ACC_MEMBERS else _ALPAKA_NAMES.get(name, (None,))[0]
            if member is not None:
                raise self.error(
                    node, f"{base.name}.{name} is no kernel function: CMSSW's {name}(acc, ...) is acc.{member}(...)"
                )
        return super().module_attribute(base, name, node)  # type: ignore[misc]

    # --------------------------------------------------------------- compile-time type tests
    def type_test(self, node: ast.AST) -> bool | None:
        """The value of a test of argument types (``a.dtype == np.float32``, ``a.dtype.kind == "f"``,
        ``a.dtype.itemsize == 8``, joined by ``and``/``or``/``not``), known when the function is
        specialised; None for any other expression. An ``if`` on one compiles only the branch
        taken (C++'s ``if constexpr``)."""
        if isinstance(node, ast.BoolOp):
            parts = [self.type_test(v) for v in node.values]
            if any(p is None for p in parts):
                return None
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.type_test(node.operand)
            return None if inner is None else not inner
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
            return None
        sides = (node.left, node.comparators[0])
        if not any(isinstance(n, ast.Attribute) and n.attr == "dtype" for side in sides for n in ast.walk(side)):
            return None
        a, b = (self.value(n) for n in sides)
        a, b = (x.type.name if isinstance(x, DTypeVal) else x.value if isinstance(x, ir.Const) else x for x in (a, b))
        if not (isinstance(a, (str, int)) and isinstance(b, (str, int))) or type(a) is not type(b):
            raise self.error(
                node, "compare a dtype with a numpy type, its .kind with a string, its .itemsize with an int"
            )
        if isinstance(node.ops[0], ast.Eq):
            return a == b
        if isinstance(node.ops[0], ast.NotEq):
            return a != b
        raise self.error(node, "a dtype test compares with == or !=")

    # --------------------------------------------------------------- expressions
    def warp_op(self, op: str, node: ast.Call) -> ir.Expr:
        if op == "active_mask":
            self.plain_args(node, 0, "acc.warp_active_mask()")
            return ir.WarpOp(op, [], UINT64)
        if op in ("all", "any", "ballot"):
            (p,) = self.plain_args(node, 1, f"acc.warp_{op}(predicate)")
            return ir.WarpOp(op, [to_bool(self.scalar(p))], UINT64 if op == "ballot" else BOOL)
        if op in ("ballot_mask", "shfl_mask"):
            return self.masked_warp_op(op, node)
        if op in ("match_any", "match_all"):
            (a,) = self.plain_args(node, 1, f"acc.warp_{op}(value)")
            v = self.scalar(a)
            if v.type.bits < 32:  # bools and narrow integers: their value, widened (equal stays equal)
                v = cast(v, INT32)
            return ir.WarpOp(op, [v], UINT64)
        width = self.shuffle_width(node) if op == "shfl" else None
        what = {"shfl": "lane", "shfl_up": "delta", "shfl_down": "delta", "shfl_xor": "mask"}[op]
        if node.keywords and width is None and op != "shfl":
            raise self.error(node, f"acc.warp_{op}(value, {what}) takes no keywords")
        v, k = (self.scalar(a) for a in self.positional(node, 2, f"acc.warp_{op}(value, {what})"))
        if k.type.is_float or k.type.is_bool:
            raise self.error(node, f"acc.warp_{op}(value, {what}): the {what} must be an integer, got {k.type}")
        if width is not None and width < 64:  # 64 or more: the whole warp (no warp is wider)
            return ir.WarpOp("shfl_width", [v, cast(k, INT32), ir.Const(width, INT32)], v.type)
        return ir.WarpOp(op, [v, cast(k, INT32)], v.type)

    def positional(self, node: ast.Call, n: int, what: str) -> list[ast.AST]:
        """The ``n`` positional arguments of a call whose keywords were read already."""
        if len(node.args) != n or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, f"{what} takes {n} positional argument(s)")
        return list(node.args)

    def shuffle_width(self, node: ast.Call) -> int | None:
        """The ``width=`` of ``acc.warp_shfl(value, lane, width=w)`` (alpaka's width: lanes in
        segments of ``w``), a constant power of two; None without it."""
        width = None
        for kw in node.keywords:
            w = self.value(kw.value) if kw.arg == "width" else None
            if kw.arg != "width":
                raise self.error(node, f"acc.warp_shfl(value, lane, width=w) takes no keyword {kw.arg!r}")
            if (
                not isinstance(w, ir.Const)
                or not w.type.is_integer
                or int(w.value) < 1
                or int(w.value) & (int(w.value) - 1)
            ):
                raise self.error(
                    node,
                    "acc.warp_shfl(value, lane, width=w): the width must be a constant power of two (1, 2, 4 ... 64), "
                    f"got {ast.unparse(kw.value)}",
                )
            width = int(w.value)
        return width

    def bit_cast(self, node: ast.Call) -> ir.Expr:
        """``acc.bit_cast(value, dtype)``: ``value``'s bits as a scalar of ``dtype`` of the same size
        (C++20's ``std::bit_cast``, CUDA's ``__float_as_uint``; numpy's ``.view(dtype)``)."""
        v, d = self.plain_args(node, 2, "acc.bit_cast(value, dtype)")
        x = self.scalar(v)
        dt = self.value(d)
        if not isinstance(dt, DTypeVal) or dt.type.is_bool:
            raise self.error(node, "acc.bit_cast(value, dtype): dtype must be a numpy type such as np.uint32")
        t = dt.type
        if x.type.is_bool or x.type.bits != t.bits:
            raise self.error(
                node,
                f"acc.bit_cast(value, dtype): value and dtype must have the same size, got {x.type} and {t} "
                f"(convert the value first, e.g. np.float32(x))",
            )
        if x.type == t:
            return x
        if not (x.type.is_float or t.is_float):  # integers of one width: the same bits, wrapped
            return cast(x, t)
        return ir.MathCall("bit_cast", [x], t)

    def masked_warp_op(self, op: str, node: ast.Call) -> ir.Expr:
        """``acc.warp_ballot_mask(mask, p)``, ``acc.warp_shfl_mask(mask, v, lane)``: the lanes
        ``mask`` names take part (CUDA's ``*_sync`` member mask; CMSSW's ``ballot_mask``/``shfl_mask``)."""
        sig = "(mask, predicate)" if op == "ballot_mask" else "(mask, value, lane)"
        args = [self.scalar(a) for a in self.plain_args(node, 2 if op == "ballot_mask" else 3, f"acc.warp_{op}{sig}")]
        if args[0].type.is_float or args[0].type.is_bool:
            raise self.error(node, f"acc.warp_{op}{sig}: the mask must be an integer (a uint64), got {args[0].type}")
        mask = cast(args[0], UINT64)
        if op == "ballot_mask":
            return ir.WarpOp(op, [mask, to_bool(args[1])], UINT64)
        v, k = args[1], args[2]
        if k.type.is_float or k.type.is_bool:
            raise self.error(node, f"acc.warp_{op}{sig}: the lane must be an integer, got {k.type}")
        return ir.WarpOp(op, [mask, v, cast(k, INT32)], v.type)

    def bit_intrinsic(self, name: str, node: ast.Call) -> ir.Expr:
        """``acc.popcount(x)``, ``clz``, ``ffs``, ``brev``: a ``MathCall`` of the intrinsic declared
        in :mod:`portable.compiler.operations` (folded when ``x`` is a constant)."""
        (a,) = self.plain_args(node, 1, f"acc.{name}(x)")
        x = self.scalar(a)
        f = INTRINSICS[name]
        try:
            t = f.result(x.type)
        except TypeError as exc:
            raise self.error(node, str(exc)) from None
        if isinstance(x, ir.Const):
            return ir.Const(f.fold_value(int(x.value), x.type), t)
        return ir.MathCall(name, [x], t)

    def engine(self, node: ast.AST, what: str) -> ir.ArrayRef:
        eng = self.value(node)
        if not (isinstance(eng, ir.ArrayRef) and eng.name in self.ctx.engines):
            raise self.error(
                node,
                f"{what} takes a random engine first (eng = acc.rand_engine(seed, subsequence)), "
                f"got {self.describe(eng)}",
            )
        return eng

    def rand_draw(self, name: str, node: ast.Call) -> ir.Expr:
        if name == "rand_u32":
            (e,) = self.plain_args(node, 1, "acc.rand_u32(engine)")
            return self.builtin_device_call(
                "rand.next_u32", [self.value(node.func.value), self.engine(e, "acc.rand_u32")], node
            )
        args = self.plain_args(node, (1, 2), f"acc.{name}(engine, dtype)")
        eng = self.engine(args[0], f"acc.{name}")
        t = FLOAT64
        if len(args) == 2:
            dt = self.value(args[1])
            if not isinstance(dt, DTypeVal) or not dt.type.is_float:
                raise self.error(node, f"acc.{name}(engine, dtype): dtype must be np.float32 or np.float64")
            t = dt.type
        fn = f"rand.{name[5:]}_{'f32' if t.name == 'float32' else 'f64'}"
        return self.builtin_device_call(fn, [self.value(node.func.value), eng], node)  # acc: the target's trait

    def builtin_device_call(self, name: str, vals: list, node: ast.AST) -> ir.Expr:
        """A call of the kernel language's own device function ``name`` (:mod:`._library`)."""
        assert self.ctx.specialise is not None, "build_kernel was given no device-function builder"
        try:
            fname, ret, args = self.ctx.specialise(library_function(name), vals, self.ctx)
        except TypeError as exc:
            raise self.error(node, str(exc)) from None
        return ir.DeviceCall(fname, args, ret)

    # --------------------------------------------------------------- statements
    def mem_fence(self, s: ast.Expr) -> ir.Stmt:
        (a,) = self.plain_args(s.value, 1, 'acc.mem_fence("block" | "grid" | "device")')
        scope = self.value(a)
        if scope not in ir.FENCE_SCOPES:
            raise self.error(s, 'acc.mem_fence(scope): scope must be "block", "grid" or "device"')
        return ir.MemFence(scope, self.line(s))

    def rand_engine(self, s: ast.Assign) -> list[ir.Stmt]:
        """``eng = acc.rand_engine(seed, subsequence)``: a per-thread Philox4x32-10 state (a private
        uint32 array) initialised for that seed and subsequence."""
        if not self.is_kernel:
            raise self.error(
                s,
                "acc.rand_engine() is allowed in the kernel body only; make the engine there and pass it "
                "to this function (smear(acc, eng, x): by reference, its draws advance the kernel's engine)",
            )
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            raise self.error(s, "assign acc.rand_engine(seed, subsequence) to one name")
        args = self.plain_args(s.value, 2, "acc.rand_engine(seed, subsequence)")
        seed, sub = (self.scalar(a, "an integer") for a in args)
        for v, what in ((seed, "seed"), (sub, "subsequence")):
            if v.type.is_float:
                raise self.error(s, f"acc.rand_engine(seed, subsequence): the {what} must be an integer, got {v.type}")
        name = s.targets[0].id
        pname = "pv_" + name
        self.ctx.private[pname] = ir.SharedArray(pname, UINT32, (RAND_STATE_WORDS,))
        self.ctx.labels[pname] = f"random engine {name!r}"
        self.ctx.engines.add(pname)
        eng = ir.ArrayRef(pname, ArrayType(UINT32, "private", 1), (ir.Const(RAND_STATE_WORDS, INDEX),))
        self.scope[name] = eng
        call = self.builtin_device_call("rand.init", [eng, cast(seed, UINT64), cast(sub, UINT64)], s)
        return [ir.ExprStmt(call, self.line(s))]
