"""A readable text rendering of the IR (for debugging emitters and error reports)."""

from __future__ import annotations

from typing import Any

from . import ir
from .visit import Visitor


class _Dump(Visitor):
    """Expressions render to a string; statements append lines to ``out`` at ``pad``."""

    visitor_name = "the IR dump"

    def missing(self, node: Any, *args: Any) -> Any:
        if args:  # a statement (out, pad): its kind's name
            out, pad = args
            out.append(f"{pad}{type(node).__name__.lower()}")
            return None
        return repr(node)

    def e(self, x: Any) -> str:
        return self.visit(x)

    def join(self, xs: Any) -> str:
        return ", ".join(self.e(x) for x in xs)

    # ------------------------------------------------------------------ expressions
    def visit_Const(self, x: ir.Const) -> str:
        return f"{x.value!r}:{x.type}"

    def visit_Var(self, x: ir.Var) -> str:
        return x.name

    def visit_Index(self, x: ir.Index) -> str:
        return f"{x.query}[{x.dim}]"

    def visit_Cast(self, x: ir.Cast) -> str:
        return f"{x.type}({self.e(x.value)})"

    def visit_UnaryOp(self, x: ir.UnaryOp) -> str:
        return f"({x.op} {self.e(x.operand)})"

    def visit_BinOp(self, x: ir.BinOp | ir.Compare) -> str:
        return f"({self.e(x.left)} {x.op} {self.e(x.right)})"

    visit_Compare = visit_BinOp

    def visit_BoolOp(self, x: ir.BoolOp) -> str:
        return "(" + f" {x.op} ".join(self.e(v) for v in x.values) + ")"

    def visit_Select(self, x: ir.Select) -> str:
        return f"({self.e(x.if_true)} if {self.e(x.cond)} else {self.e(x.if_false)})"

    def visit_MathCall(self, x: ir.MathCall) -> str:
        return f"{x.func}({self.join(x.args)})"

    def visit_ArrayRef(self, x: ir.ArrayRef) -> str:
        return x.name

    def visit_Load(self, x: ir.Load) -> str:
        return f"{x.array.name}[{self.join(x.indices)}]"

    def visit_AtomicOp(self, x: ir.AtomicOp) -> str:
        return f"atomic_{x.op}({x.array.name}[{self.join(x.indices)}], {self.join(x.operands)})"

    def visit_DeviceCall(self, x: ir.DeviceCall) -> str:
        return f"{x.function}({self.join(x.args)})"

    def visit_Pack(self, x: ir.Pack) -> str:
        return f"({self.join(x.items)})"

    def visit_WarpOp(self, x: ir.WarpOp) -> str:
        return f"warp_{x.op}({self.join(x.args)})"

    def visit_BlockPredicate(self, x: ir.BlockPredicate) -> str:
        return f"sync_block_threads_{x.op}({self.e(x.value)})"

    def visit_BlockCollectives(self, x: ir.BlockCollectives) -> str:
        return "block_collectives"

    def visit_SingleThreadPerBlock(self, x: ir.SingleThreadPerBlock) -> str:
        return "requires_single_thread_per_block"

    def visit_BlockCollective(self, x: ir.BlockCollective) -> str:
        return f"block_{x.op}({self.e(x.value)})"

    # ------------------------------------------------------------------ statements
    def stmts(self, body: list, pad: str) -> list[str]:
        out: list[str] = []
        for s in body:
            self.visit(s, out, pad)
        return out

    def nested(self, body: list, pad: str) -> list[str]:
        return self.stmts(body, pad + "  ")

    def visit_Assign(self, s: ir.Assign, out: list[str], pad: str) -> None:
        out.append(f"{pad}{s.target.name} = {self.e(s.value)}")

    def visit_Store(self, s: ir.Store, out: list[str], pad: str) -> None:
        out.append(f"{pad}{s.array.name}[{self.join(s.indices)}] = {self.e(s.value)}")

    def visit_ExprStmt(self, s: ir.ExprStmt, out: list[str], pad: str) -> None:
        out.append(f"{pad}{self.e(s.value)}")

    def visit_CallAssign(self, s: ir.CallAssign, out: list[str], pad: str) -> None:
        out.append(f"{pad}{', '.join(t.name for t in s.targets)} = {self.e(s.call)}")

    def visit_If(self, s: ir.If, out: list[str], pad: str) -> None:
        out.append(f"{pad}if {self.e(s.cond)}:")
        out += self.nested(s.body, pad)
        if s.orelse:
            out.append(f"{pad}else:")
            out += self.nested(s.orelse, pad)

    def visit_While(self, s: ir.While, out: list[str], pad: str) -> None:
        out.append(f"{pad}while {self.e(s.cond)}:")
        out += self.nested(s.body, pad)

    def visit_ForRange(self, s: ir.ForRange, out: list[str], pad: str) -> None:
        out.append(f"{pad}for {s.var.name} in range({self.e(s.start)}, {self.e(s.stop)}, {self.e(s.step)}):")
        out += self.nested(s.body, pad)

    def visit_StridedLoop(self, s: ir.StridedLoop, out: list[str], pad: str) -> None:
        loc = f", local {s.local_var.name}" if s.local_var is not None else ""
        out.append(
            f"{pad}{s.kind}[dim {s.dim}] {s.var.name}{loc}: start={self.e(s.start)} stop={self.e(s.stop)} "
            f"stride={self.e(s.stride)} chunk={self.e(s.chunk)}"
        )
        out += self.nested(s.body, pad)

    def visit_Return(self, s: ir.Return, out: list[str], pad: str) -> None:
        out.append(f"{pad}return" + (f" {self.e(s.value)}" if s.value is not None else ""))

    def visit_MemFence(self, s: ir.MemFence, out: list[str], pad: str) -> None:
        out.append(f"{pad}mem_fence({s.scope})")

    def visit_Break(self, s: ir.Break, out: list[str], pad: str) -> None:
        out.append(f"{pad}break")

    def visit_Continue(self, s: ir.Continue, out: list[str], pad: str) -> None:
        out.append(f"{pad}continue")

    def visit_SyncBlockThreads(self, s: ir.SyncBlockThreads, out: list[str], pad: str) -> None:
        out.append(f"{pad}syncblockthreads")

    def visit_Assert(self, s: ir.Assert, out: list[str], pad: str) -> None:
        out.append(f"{pad}assert {self.e(s.cond)}, {str(s.message)!r}")

    def visit_Print(self, s: ir.Print, out: list[str], pad: str) -> None:
        out.append(f"{pad}print(" + ", ".join(repr(x) if isinstance(x, str) else self.e(x) for x in s.items) + ")")

    def visit_DeclareLocal(self, s: ir.DeclareLocal, out: list[str], pad: str) -> None:
        out.append(f"{pad}{s.array.name} = zeros({[int(e.value) for e in s.array.extents]}, {s.array.type.dtype})")


def dump(node: Any, indent: int = 0) -> str:
    d = _Dump()
    if isinstance(node, ir.KernelDef):
        lines = [f"kernel {node.name} (ndim={node.ndim})"]
        lines += [f"  param {p.name}: {p.type} ({p.role}, arg {p.arg_index} {p.field})" for p in node.params]
        lines += [f"  shared {s.name}: {s.dtype}{list(s.shape)}" for s in node.shared]
        lines += [f"  private {s.name}: {s.dtype}{list(s.shape)}" for s in node.private]
        lines += [f"  local {n}: {t}" for n, t in node.locals.items()]
        lines += d.stmts(node.body, "  ")
        for f in node.functions.values():
            lines.append(dump(f, 0))
        return "\n".join(lines)
    if isinstance(node, ir.Function):
        ps = ", ".join(f"{p.name}: {p.type}" for p in node.params)
        lines = [f"function {node.name}({ps}) -> {node.return_type}"]
        lines += [f"  private {s.name}: {s.dtype}{list(s.shape)}" for s in node.private]
        lines += [f"  local {n}: {t}" for n, t in node.locals.items()]
        return "\n".join(lines + d.stmts(node.body, "  "))
    if isinstance(node, list):
        return "\n".join(d.stmts(node, "  " * indent))
    return d.e(node)
