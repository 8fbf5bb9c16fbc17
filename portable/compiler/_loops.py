"""Front-end, loops: ``for`` over ``range`` and the alpaka loops (``acc.uniform_elements`` and
friends) lowered to :class:`~portable.compiler.ir.ForRange` / :class:`~portable.compiler.ir.StridedLoop`."""

from __future__ import annotations

import ast
from typing import Any

from . import ir
from ._expressions import binop, cast, compare, imin
from ._values import LoopVal, RangeVal, TupleVal
from .types import FLOAT64, INDEX, variable_type


class LoopBuilder:
    """Mixin of the function builder: loop statements."""

    # --------------------------------------------------------------- loops
    def st_For(self, s: ast.For) -> list[ir.Stmt]:
        if s.orelse:
            raise self.error(s, "for ... else is not allowed in kernels")
        it = self.value(s.iter)
        pre: list[ir.Stmt] = []
        if isinstance(it, RangeVal):
            if not isinstance(s.target, ast.Name):
                raise self.error(s, "a range() loop needs one loop variable")
            v = self.loop_var(s.target, s)
            self.loops.append("range")
            body = self.block(s.body)
            self.loops.pop()
            step = cast(it.step, v.type)
            check = (
                None
                if isinstance(step, ir.Const)
                else (
                    f"kernel {self.ctx.kernel_name!r} ({self.p.filename}:{self.line(s)}): range() step is 0 (Python "
                    "raises ValueError: range() arg 3 must not be zero); give the loop a step that is never 0"
                )
            )
            return [ir.ForRange(v, cast(it.start, v.type), cast(it.stop, v.type), step, body, self.line(s), check)]
        if isinstance(it, LoopVal):
            return pre + self.acc_loop(it, s)
        raise self.error(
            s, f"kernels loop over range(...) or acc loops (acc.uniform_elements(n), ...), not over {self.describe(it)}"
        )

    def range_value(self, node: ast.Call) -> RangeVal:
        """``range(stop)``, ``range(start, stop)``, ``range(start, stop, step)`` of integers; a float
        argument and a constant step of 0 are refused, as Python refuses them."""
        args = []
        for a in self.plain_args(node, (1, 2, 3), "range()"):
            e = self.scalar(a, "an integer")
            if e.type.is_float:
                raise self.error(
                    node,
                    f"range() takes integers, got {e.type} {ast.unparse(a)!r} (Python raises "
                    "TypeError: 'float' object cannot be interpreted as an integer); convert "
                    "it with int(...)",
                )
            args.append(cast(e, INDEX))
        if len(args) == 3 and isinstance(args[2], ir.Const) and args[2].value == 0:
            raise self.error(node, "range() arg 3 must not be zero (Python raises ValueError)")
        if len(args) == 1:
            return RangeVal(ir.Const(0, INDEX), args[0], ir.Const(1, INDEX))
        return RangeVal(args[0], args[1], args[2] if len(args) == 3 else ir.Const(1, INDEX))

    def loop_var(self, name_node: ast.AST, s: ast.AST) -> ir.Var:
        if not isinstance(name_node, ast.Name):
            raise self.error(s, "this acc loop needs a single loop variable name")
        name = name_node.id
        if name in self.var_types and self.var_types[name] != INDEX:
            self.var_types[name] = variable_type(self.var_types[name], INDEX)
            self.changed = True
        self.var_types.setdefault(name, INDEX)
        return self.var(name)

    def loop_dim(self, lv: LoopVal, s: ast.AST) -> int:
        if lv.dim is not None:
            return lv.dim
        if self.ctx.ndim == 1:
            return 0
        raise self.error(
            s, f"acc.{lv.kind}() in a {self.ctx.ndim}D kernel needs dim= (0 = slowest) or use acc.uniform_elements_nd"
        )

    def ints(self, vals: list[Any], s: ast.AST, what: str) -> list[ir.Expr]:
        out = []
        for v in vals:
            e = self.as_scalar(v, s, "an integer")
            if e.type.is_float:
                raise self.error(s, f"{what} needs integer arguments, got {e.type}")
            out.append(cast(e, INDEX))
        return out

    def acc_loop(self, lv: LoopVal, s: ast.For) -> list[ir.Stmt]:
        I = lambda q, d: ir.Index(q, d)  # noqa: E731
        line = self.line(s)
        if lv.kind == "uniform_elements_nd":
            if len(lv.args) != 1:
                raise self.error(s, "acc.uniform_elements_nd(extent) takes one extent (a tuple in nD)")
            ext = lv.args[0]
            exts = self.ints(ext.items if isinstance(ext, TupleVal) else [ext], s, "uniform_elements_nd")
            nd = self.ctx.ndim
            if len(exts) != nd:
                raise self.error(
                    s,
                    f"acc.uniform_elements_nd extent has {len(exts)} dimension(s); the kernel "
                    f"runs a {nd}D work division",
                )
            if isinstance(s.target, ast.Tuple):
                if len(s.target.elts) != nd:
                    raise self.error(s, f"unpack uniform_elements_nd into {nd} names")
                vs = [self.loop_var(t, s) for t in s.target.elts]
            elif isinstance(s.target, ast.Name):
                vs = [self.loop_var(ast.Name(id=f"{s.target.id}_{d}"), s) for d in range(nd)]
                self.scope[s.target.id] = TupleVal(vs)
            else:
                raise self.error(s, "bad loop target")
            tmps = [self.tmp_index(e, f"ext{d}") for d, e in enumerate(exts)]
            self.loops.append("nd" if nd > 1 else "strided")
            body = self.block(s.body)
            self.loops.pop()
            for d in reversed(range(nd)):
                e = I("thread_elements", d)
                gt = binop("+", binop("*", I("block_idx", d), I("block_threads", d)), I("thread_idx", d))
                stride = binop("*", binop("*", I("grid_blocks", d), I("block_threads", d)), e)
                body = [
                    ir.StridedLoop(
                        "uniform_elements", vs[d], d, binop("*", gt, e), tmps[d][1], stride, e, body, line=line
                    )
                ]
            return [a for a, _ in tmps] + body
        d = self.loop_dim(lv, s)
        if lv.kind == "pairs":
            return self.pairs_loop(lv, s, d)
        e = I("thread_elements", d)
        bt = I("block_threads", d)
        local_var = None
        group_base = None
        target = s.target
        n_args = {
            "uniform_elements": (1, 2),
            "uniform_groups": (1,),
            "uniform_group_elements": (2,),
            "independent_groups": (0, 1),
            "independent_group_elements": (1, 2),
        }[lv.kind]
        if len(lv.args) not in n_args:
            raise self.error(s, f"acc.{lv.kind}() takes {' or '.join(map(str, n_args))} argument(s)")
        args = self.ints(lv.args, s, f"acc.{lv.kind}")
        pre = []
        if lv.kind == "uniform_elements":
            first = args[0] if len(args) == 2 else ir.Const(0, INDEX)
            gt = binop("+", binop("*", I("block_idx", d), bt), I("thread_idx", d))
            start = binop("+", binop("*", gt, e), first)
            stop, stride, chunk = args[-1], binop("*", binop("*", I("grid_blocks", d), bt), e), e
        elif lv.kind == "uniform_groups":
            be = binop("*", bt, e)
            start = I("block_idx", d)
            stop = binop("//", binop("-", binop("+", args[0], be), ir.Const(1, INDEX)), be)
            stride, chunk = I("grid_blocks", d), ir.Const(1, INDEX)
        elif lv.kind == "uniform_group_elements":
            be = binop("*", bt, e)
            a, base = self.tmp_index(binop("*", args[0], be), "group_base")
            pre.append(a)
            start = binop("+", base, binop("*", I("thread_idx", d), e))
            stop = imin(binop("+", base, be), args[1])
            stride, chunk, group_base = be, e, base
            if isinstance(target, ast.Tuple):
                if len(target.elts) != 2:
                    raise self.error(s, "acc.uniform_group_elements yields the global index, or (global, local)")
                target, loc = target.elts
                local_var = self.loop_var(loc, s)
        elif lv.kind == "independent_groups":
            start, stride, chunk = I("block_idx", d), I("grid_blocks", d), ir.Const(1, INDEX)
            stop = args[0] if args else I("grid_blocks", d)
        else:  # independent_group_elements
            first = args[0] if len(args) == 2 else ir.Const(0, INDEX)
            start = binop("+", binop("*", I("thread_idx", d), e), first)
            stop, stride, chunk = args[-1], binop("*", bt, e), e
        var = self.loop_var(target, s)
        self.loops.append("strided")
        body = self.block(s.body)
        self.loops.pop()
        return pre + [
            ir.StridedLoop(lv.kind, var, d, start, stop, stride, chunk, body, local_var, group_base, line=line)
        ]

    def pairs_loop(self, lv: LoopVal, s: ast.For, d: int) -> list[ir.Stmt]:
        """``for k, a, b in acc.pairs(first, last)``: the block's threads share the pairs ``a < b``
        of rows ``[first, last)`` (none when ``last <= first``); ``k`` is the pair's rank in
        ``ak.combinations`` order (so an event's pairs land at ``pair_offsets[e] + k``). Lowered
        to independent_group_elements over ``k`` with ``(a, b)`` unranked from ``k``: a float
        estimate of the row, corrected in integers (the estimate is off by one at row ends from
        about 2e8 rows, where the square root's rounding swamps the distance to the next row)."""
        line = self.line(s)
        if len(lv.args) != 2:
            raise self.error(s, "acc.pairs(first, last) takes the first and the end row of the event")
        first, last = self.ints(lv.args, s, "acc.pairs")
        target = s.target
        if not (isinstance(target, ast.Tuple) and len(target.elts) in (2, 3)):
            raise self.error(s, "unpack acc.pairs(first, last) into (a, b) or (k, a, b)")
        names = list(target.elts)
        k = self.loop_var(names[0], s) if len(names) == 3 else self.tmp_index(ir.Const(0, INDEX), "pair")[1]
        a, b = (self.loop_var(t, s) for t in names[-2:])
        pre = []
        set_first, f = self.tmp_index(first, "pair_first")
        # no rows (and no pairs) when last <= first, as ak.combinations of an empty event
        rows = ir.MathCall("max", [binop("-", last, f), ir.Const(0, INDEX)], INDEX)
        set_n, n = self.tmp_index(rows, "pair_rows")
        pre += [set_first, set_n]
        i = self.tmp_index(ir.Const(0, INDEX), "pair_row")[1]
        one, two = ir.Const(1, INDEX), ir.Const(2, INDEX)

        def row_start(r: ir.Expr) -> ir.Expr:  # pairs before row r: r*n - r*(r+1)/2
            return binop("-", binop("*", r, n), binop("//", binop("*", r, binop("+", r, one)), two))

        c = binop("-", binop("*", two, n), one)  # 2n - 1
        disc = binop("-", binop("*", c, c), binop("*", ir.Const(8, INDEX), k))
        est = binop(
            "//",
            binop("-", cast(c, FLOAT64), ir.MathCall("sqrt", [cast(disc, FLOAT64)], FLOAT64)),
            ir.Const(2.0, FLOAT64),
        )
        nxt = binop("+", i, one)
        unrank = [
            ir.Assign(i, cast(est, INDEX), line),
            ir.While(compare("<=", row_start(nxt), k), [ir.Assign(i, nxt, line)], line),
            ir.While(compare(">", row_start(i), k), [ir.Assign(i, binop("-", i, one), line)], line),
            ir.Assign(a, binop("+", f, i), line),
            ir.Assign(b, binop("+", binop("+", f, binop("-", k, row_start(i))), nxt), line),
        ]
        self.loops.append("strided")
        body = self.block(s.body)
        self.loops.pop()
        count = binop("//", binop("*", n, binop("-", n, one)), two)
        e = ir.Index("thread_elements", d)
        start = binop("*", ir.Index("thread_idx", d), e)
        stride = binop("*", ir.Index("block_threads", d), e)
        return pre + [
            ir.StridedLoop("independent_group_elements", k, d, start, count, stride, e, unrank + body, line=line)
        ]

    def tmp_index(self, e: ir.Expr, what: str) -> tuple[ir.Stmt, ir.Expr]:
        self.ntmp += 1
        name = f"t{self.ntmp}_{what}"
        self.locals[name] = e.type
        return ir.Assign(ir.Var(name, e.type), e), ir.Var(name, e.type)
