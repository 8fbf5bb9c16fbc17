"""Group loops that are one element loop: a compiler pass of the CPU pipeline.

``for g in acc.uniform_groups(n)`` whose whole body is ``for i in acc.uniform_group_elements(g,
m)`` gives each thread the indices ``g*be + t*e + [0, e)`` (``be`` the block's elements,
``block_threads * thread_elements``; ``t`` the thread, ``e`` its elements) of the groups ``g =
block_idx, block_idx + grid_blocks, ...`` below ``n``'s group count ``G``, cut at ``m``: exactly the
indices, in the same order, of ``for i in acc.uniform_elements(S)`` with ``S = min(G*be, m)``.
:func:`fuse_group_loops` rewrites such a nest into that one loop, which the numba emitter runs
as one ``range`` per block of one block's groups, or as the flat grid loop
(:mod:`portable.compiler._grid_loop`), instead of an inner loop of a few trips per group (with
its run-time set-up: 3-10x a plain loop at one element a group, measured in
benchmarks/bench_loops.py). The C emitters keep the nest (a GPU's thread does one trip anyway).

The rewrite keeps what each thread computes: it applies only when

- the group loop's body is the element loop alone (no per-group work),
- the element loop has no group-local index (``for i, k in ...``) and no ``break`` of its own
  (which would end one group only),
- neither the group nor the group's base is read anywhere else in the kernel (after the loop
  included), and
- ``m`` reads no memory and nothing the element loop assigns (it is then the same for every group).
"""

from __future__ import annotations

import dataclasses

from . import ir
from ._expressions import binop, compare
from ._grid_loop import _direct_breaks, assigned_names
from ._irdump import dump
from .types import INDEX


def fuse_group_loops(kernel: ir.KernelDef) -> ir.KernelDef:
    """``kernel`` (its device functions inlined) with each fusable group/element nest (see the
    module doc) one ``uniform_elements`` loop (a new KernelDef; the same one when none is)."""
    if not any(isinstance(s, ir.StridedLoop) and s.kind == "uniform_groups" for s in ir.walk(kernel.body)):
        return kernel
    reads = _var_counts(kernel.body)
    dropped: set[str] = set()  # the group bases of the nests rewritten
    body = _rewrite(kernel.body, reads, dropped)
    if not dropped:
        return kernel
    locals_ = {k: v for k, v in kernel.locals.items() if k not in dropped}
    return dataclasses.replace(kernel, body=body, locals=locals_)


def _var_counts(body: list[ir.Stmt]) -> dict[str, int]:
    """How many times each variable name appears in ``body`` (assignments and loop heads included)."""
    counts: dict[str, int] = {}
    for y in ir.nodes(body):
        if isinstance(y, ir.Var):
            counts[y.name] = counts.get(y.name, 0) + 1
    return counts


def _rewrite(stmts: list[ir.Stmt], reads: dict[str, int], dropped: set[str]) -> list[ir.Stmt]:
    out: list[ir.Stmt] = []
    for s in stmts:
        fused = _fused(s, reads)
        if fused is not None:
            dropped.add(s.body[0].target.name)  # type: ignore[attr-defined]
            *head, s = fused
            out += head
        changes = {
            attr: _rewrite(getattr(s, attr), reads, dropped) for attr in ("body", "orelse") if getattr(s, attr, None)
        }
        out.append(dataclasses.replace(s, **changes) if changes else s)
    return out


def _same(a: ir.Expr, b: ir.Expr) -> bool:
    return dump(a) == dump(b)


def _fused(s: ir.Stmt, reads: dict[str, int]) -> list[ir.Stmt] | None:
    """The nest ``s`` as the group count in the group's variable (read nowhere else) and the one
    ``uniform_elements`` loop equal to the nest, or None when ``s`` is not such a nest."""
    if not (isinstance(s, ir.StridedLoop) and s.kind == "uniform_groups" and len(s.body) == 2):
        return None
    set_base, inner = s.body
    if not (isinstance(set_base, ir.Assign) and isinstance(inner, ir.StridedLoop)):
        return None
    if inner.kind != "uniform_group_elements" or inner.dim != s.dim or inner.local_var is not None:
        return None
    d, g, base = s.dim, s.var, set_base.target
    bt, e = ir.Index("block_threads", d), ir.Index("thread_elements", d)
    be = binop("*", bt, e)
    if not (isinstance(inner.stop, ir.MathCall) and inner.stop.func == "min" and len(inner.stop.args) == 2):
        return None
    m = inner.stop.args[1]
    shape = [
        (s.start, ir.Index("block_idx", d)),
        (s.stride, ir.Index("grid_blocks", d)),
        (s.chunk, ir.Const(1, INDEX)),
        (set_base.value, binop("*", g, be)),
        (inner.start, binop("+", base, binop("*", ir.Index("thread_idx", d), e))),
        (inner.stop.args[0], binop("+", base, be)),
        (inner.stride, be),
        (inner.chunk, e),
    ]
    if not all(_same(got, want) for got, want in shape):
        return None
    if not isinstance(inner.group_base, ir.Var) or inner.group_base.name != base.name:
        return None
    # the group only in its loop head and its base; the base in its assignment and the loop's head
    if reads.get(g.name) != 2 or reads.get(base.name) != 4 or _direct_breaks(inner.body):
        return None
    if g.type != INDEX:
        return None
    if any(isinstance(y, (ir.Load, ir.AtomicOp, ir.DeviceCall)) for y in ir.nodes(m)):
        return None
    if {y.name for y in ir.nodes(m) if isinstance(y, ir.Var)} & (assigned_names(inner.body) | {inner.var.name}):
        return None
    # min(G*be, m) without G*be's overflow: G*be >= m exactly when G > (m - 1) // be
    stop = ir.Select(compare(">", g, binop("//", binop("-", m, ir.Const(1, INDEX)), be)), m, binop("*", g, be), INDEX)
    thread = binop("+", binop("*", ir.Index("block_idx", d), bt), ir.Index("thread_idx", d))
    stride = binop("*", binop("*", ir.Index("grid_blocks", d), bt), e)
    loop = ir.StridedLoop(
        "uniform_elements", inner.var, d, binop("*", thread, e), stop, stride, e, inner.body, line=inner.line
    )
    return [ir.Assign(g, s.stop, s.line), loop]


__all__ = ["fuse_group_loops"]
