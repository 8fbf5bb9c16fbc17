"""Which arguments a kernel writes: an analysis of its IR (the stream check asks it, through
:meth:`portable.compiler._kernel.Kernel.written_args`)."""

from __future__ import annotations

from typing import Any

from . import ir


def written_params(kdef: Any) -> frozenset[int]:
    """The argument indices of ``kdef`` (an ir.KernelDef) with a parameter stored to (a store or
    an atomic, also through the device functions it calls)."""

    funcs = kdef.functions
    written: dict[str, set[int]] = {name: set() for name in funcs}

    def stored(body: Any) -> set[str]:
        names = set()
        for n in ir.nodes(body):
            if isinstance(n, (ir.Store, ir.AtomicOp)):
                names.add(n.array.name)
            elif isinstance(n, ir.DeviceCall):
                idx = written.get(n.function)
                for i, a in enumerate(n.args):
                    if isinstance(a, ir.ArrayRef) and (idx is None or i in idx):
                        names.add(a.name)
        return names

    changed = True
    while changed:  # device functions calling device functions: to a fixed point
        changed = False
        for name, f in funcs.items():
            names = stored(f.body)
            idx = {i for i, p in enumerate(f.params) if isinstance(p, ir.ArrayRef) and p.name in names}
            if not idx <= written[name]:
                written[name] |= idx
                changed = True
    names = stored(kdef.body)
    return frozenset(k for k, params in enumerate(kdef.args) if any(p.name in names for p in params))


__all__ = ["written_params"]
