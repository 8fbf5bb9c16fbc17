"""Kernel launches on CUDA and ROCm: the generated C built by cupy's ``RawModule`` (NVRTC on
CUDA, hiprtc on ROCm) once per (kernel, device, signature); a launch packs the arguments and
calls the ``RawKernel`` on the queue's stream (grid and block reversed: CUDA's x is fastest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from portable.spi import KernelHandle, queue_impl

from ._c_args import make_packer
from ._c_build import CUPY_NVRTC_APPENDED, KernelBuildError, float_options, format_build_error  # noqa: F401
from ._gpu_launch import DevicePlan, build_source, prepare_launch, prepared_plan, range_check, same_objects

_DEFAULT_DYNAMIC_SHARED = 48 * 1024  # above this a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize)
D2H = 2  # cudaMemcpyDeviceToHost


class CupyPlan(DevicePlan):
    """A kernel built for one device and signature, ready to launch: its cupy ``RawKernel``."""

    __slots__ = ("function", "dyn_limit")

    def __init__(self, src: Any, function: Any, pack: Any, max_threads: int, static_shared: int, name: str) -> None:
        super().__init__(src, pack, max_threads, static_shared, name)
        self.function = function
        self.dyn_limit = _DEFAULT_DYNAMIC_SHARED


def compile_options(is_hip: bool, fast_math: bool = False) -> tuple[str, ...]:
    """The options alpyka passes to ``RawModule``: the float rules (no FMA contraction unless
    ``fast_math``: ``--fmad=false`` for NVRTC, ``-ffp-contract=off`` for hiprtc; see
    :func:`backends._c_build.float_options`). cupy appends its own: ``-ftz=true`` on CUDA
    (NVRTC), and hiprtc flushes float32 denormals too (``-fcuda-flush-denormals-to-zero``), so
    float32 subnormals are flushed to zero on both GPU backends (docs/backends.md)."""
    floats = float_options("hip" if is_hip else "cuda", fast_math)
    return floats if is_hip else ("--std=c++17", *floats)


def build_function(cupy: Any, src: Any, is_hip: bool) -> Any:
    """The ``RawKernel`` of a generated source; KernelBuildError with the marked source on failure."""
    options = compile_options(is_hip, src.fast_math)
    compiler = "hiprtc" if is_hip else "NVRTC"
    try:
        module = cupy.RawModule(code=src.text, options=options)
        fn = module.get_function(src.entry)
        fn.max_threads_per_block  # noqa: B018 - forces the (lazy) compile and load now
        return fn
    except Exception as exc:  # cupy.cuda.compiler.CompileException carries the log
        if type(exc).__name__ != "CompileException":
            raise
        log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
        raise KernelBuildError(format_build_error(src, compiler, log)) from None


def make_plan(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple, key: tuple) -> CupyPlan:
    """The plan of a launch key (``prepare_launch`` calls it once per key): the arguments
    checked, the IR emitted as CUDA or HIP C and built by cupy on the queue's device."""
    dev, impl = queue.device, queue_impl(queue)
    is_hip = dev.backend_name == "rocm"
    static_shared, kir, src = build_source(queue, workdiv, kernel, args, key, "hip" if is_hip else "cuda")
    with impl.scope:
        fn = build_function(impl.cupy, src, is_hip)
        max_threads = int(fn.max_threads_per_block)

    def array_values(mem: Any, offset: int) -> tuple:
        return (np.uint64(mem.ptr + offset),)

    pack = make_packer(src, dev, kernel.param_names, array_values)
    plan = CupyPlan(src, fn, pack, max_threads, static_shared, kernel.__name__)
    plan.needs = kir.shared_needs
    return plan


def opt_in_dynamic_shared(plan: CupyPlan, dyn: int) -> None:
    """Raise the kernel's dynamic shared memory limit when the block needs more than the default
    48 KB in all (static + dynamic): CUDA refuses such a launch unless the kernel opted in."""
    if plan.static_shared + dyn > _DEFAULT_DYNAMIC_SHARED and dyn > plan.dyn_limit:
        with plan.lock:
            if dyn > plan.dyn_limit:
                plan.function.max_dynamic_shared_size_bytes = dyn
                plan.dyn_limit = dyn


def launch(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
    """Enqueue ``kernel`` over ``workdiv`` on a CUDA/ROCm queue (its stream)."""
    plan, values, dyn, (grid, block, _) = prepare_launch(queue, workdiv, kernel, args, make_plan)
    impl = queue_impl(queue)
    cp, stream, fn = impl.cupy, impl.stream, plan.function
    if dyn:
        with impl.scope:
            opt_in_dynamic_shared(plan, dyn)
    if not plan.err:

        def run() -> None:
            with stream:
                fn(grid, block, tuple(values), shared_mem=dyn)

        impl.submit(run, args)
        return
    # debug range check: a device flag, zeroed before the kernel and copied after it into
    # pinned host memory (a pageable copy would block until complete), read by a host task
    with impl.scope, stream:
        flag = cp.empty(1, dtype=cp.int32)
    host = pinned_int32(cp)
    fp, hp, rt = int(flag.data.ptr), int(host.ctypes.data), cp.cuda.runtime
    values.append(np.uint64(fp))

    def run_checked() -> None:
        rt.memsetAsync(fp, 0, 4, stream.ptr)
        with stream:
            fn(grid, block, tuple(values), shared_mem=dyn)
        rt.memcpyAsync(hp, fp, 4, D2H, stream.ptr)

    impl.submit(run_checked, args, flag, host)
    impl.enqueue_host(range_check(plan, host))


def launcher(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> Callable[[tuple], None] | None:
    """``run(args)``: :func:`launch` prepared for arguments of the types of ``args`` on ``queue``
    over ``workdiv`` (portable/_launch.py's fast path calls it after their guard): plan, grid,
    block and dynamic shared size bound once, the packed values reused while the arguments are
    the very objects of the previous launch (buffers and views never move; the same scalar
    object has the same value), the call made by ``CupyQueue.submit_kernel``. None without a
    plan, or for a range-checked plan (ALPYKA_DEBUG: a flag and a host check per launch)."""
    prepared = prepared_plan(queue, workdiv, kernel, args)
    if prepared is None:
        return None
    plan, dyn, (grid, block, _) = prepared
    impl = queue_impl(queue)
    if dyn:
        with impl.scope:
            opt_in_dynamic_shared(plan, dyn)
    submit_kernel, fn, pack = impl.submit_kernel, plan.function, plan.pack
    last: list = [(None, None)]  # (arguments, packed values) of the previous launch, replaced whole
    same = same_objects(len(args))

    def run(args: tuple) -> None:
        prev_args, values = last[0]
        if not same(args, prev_args):
            values = tuple(pack(args, workdiv, dyn))
            last[0] = (args, values)
        submit_kernel(fn, grid, block, values, dyn, args)

    return run


def pinned_int32(cp: Any) -> np.ndarray:
    """One int32 of page-locked host memory (a range check's flag copies into it)."""
    mem = cp.cuda.alloc_pinned_memory(4)
    return np.frombuffer(mem, dtype=np.int32, count=1)
