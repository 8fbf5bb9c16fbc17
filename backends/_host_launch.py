"""Kernel launches on the CPU backends: compile a kernel's IR with the numba emitter once per
(backend, dimension, signature, debug flag), then launch = pack the arguments + one call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from portable import Buffer
from portable.compiler import (
    KernelArgumentError,
    check_shared_needs,
    compile_slot,
    debug_enabled,
    load_generated_module,
)
from portable.spi import KernelHandle, PlanCache, c_strides, signature_key

from . import _host_slices as host_slices
from ._numba_start import extensions_deferred

#: tag of the generated modules: cpu_serial and cpu_threads run the same compiled code, unless a
#: hierarchy="block" atomic is plain on cpu_serial (the source differs, so does its hash)
EMITTER_TAG = "numba_cpu"
#: the kernel slot (KernelHandle.slot) of the CPU pipeline's results, shared by both host backends
PIPELINE_SLOT = ("passes", "cpu")
#: the backends that emit from those results (:func:`make_plan`'s ``backend_name``)
HOST_BACKENDS = ("cpu_serial", "cpu_threads")


@dataclass
class HostPlan:
    """A compiled kernel ready to launch (``blocks``/``elements``: the work division's tuples,
    ``dyn``: dynamic shared bytes, ``args``: the launch's Python arguments):

    - ``invoke(blocks, elements, dyn, args)`` runs every block now, on this thread;
    - ``pack(blocks, elements, dyn, args)`` gives ``(nblocks, call)`` for running blocks
      ``[lo, hi)`` later or elsewhere as ``fn(lo, hi, *call)``.

    Both raise KernelArgumentError for a view or buffer whose memory is not host memory.
    """

    fn: Any
    invoke: Callable[[tuple, tuple, int, tuple], None]
    pack: Callable[[tuple, tuple, int, tuple], tuple[int, tuple]]
    uses_dynamic_shared: bool
    source_path: str
    #: cpu_threads: grids of at most this many elements (blocks x elements per block) were
    #: measured far below its inline threshold, so they run inline with no more ado
    inline_upto: int = 0


_buffer_arrays: dict[int, tuple[Any, np.ndarray]] = {}


def buffer_array(buf: Buffer) -> np.ndarray:
    """A numpy array onto a host Buffer (cached per buffer; it references only the raw memory)."""
    got = _buffer_arrays.get(id(buf))
    if got is not None and got[0]() is buf:
        return got[1]
    import weakref

    mem = buf.handle
    arr = np.ndarray(buf.shape, dtype=buf.dtype, buffer=mem, offset=0, strides=c_strides(buf.shape, buf.dtype.itemsize))
    key = id(buf)
    _buffer_arrays[key] = (weakref.ref(buf, lambda _r, k=key: _buffer_arrays.pop(k, None)), arr)
    return arr


def _launch_source(params: list, nargs: int, kinds: list[str], ndim: int) -> str:
    """Python source of ``invoke`` and ``pack`` (see :class:`HostPlan`) for one signature."""
    pre = []
    names = ", ".join(f"a{i}" for i in range(nargs))
    if nargs:
        pre.append(f"{names}{',' if nargs == 1 else ''} = args")
    gb = ", ".join(f"gb{d}" for d in range(ndim))
    te = ", ".join(f"te{d}" for d in range(ndim))
    pre += [f"{gb}, = blocks", f"{te}, = elements"]
    for i, kind in enumerate(kinds):
        if kind in ("view", "buffer"):
            pre += [
                f"d = a{i}.device",
                "if d is not None and d.memory_space != 'host':",
                f"    _not_host(args, {i}, d)",
            ]
    fields = {}  # view fields, read from the view's array cache (its __getattr__ is slow)
    for p in params:
        if p.role == "array" and kinds[p.arg_index] == "view":
            fields.setdefault(p.arg_index, []).append(p.field)
    for i, names_i in fields.items():
        lhs = ", ".join(f"a{i}_{f}" for f in names_i) + ","
        pre += [
            "try:",
            f"    _c = a{i}._arrays",
            f"    {lhs} = {''.join(f'_c[{f!r}], ' for f in names_i)}",
            "except KeyError:",
            f"    {lhs} = {''.join(f'a{i}.{f}, ' for f in names_i)}",
        ]
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
            items.append(f"{a}_{p.field}")
        elif kind == "buffer":
            items.append(f"_buffer_array({a})")
        else:
            items.append(a)
    nblocks = " * ".join(f"gb{d}" for d in range(ndim))
    call = f"{gb}, {te}, dyn" + "".join(f", {x}" for x in items)
    body = "".join(f"    {line}\n" for line in pre)
    # a launch of more blocks than a first slice runs in slices on the main thread (Ctrl-C lands
    # between two: backends/_host_slices.py)
    run = (
        f"    _n = {nblocks}\n    if _n > _FIRST:\n        _sliced(_fn, _n, ({call},))\n"
        f"    else:\n        _fn(0, _n, {call})\n"
    )
    return (
        f"def invoke(blocks, elements, dyn, args):\n{body}{run}\n\n"
        f"def pack(blocks, elements, dyn, args):\n{body}    return {nblocks}, ({call})\n"
    )


def _not_host_error(kernel: KernelHandle) -> Callable[[tuple, int, Any], None]:
    """The plan's error for an argument in memory the CPU cannot use (it holds the kernel's
    names, not the kernel: a plan never keeps its kernel alive)."""
    name, params = kernel.__name__, list(kernel.param_names)

    def not_host(args: tuple, i: int, dev: Any) -> None:
        raise KernelArgumentError(
            f"kernel {name!r}: argument {params[i]!r} lives on {dev}, which the "
            "CPU backends cannot use; copy it to the host first"
        )

    return not_host


def make_plan(backend_name: str, kernel: KernelHandle, key: tuple, ndim: int, debug: bool) -> HostPlan:
    from portable.compiler.passes import CPU_PIPELINE

    from ._numba_emit import emit_numba

    k_ir = kernel.ir(key, ndim, debug)
    # the CPU pipeline's passes are the same for both host backends (only the emitter's atomics
    # differ): run once per kernel and IR key, whichever of them builds first (large unrolled
    # kernels spend seconds there), kept in the kernel's slot until both emitted from it
    states, ir_key = kernel.slot(PIPELINE_SLOT, PlanCache), (key, ndim, debug)
    passed = states.build(ir_key, lambda: _Passed(CPU_PIPELINE.run(k_ir)))
    gen = emit_numba(k_ir, serial=backend_name == "cpu_serial", state=passed.state)  # its atomics may differ
    passed.emitted(backend_name, states, ir_key)
    mod = load_generated_module(gen.source, EMITTER_TAG)
    kinds = [k[0] for k in key]
    ns: dict[str, Any] = {
        "_buffer_array": buffer_array,
        "_fn": mod.launch,
        "_not_host": _not_host_error(kernel),
        "_sliced": host_slices.run_blocks,
        "_FIRST": host_slices.FIRST,
    }
    exec(_launch_source(gen.params, len(key), kinds, ndim), ns)
    return HostPlan(
        mod.launch, ns["invoke"], ns["pack"], k_ir.uses_dynamic_shared, getattr(mod, "__file__", None) or ""
    )  # none: compiled in memory


class _Passed:
    """The CPU pipeline's result (:class:`~portable.compiler.passes.CompileState`: the IR after
    the passes) for one kernel and IR key, until each of :data:`HOST_BACKENDS` emitted from it."""

    __slots__ = ("state", "waiting")

    def __init__(self, state: Any) -> None:
        self.state, self.waiting = state, set(HOST_BACKENDS)

    def emitted(self, backend_name: str, states: PlanCache, ir_key: tuple) -> None:
        """``backend_name`` emitted from it: let go of it once both did, so that a kernel that
        lives on holds no IR of the passes for nothing (a backend makes a plan once per IR key;
        one made again, by a plan cache that forgot it, runs the passes again)."""
        self.waiting.discard(backend_name)
        if not self.waiting and states.get(ir_key) is self:
            states.pop(ir_key, None)


def compiled_plan(backend_name: str, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> HostPlan:
    """The plan of a launch whose signature has none yet: check the arguments, then compile
    (or load from the disk cache) once, into the plans backend ``backend_name`` keeps for
    ``kernel`` (``{(ndim, signature key, debug): plan}``)."""
    debug = debug_enabled()
    key = signature_key(args, kernel.__name__, kernel)
    ndim = len(workdiv.blocks)
    kernel.check_args(args, queue.device)
    # CPU blocks have one thread each (every work division): once per plan is enough
    check_shared_needs(kernel.ir(key, ndim, debug).shared_needs, workdiv, kernel.__name__)
    plans = kernel.slot(backend_name, PlanCache)
    return plans.build(
        (ndim, key, debug), lambda: _loaded(make_plan(backend_name, kernel, key, ndim, debug), workdiv, kernel, args)
    )


def _loaded(plan: HostPlan, workdiv: Any, kernel: KernelHandle, args: tuple) -> HostPlan:
    """``plan`` with its numba code compiled (or loaded from numba's cache) for the types of
    ``args`` now, on this thread, by a call that runs no block; the process's first numba compile
    leaves the third-party numba extensions to the next one (backends/_numba_start.py)."""
    # anything this raises (memory that is not the host's, a typing error, a checked load of the
    # flat loop's prelude) the launch itself raises again, where and as it always did
    with contextlib.suppress(Exception):
        dyn = kernel.shared_bytes(workdiv, args) if plan.uses_dynamic_shared else 0
        _, call = plan.pack(workdiv.blocks, workdiv.elements, dyn, args)
        # the kernel's build lock before numba's compiler lock (which extensions_deferred takes):
        # waiting for another process compiling it never stops this process's other compiles
        with compile_slot(plan.fn), extensions_deferred():
            plan.fn(0, 0, *call)
    return plan


__all__ = ["HostPlan", "buffer_array", "compiled_plan"]
