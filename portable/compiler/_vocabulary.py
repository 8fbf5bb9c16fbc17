"""Front-end, the kernel vocabulary of CMSSW's alpaka code: warps, block predicates, fences and
random engines (``acc.warp_*``, ``acc.sync_block_threads_*``, ``acc.mem_fence``, ``acc.rand_*``)."""

from __future__ import annotations

import ast
import difflib
import re

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
    "declareSharedVar": ("shared_array",),
    "getDynSharedMem": ("dynamic_shared_array",),
    "blockDim": ("block_threads",),
    "gridDim": ("grid_blocks",),
    "syncthreads": ("sync_block_threads",),
    "__syncthreads": ("sync_block_threads",),
    "threadfence": ("mem_fence",),
    "__threadfence": ("mem_fence",),
}


def snake_case(name: str) -> str:
    """``syncBlockThreads`` -> ``sync_block_threads``, ``atomicCAS`` -> ``atomic_cas``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def acc_member_suggestions(name: str) -> list[str]:
    """The acc members a misspelt or alpaka-style (camelCase) ``name`` most likely means."""
    if name in _ALPAKA_NAMES:
        return list(_ALPAKA_NAMES[name])
    snake = snake_case(name)
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
        return f"acc has no member {name!r}{hint} (acc members are: {', '.join(ACC_MEMBERS)})"

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
        if not (isinstance(eng, ir.ArrayRef) and eng.type.kind == "private" and eng.name.startswith("pv_")):
            raise self.error(
                node,
                f"{what} takes a random engine first (eng = acc.rand_engine(seed, subsequence)), "
                f"got {self.describe(eng)}",
            )
        return eng

    def rand_draw(self, name: str, node: ast.Call) -> ir.Expr:
        if name == "rand_u32":
            (e,) = self.plain_args(node, 1, "acc.rand_u32(engine)")
            return self.builtin_device_call("rand.next_u32", [self.engine(e, "acc.rand_u32")], node)
        args = self.plain_args(node, (1, 2), f"acc.{name}(engine, dtype)")
        eng = self.engine(args[0], f"acc.{name}")
        t = FLOAT64
        if len(args) == 2:
            dt = self.value(args[1])
            if not isinstance(dt, DTypeVal) or not dt.type.is_float:
                raise self.error(node, f"acc.{name}(engine, dtype): dtype must be np.float32 or np.float64")
            t = dt.type
        fn = f"rand.{name[5:]}_{'f32' if t.name == 'float32' else 'f64'}"
        return self.builtin_device_call(fn, [eng], node)

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
                s, "acc.rand_engine() is allowed in the kernel body only; pass the engine to device functions"
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
        eng = ir.ArrayRef(pname, ArrayType(UINT32, "private", 1), (ir.Const(RAND_STATE_WORDS, INDEX),))
        self.scope[name] = eng
        call = self.builtin_device_call("rand.init", [eng, cast(seed, UINT64), cast(sub, UINT64)], s)
        return [ir.ExprStmt(call, self.line(s))]
