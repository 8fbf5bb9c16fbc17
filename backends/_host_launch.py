"""Kernel launches on the CPU backends: compile a kernel's IR with the numba emitter once per
(backend, dimension, signature, debug flag), then launch = pack the arguments + one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from portable._buffer import Buffer, c_strides
from portable.kernel import KernelArgumentError, debug_enabled, load_generated_module

#: tag of the generated modules: cpu_serial and cpu_threads run the same compiled code
EMITTER_TAG = "numba_cpu"


@dataclass
class HostPlan:
    """A compiled kernel ready to launch: ``fn(block_lo, block_hi, gb.., te.., dyn, *pack(args))``."""

    fn: Any
    pack: Callable[[tuple], tuple]
    memory_args: tuple[int, ...]
    uses_dynamic_shared: bool
    source_path: str


_buffer_arrays: "dict[int, tuple[Any, np.ndarray]]" = {}


def buffer_array(buf: Buffer) -> np.ndarray:
    """A numpy array onto a host Buffer (cached per buffer; it references only the raw memory)."""
    got = _buffer_arrays.get(id(buf))
    if got is not None and got[0]() is buf:
        return got[1]
    import weakref

    mem = buf.handle
    arr = np.ndarray(buf.shape, dtype=buf.dtype, buffer=mem, offset=0,
                     strides=c_strides(buf.shape, buf.dtype.itemsize))
    key = id(buf)
    _buffer_arrays[key] = (weakref.ref(buf, lambda _r, k=key: _buffer_arrays.pop(k, None)), arr)
    return arr


def _pack_source(params: list, nargs: int, kinds: list[str]) -> str:
    items = []
    for p in params:
        a = f"a{p.arg_index}"
        kind = kinds[p.arg_index]
        if p.role == "size":
            items.append(f"{a}.size")
        elif p.role == "extent":
            items.append(f"{a}.shape[{p.field}]")
        elif p.role == "pitch":
            items.append(f"{a}.{p.field}.strides[1] // {a}.{p.field}.itemsize")
        elif kind == "view":
            items.append(f"{a}.{p.field}")
        elif kind == "buffer":
            items.append(f"_buffer_array({a})")
        else:
            items.append(a)
    names = ", ".join(f"a{i}" for i in range(nargs))
    unpack = f"    {names}{',' if nargs == 1 else ''} = args\n" if nargs else ""
    body = ", ".join(items) + ("," if len(items) == 1 else "")
    return f"def pack(args):\n{unpack}    return ({body})\n"


def make_plan(backend_name: str, kernel: Any, key: tuple, ndim: int, debug: bool) -> HostPlan:
    from ._numba_emit import emit_numba

    k_ir = kernel.ir(key, ndim, debug)
    gen = emit_numba(k_ir)
    mod = load_generated_module(gen.source, EMITTER_TAG)
    kinds = [k[0] for k in key]
    ns: dict[str, Any] = {"_buffer_array": buffer_array}
    exec(_pack_source(gen.params, len(key), kinds), ns)  # noqa: S102 (generated from the signature)
    mem = tuple(i for i, k in enumerate(kinds) if k in ("view", "buffer"))
    return HostPlan(mod.launch, ns["pack"], mem, k_ir.uses_dynamic_shared, mod.__file__ or "")


def prepare_launch(backend_name: str, queue: Any, workdiv: Any, kernel: Any, args: tuple) -> tuple[HostPlan, tuple]:
    """The plan of this launch (compiled on first use) and the call's argument tuple."""
    debug = debug_enabled()
    key = kernel.signature(args)
    pkey = (backend_name, workdiv.dim, key, debug)
    plan = kernel.plans.get(pkey)
    if plan is None:
        kernel.check_args(args, queue.device)
        with kernel.lock:
            plan = kernel.plans.get(pkey)
            if plan is None:
                plan = make_plan(backend_name, kernel, key, workdiv.dim, debug)
                kernel.plans[pkey] = plan
    for i in plan.memory_args:
        dev = args[i].device
        if dev is not None and dev.memory_space != "host":
            raise KernelArgumentError(
                f"kernel {kernel.__name__!r}: argument {kernel.param_names[i]!r} lives on {dev}, which a "
                f"queue of {queue.device} cannot use; copy it to the host first")
    dyn = kernel.shared_bytes(workdiv, args) if plan.uses_dynamic_shared else 0
    head = (*workdiv.blocks, *workdiv.elements, dyn)
    return plan, head + plan.pack(args)


__all__ = ["HostPlan", "prepare_launch", "buffer_array"]
