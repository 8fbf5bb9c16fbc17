"""What the OpenCL and CUDA/HIP launchers share: plan keys, argument device checks, shared
memory checks and the IR -> C step with errors that name the kernel's file and line."""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import soa
from portable import Buffer, DeviceMismatch, WorkDivError

from ._c_emit import emit
from ._c_source import CEmitError, CSource


def launch_key(device: Any, workdiv: Any, kernel: Any, args: tuple) -> tuple:
    """The key of a launch plan in ``kernel.plans``: backend and device, dimension, signature,
    debug, and whether every thread has one element (plans specialised for that)."""
    from portable.kernel import debug_enabled

    unit = not any(e != 1 for e in workdiv.elements)
    return (device.memory_space, workdiv.dim, kernel.signature(args), debug_enabled(), unit)


def _mismatch_error() -> type:
    from portable.kernel import KernelArgumentError

    class KernelDeviceMismatch(DeviceMismatch, KernelArgumentError):
        """A kernel argument in memory the queue's device cannot use (both error kinds)."""

    return KernelDeviceMismatch


def check_devices(kernel: Any, args: tuple, device: Any) -> None:
    """DeviceMismatch (also a KernelArgumentError) for a view or buffer of memory the queue's
    device cannot use."""
    names = None
    for i, a in enumerate(args):
        if isinstance(a, (soa.View, Buffer)):
            where = a.device
            if where is not None and not device.can_access(where):
                names = names or kernel.param_names
                label = names[i] if i < len(names) else str(i)
                raise _MISMATCH(
                    f"kernel {kernel.__name__!r}: argument {label!r} lives on {where}, which a queue of {device} "
                    "cannot use; copy it there first (coll.to(dev, q) / pk.memcpy)")


_MISMATCH = _mismatch_error()


def check_shared_memory(name: str, static: int, dynamic: int, device: Any) -> None:
    """WorkDivError when a block needs more shared memory than the device can give one block
    (the opt-in limit where the device has one: CUDA's sharedMemPerBlockOptin)."""
    limit = device.properties.get("shared_memory_per_block_optin") or device.limits.shared_memory_per_block
    if static + dynamic > limit:
        raise WorkDivError(f"kernel {name!r} needs {static} bytes of shared memory plus {dynamic} dynamic per "
                           f"block; {device} has {limit}")


def emit_for(kernel: Any, key: tuple, ndim: int, dialect: str) -> tuple[Any, CSource]:
    """The IR and the C source of ``kernel`` for a plan key; emitter limits become
    KernelSyntaxError naming the kernel's file and line. With ``ALPYKA_CHECK_CUDA=1`` every
    OpenCL build also compiles the kernel's CUDA dialect to PTX through NVRTC (CI's guard)."""
    from portable.kernel import KernelSyntaxError

    kir = kernel.ir(key[2], ndim, key[3])
    try:
        src = emit(kir, dialect, unit_elements=key[4])
        if dialect == "opencl" and os.environ.get("ALPYKA_CHECK_CUDA", "") not in ("", "0"):
            # CI: every kernel the OpenCL run builds must also compile as CUDA C (NVRTC, no GPU)
            from ._c_build import CUPY_NVRTC_APPENDED, nvrtc_compile

            # with the options NVRTC gets from cupy.RawModule, so the guard compiles what runs
            nvrtc_compile(emit(kir, "cuda", unit_elements=key[4]), os.environ.get("ALPYKA_CUDA_ARCH", "compute_90"),
                          CUPY_NVRTC_APPENDED)
        return kir, src
    except CEmitError as exc:
        f, line = kir.source_file, exc.line or kir.first_line
        raise KernelSyntaxError(f"{f}:{line}: in kernel {kernel.__name__!r}: {exc} "
                                f"(not supported by the {dialect} backend)", f, line) from None


def prepare_launch(queue: Any, workdiv: Any, kernel: Any, args: tuple,
                   make_plan: Callable[..., Any]) -> tuple[Any, list, int]:
    """The checks and argument packing every device launch does first: device of each argument,
    the cached plan (built once per key by ``make_plan(queue, workdiv, kernel, args, key)``), the
    kernel's own thread limit, shared memory. Returns ``(plan, values, dynamic_shared_bytes)``."""
    dev = queue.device
    check_devices(kernel, args, dev)
    key = launch_key(dev, workdiv, kernel, args)
    plan = kernel.plans.get(key)
    if plan is None:
        with kernel.lock:
            plan = kernel.plans.get(key)
            if plan is None:
                plan = kernel.plans[key] = make_plan(queue, workdiv, kernel, args, key)
    threads = math.prod(workdiv.threads)
    if threads > plan.max_threads:
        raise WorkDivError(f"{workdiv}: kernel {plan.name!r} can run at most {plan.max_threads} threads per "
                           f"block on {dev} (its register or private memory use limits it below the "
                           f"device's {dev.limits.max_threads_per_block})")
    dyn = kernel.shared_bytes(workdiv, args) if kernel.dynamic_shared_bytes is not None else 0
    check_shared_memory(plan.name, plan.static_shared, dyn, dev)
    return plan, plan.pack(args, workdiv, dyn), dyn
