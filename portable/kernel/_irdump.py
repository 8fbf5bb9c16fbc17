"""A readable text rendering of the IR (for debugging emitters and error reports)."""

from __future__ import annotations

from typing import Any

from . import ir


def _e(x: Any) -> str:
    if isinstance(x, ir.Const):
        return f"{x.value!r}:{x.type}"
    if isinstance(x, ir.Var):
        return x.name
    if isinstance(x, ir.Index):
        return f"{x.query}[{x.dim}]"
    if isinstance(x, ir.Cast):
        return f"{x.type}({_e(x.value)})"
    if isinstance(x, ir.UnaryOp):
        return f"({x.op} {_e(x.operand)})"
    if isinstance(x, (ir.BinOp, ir.Compare)):
        return f"({_e(x.left)} {x.op} {_e(x.right)})"
    if isinstance(x, ir.BoolOp):
        return "(" + f" {x.op} ".join(_e(v) for v in x.values) + ")"
    if isinstance(x, ir.Select):
        return f"({_e(x.if_true)} if {_e(x.cond)} else {_e(x.if_false)})"
    if isinstance(x, ir.MathCall):
        return f"{x.func}({', '.join(_e(a) for a in x.args)})"
    if isinstance(x, ir.ArrayRef):
        return x.name
    if isinstance(x, ir.Load):
        return f"{x.array.name}[{', '.join(_e(i) for i in x.indices)}]"
    if isinstance(x, ir.AtomicOp):
        return (f"atomic_{x.op}({x.array.name}[{', '.join(_e(i) for i in x.indices)}], "
                f"{', '.join(_e(o) for o in x.operands)})")
    if isinstance(x, ir.DeviceCall):
        return f"{x.function}({', '.join(_e(a) for a in x.args)})"
    if isinstance(x, ir.WarpOp):
        return f"warp_{x.op}({', '.join(_e(a) for a in x.args)})"
    if isinstance(x, ir.BlockPredicate):
        return f"sync_block_threads_{x.op}({_e(x.value)})"
    return repr(x)


def _stmts(body: list, indent: int) -> list[str]:
    out = []
    pad = "  " * indent
    for s in body:
        if isinstance(s, ir.Assign):
            out.append(f"{pad}{s.target.name} = {_e(s.value)}")
        elif isinstance(s, ir.Store):
            out.append(f"{pad}{s.array.name}[{', '.join(_e(i) for i in s.indices)}] = {_e(s.value)}")
        elif isinstance(s, ir.ExprStmt):
            out.append(f"{pad}{_e(s.value)}")
        elif isinstance(s, ir.If):
            out.append(f"{pad}if {_e(s.cond)}:")
            out += _stmts(s.body, indent + 1)
            if s.orelse:
                out.append(f"{pad}else:")
                out += _stmts(s.orelse, indent + 1)
        elif isinstance(s, ir.While):
            out.append(f"{pad}while {_e(s.cond)}:")
            out += _stmts(s.body, indent + 1)
        elif isinstance(s, ir.ForRange):
            out.append(f"{pad}for {s.var.name} in range({_e(s.start)}, {_e(s.stop)}, {_e(s.step)}):")
            out += _stmts(s.body, indent + 1)
        elif isinstance(s, ir.StridedLoop):
            loc = f", local {s.local_var.name}" if s.local_var is not None else ""
            out.append(f"{pad}{s.kind}[dim {s.dim}] {s.var.name}{loc}: start={_e(s.start)} stop={_e(s.stop)} "
                       f"stride={_e(s.stride)} chunk={_e(s.chunk)}")
            out += _stmts(s.body, indent + 1)
        elif isinstance(s, ir.Return):
            out.append(f"{pad}return" + (f" {_e(s.value)}" if s.value is not None else ""))
        elif isinstance(s, ir.MemFence):
            out.append(f"{pad}mem_fence({s.scope})")
        else:
            out.append(f"{pad}{type(s).__name__.lower()}")
    return out


def dump(node: Any, indent: int = 0) -> str:
    if isinstance(node, ir.Kernel):
        lines = [f"kernel {node.name} (ndim={node.ndim})"]
        lines += [f"  param {p.name}: {p.type} ({p.role}, arg {p.arg_index} {p.field})" for p in node.params]
        lines += [f"  shared {s.name}: {s.dtype}{list(s.shape)}" for s in node.shared]
        lines += [f"  private {s.name}: {s.dtype}{list(s.shape)}" for s in node.private]
        lines += [f"  local {n}: {t}" for n, t in node.locals.items()]
        lines += _stmts(node.body, 1)
        for f in node.functions.values():
            lines.append(dump(f, 0))
        return "\n".join(lines)
    if isinstance(node, ir.Function):
        ps = ", ".join(f"{p.name}: {p.type}" for p in node.params)
        lines = [f"function {node.name}({ps}) -> {node.return_type}"]
        lines += [f"  local {n}: {t}" for n, t in node.locals.items()]
        return "\n".join(lines + _stmts(node.body, 1))
    if isinstance(node, list):
        return "\n".join(_stmts(node, indent))
    return _e(node)
