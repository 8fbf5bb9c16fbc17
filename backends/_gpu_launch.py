"""What the OpenCL and CUDA/HIP launchers share: plan keys, argument device checks, shared
memory checks and the IR -> C step with errors that name the kernel's file and line."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import soa
from portable import Buffer, WorkDivError
from portable.caches import IdentityCache
from portable.compiler import KernelDeviceMismatch, check_shared_needs, debug_enabled
from portable.spi import KernelHandle, PlanCache

from ._c_dialect import DIALECTS
from ._c_emit import emit
from ._c_source import CEmitError, CSource

_ONES = {1: (1,), 2: (1, 1), 3: (1, 1, 1)}
#: how many work divisions a plan remembers as checked (the least recently used forgotten first)
_FITS_MAX = 256


class DevicePlan:
    """A kernel built for one device and signature, ready to launch (the OpenCL and CUDA/HIP
    plans extend it with their native kernel). ``fits`` holds the work divisions already
    checked against it (by identity), each with the device it was checked for and its native
    geometry (see :func:`prepare_launch`)."""

    __slots__ = ("src", "pack", "max_threads", "static_shared", "name", "lock", "err", "fits", "needs")

    def __init__(self, src: CSource, pack: Any, max_threads: int, static_shared: int, name: str) -> None:
        self.src, self.pack = src, pack
        self.max_threads, self.static_shared, self.name = max_threads, static_shared, name
        self.lock = threading.Lock()
        self.err = src.needs_error_flag
        self.fits = IdentityCache(_FITS_MAX)
        #: the kernel's shared-size needs (ir.SharedNeed), checked for each work division
        self.needs: list = []


def plans_of(device: Any, kernel: KernelHandle) -> PlanCache:
    """The plans ``device``'s backend keeps for ``kernel`` (``Backend.plans``), keyed by
    :func:`launch_key`."""
    return kernel.slot(device.backend_name, PlanCache)


def launch_key(device: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> tuple:
    """The key of a launch plan in :func:`plans_of`: the device's memory, dimension, signature,
    debug, and whether every thread has one element (plans specialised for that)."""
    els = workdiv.elements
    return (device.memory_space, len(els), kernel.signature(args), debug_enabled(), els == _ONES[len(els)])


_SAME: dict[int, Callable[[tuple, Any], bool]] = {}


def same_objects(n: int) -> Callable[[tuple, Any], bool]:
    """``same(args, prev)``: True when ``prev`` is a tuple holding the very objects of ``args``, or
    for a scalar an equal one of the same type (``n`` of them; the fast launchers' test for
    arguments whose packed values they can reuse: a fresh ``np.float32(2)`` each launch packs as
    the last one did)."""
    same = _SAME.get(n)
    if same is None:
        # the identity test inline: a call to same_value only for a different object
        terms = " and ".join(f"(args[{i}] is prev[{i}] or _same(args[{i}], prev[{i}]))" for i in range(n)) or "True"
        same = _SAME[n] = eval(f"lambda args, prev: prev is not None and {terms}", {"_same": same_value})
    return same


def same_value(a: Any, b: Any) -> bool:
    """The same object, or equal non-zero scalars of one type (NaN never equals, and zeros are
    packed again: -0.0 == 0.0 but their bits differ)."""
    return a is b or (type(a) is type(b) and type(a) in _SCALAR_TYPES and a == b != 0)


#: argument types whose equal values pack to the same bytes
_SCALAR_TYPES = frozenset({int, float, bool, *(np.dtype(c).type for c in "?bhilqBHILQefd")})


def is_scalar(a: Any) -> bool:
    """Whether ``a`` is a scalar argument (:func:`same_value` compares such by value)."""
    return type(a) in _SCALAR_TYPES


def check_devices(kernel: KernelHandle, args: tuple, device: Any) -> None:
    """DeviceMismatch (also a KernelArgumentError) for a view or buffer of memory the queue's
    device cannot use."""
    names = None
    for i, a in enumerate(args):
        if isinstance(a, (soa.View, Buffer)):
            where = a.device
            if where is not None and not device.can_access(where):
                names = names or kernel.param_names
                label = names[i] if i < len(names) else str(i)
                raise KernelDeviceMismatch(
                    f"kernel {kernel.__name__!r}: argument {label!r} lives on {where}, which a queue of {device} "
                    "cannot use; copy it there first (coll.to(dev, q) / pk.memcpy)"
                )


def checked_static_shared(kir: Any, device: Any, dialect: str) -> int:
    """The bytes of the kernel's static shared arrays (``acc.shared_array``), checked before the
    device compiler sees them: WorkDivError naming the arrays, the limit and what to do when they
    exceed what one block may declare (CUDA: 48 KiB of ``__shared__``; HIP: the device's LDS per
    block, 64 KiB; OpenCL: the device's ``CL_DEVICE_LOCAL_MEM_SIZE``). A 2 GiB array is refused
    here too, instead of reaching the compiler or linker."""
    sizes = [(s.name, int(math.prod(s.shape)) * s.dtype.dtype.itemsize) for s in kir.shared]
    static = sum(n for _, n in sizes)
    limit, rule, fix = DIALECTS[dialect].static_shared_limit(device)
    if static <= limit:
        return static
    arrays = ", ".join(f"shared array {n.removeprefix('sh_')!r}: {b} bytes" for n, b in sizes)
    raise WorkDivError(
        f"kernel {kir.name!r} ({kir.source_file}:{kir.first_line}) declares {static} bytes of static "
        f"shared memory ({arrays}); {rule}: {fix}"
    )


def check_shared_memory(name: str, static: int, dynamic: int, device: Any) -> None:
    """WorkDivError when a block needs more shared memory than the device can give one block
    (the opt-in limit where the device has one: CUDA's sharedMemPerBlockOptin)."""
    limit = device.properties.get("shared_memory_per_block_optin") or device.limits.shared_memory_per_block
    if static + dynamic > limit:
        raise WorkDivError(
            f"kernel {name!r} needs {static} bytes of shared memory plus {dynamic} dynamic per "
            f"block; {device} has {limit}"
        )


def emit_for(kernel: KernelHandle, key: tuple, ndim: int, dialect: str) -> tuple[Any, CSource]:
    """The IR and the C source of ``kernel`` for a plan key (the launchers' one IR -> C step,
    where the test suite's compile checks hook in: alpyka_testing/compile_checks.py)."""
    kir = kernel.ir(key[2], ndim, key[3])
    return kir, emit_checked(kernel, kir, dialect, key[4])


def emit_checked(kernel: KernelHandle, kir: Any, dialect: str, unit_elements: bool) -> CSource:
    """``kir`` emitted in ``dialect``; emitter limits become KernelSyntaxError naming the kernel's
    file and line."""
    from portable.compiler import KernelSyntaxError

    try:
        return emit(kir, dialect, unit_elements=unit_elements)
    except CEmitError as exc:
        f, line = kir.source_file, exc.line or kir.first_line
        raise KernelSyntaxError(
            f"{f}:{line}: in kernel {kernel.__name__!r}: {exc} (not supported by the {dialect} backend)", f, line
        ) from None


def build_source(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple, key: tuple, dialect: str) -> tuple:
    """What every device plan starts with (``make_plan``): the arguments checked, the static
    shared arrays against the block's limit, the IR emitted in ``dialect`` and the device
    functions' shared-size needs checked, all before the device compiler (or CI's HIP check)
    sees the source. Returns ``(static shared bytes, IR, CSource)``."""
    dev = queue.device
    kernel.check_args(args, dev)
    static_shared = checked_static_shared(kernel.ir(key[2], workdiv.dim, key[3]), dev, dialect)
    kir, src = emit_for(kernel, key, workdiv.dim, dialect)
    check_shared_needs(kir.shared_needs, workdiv, kernel.__name__)
    return static_shared, kir, src


def prepare_launch(
    queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple, make_plan: Callable[..., Any]
) -> tuple[Any, list, int, tuple]:
    """The checks and argument packing every device launch does first: device of each argument,
    the cached plan (built once per key by ``make_plan(queue, workdiv, kernel, args, key)``), the
    kernel's own thread limit, shared memory. Returns ``(plan, values, dynamic_shared_bytes,
    geometry)``, the geometry being ``(blocks, threads, global threads)`` fastest dimension first
    (CUDA's grid and block, OpenCL's local and global size)."""
    dev = queue.device
    check_devices(kernel, args, dev)
    key = launch_key(dev, workdiv, kernel, args)
    plans = plans_of(dev, kernel)
    plan = plans.get(key)
    if plan is None:
        plan = plans.build(key, lambda: make_plan(queue, workdiv, kernel, args, key))
    if kernel.dynamic_shared_bytes is None:  # the checks depend on the work division alone: once each
        fit = plan.fits.get(workdiv)
        if fit is None or fit[0] is not dev:
            fit = plan.fits[workdiv] = (dev, fit_workdiv(plan, workdiv, 0, dev))
        return plan, plan.pack(args, workdiv, 0), 0, fit[1]
    dyn = kernel.shared_bytes(workdiv, args)
    geometry = fit_workdiv(plan, workdiv, dyn, dev)
    return plan, plan.pack(args, workdiv, dyn), dyn, geometry


def prepared_plan(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> tuple | None:
    """What every fast launcher (``launcher``) starts with: ``(plan, dynamic shared bytes,
    geometry)`` of a launch like this one, the work division checked against the plan; None
    without a plan for these arguments' types, or for a range-checked plan (ALPYKA_DEBUG: a
    flag and a host check per launch)."""
    dev = queue.device
    plan = plans_of(dev, kernel).get(launch_key(dev, workdiv, kernel, args))
    if plan is None or plan.err:
        return None
    dyn = kernel.shared_bytes(workdiv, args)
    return plan, dyn, fit_workdiv(plan, workdiv, dyn, dev)


def range_check(plan: DevicePlan, host: np.ndarray) -> Callable[[], None]:
    """The host check of a range-checked launch: raise the check's error when the device flag
    copied into ``host`` is set."""
    from portable.compiler import device_check_error

    def check() -> None:
        ident = int(host[0])
        if ident:
            raise device_check_error(plan.src.check_messages[ident - 1])

    return check


def fit_workdiv(plan: DevicePlan, workdiv: Any, dyn: int, dev: Any) -> tuple:
    """Check that ``workdiv`` (with ``dyn`` bytes of dynamic shared memory) fits ``plan`` on
    ``dev``. Returns its geometry (see :func:`prepare_launch`)."""
    threads = math.prod(workdiv.threads)
    if threads > plan.max_threads:
        raise WorkDivError(
            f"{workdiv}: kernel {plan.name!r} can run at most {plan.max_threads} threads per "
            f"block on {dev} (its register or private memory use limits it below the "
            f"device's {dev.limits.max_threads_per_block})"
        )
    check_shared_memory(plan.name, plan.static_shared, dyn, dev)
    check_shared_needs(plan.needs, workdiv, plan.name)
    blocks, local = tuple(reversed(workdiv.blocks)), tuple(reversed(workdiv.threads))
    return blocks, local, tuple(b * t for b, t in zip(blocks, local))
