"""Kernel launches on OpenCL: build the generated OpenCL C once per (kernel, device, signature),
then each launch is argument packing, ``set_args`` and one ``enqueue_nd_range_kernel``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

from portable.spi import KernelHandle, queue_impl

from ._c_args import i64, make_packer
from ._c_build import OPENCL_FAST_MATH_PARTS, KernelBuildError, float_options, format_build_error
from ._c_dialect import WG_COLLECTIVES
from ._gpu_launch import (
    DevicePlan,
    build_source,
    is_scalar,
    prepare_launch,
    prepared_plan,
    range_check,
    same_objects,
    same_value,
)
from ._opencl_devices import build, build_log
from ._opencl_native import blocking_launch


class OpenCLPlan(DevicePlan):
    """A kernel built for one device and signature, ready to launch: its ``cl.Kernel``, whose
    arguments are set and enqueued under the plan's ``lock`` (they must not interleave). Fast
    launchers each set and enqueue a ``cl.Kernel`` of their own (:func:`launcher`)."""

    __slots__ = ("program", "kernel", "last", "setter")

    def __init__(
        self, src: Any, program: Any, knl: Any, pack: Any, max_threads: int, static_shared: int, name: str
    ) -> None:
        super().__init__(src, pack, max_threads, static_shared, name)
        self.program, self.kernel = program, knl
        self.last: list[Any] = []  # the argument values the cl.Kernel holds now
        self.setter: Any = None  # whose arguments those are (a graph's values; None: launch's)

    def set_args(self, values: list) -> None:
        """Set the kernel's arguments (see :func:`set_changed`). Caller holds ``lock``."""
        self.setter = None  # whose arguments the kernel holds: the caller's
        self.last = set_changed(self.kernel, self.last, values)


def set_changed(knl: Any, last: list, values: list) -> list:
    """Set ``knl``'s arguments to ``values`` where it holds ``last``, skipping those that hold the
    same value already (the same buffer object, an equal non-zero scalar): a repeated launch sets
    nothing. Returns what ``knl`` holds now (``last``, updated, or a new list)."""
    if len(last) != len(values):
        for i, v in enumerate(values):
            set_arg(knl, i, v)
        return list(values)
    for i, v in enumerate(values):
        held = last[i]
        if held is v or same_value(held, v):  # not == alone: -0.0 == 0.0, and their bits differ
            continue
        last[i] = _UNKNOWN  # (a Ctrl-C once set_arg set it leaves it to be set again)
        set_arg(knl, i, v)
        last[i] = v
    return last


#: what an argument :func:`set_changed` was setting holds (no value is the same as it)
_UNKNOWN = object()


#: pyopencl's setter of an argument from its bytes (what ``Kernel.set_arg`` ends in for a numpy
#: scalar after trying it as each kind of memory object, a C++ exception each: 17 us a scalar
#: against 0.2 us, pyopencl 2026.1); None where a pyopencl lacks it
_set_arg_bytes = getattr(cl.Kernel, "_set_arg_buf", None)


def set_arg(knl: Any, i: int, v: Any) -> None:
    """``knl.set_arg(i, v)``: a numpy scalar set from its bytes directly (:data:`_set_arg_bytes`),
    anything else (a buffer, local memory, None) by ``set_arg``."""
    if _set_arg_bytes is not None and isinstance(v, np.generic):
        _set_arg_bytes(knl, i, v)
    else:
        knl.set_arg(i, v)


#: what warps as sub-groups need (acc.warp_*): shuffles by lane and by offset, and ballots
SUBGROUP_EXTENSIONS = ("cl_khr_subgroup_shuffle", "cl_khr_subgroup_shuffle_relative", "cl_khr_subgroup_ballot")


#: the sub-group size every kernel requires where the device lets a kernel require one
#: (``cl_intel_required_subgroup_size``): Intel's CPU runtime otherwise picks 8, 16 or more per kernel
#: and machine, so the warp size ``DeviceCapabilities`` reports would not be what a kernel sees.
#: 16 on GPUs and on CPUs whose vectors hold 16 floats (AVX-512), :data:`NARROW_SUBGROUP_SIZE`
#: on narrower CPUs (:func:`pinned_subgroup_size`)
PINNED_SUBGROUP_SIZE = 16
#: the pinned size of kernels with warps on a CPU whose native vectors hold fewer than 16 floats
#: (AVX2: 8, the size Intel's runtime picks there itself): on a 2-core Zen 3 (AVX2) warp kernels took
#: 0.62-0.75x the CPU time of 16-lane sub-groups, kernels without warps 0.97-1.16x, GPU-shaped
#: block kernels the most (docs/backends.md), so those keep 16 (:func:`subgroup_options`)
NARROW_SUBGROUP_SIZE = 8
#: the OpenCL C words of sub-group builtins (``get_max_sub_group_size``, ``sub_group_shuffle``...):
#: a source without one (the prologue's attribute aside) cannot observe its sub-group size
_SUB_GROUP_WORD = re.compile(r"\w*sub_group\w*")


def pinned_subgroup_size(device: Any) -> int:
    """The sub-group size kernels on ``device`` require where it has
    ``cl_intel_required_subgroup_size``: :data:`NARROW_SUBGROUP_SIZE` on a CPU device whose
    ``CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT`` is below 16 (AVX2's 8; 16 lanes there are two registers
    a value), else :data:`PINNED_SUBGROUP_SIZE` (an AVX-512 CPU, a GPU, a device that does not
    answer)."""
    try:
        cpu = bool(int(device.type) & int(cl.device_type.CPU))
        width = int(device.native_vector_width_float)
    except (cl.Error, AttributeError, TypeError, ValueError):  # a runtime that does not answer
        return PINNED_SUBGROUP_SIZE
    return NARROW_SUBGROUP_SIZE if cpu and 0 < width < PINNED_SUBGROUP_SIZE else PINNED_SUBGROUP_SIZE


def _vendor_warp_size(device: Any) -> int:
    for attr in ("warp_size_nv", "wavefront_width_amd"):
        try:
            return int(getattr(device, attr))
        except Exception:  # noqa: BLE001 - the vendor attribute is absent on this device
            continue
    return 0


def _extensions(device: Any) -> set[str]:
    return set(str(getattr(device, "extensions", "")).split())


def uses_subgroups(device: Any) -> bool:
    """Whether kernels on ``device`` run their warps as the device's sub-groups (else one
    work-item): it has sub-group shuffles and ballots, and a known sub-group size (one alpyka
    requires, or the vendor's warp/wavefront width)."""
    ext = _extensions(device)
    known = "cl_intel_required_subgroup_size" in ext or _vendor_warp_size(device) > 0
    return known and all(e in ext for e in SUBGROUP_EXTENSIONS)


def subgroup_size(device: Any) -> int:
    """The warp size kernels see on ``device`` (``acc.warp_size``), which the device reports as
    ``limits.warp_size`` and ``capabilities.warp_size``: :func:`pinned_subgroup_size` where the
    kernels require it, the vendor's width where sub-groups are used without it, else 1."""
    if not uses_subgroups(device):
        return 1
    if "cl_intel_required_subgroup_size" in _extensions(device):
        return pinned_subgroup_size(device)
    return _vendor_warp_size(device)


def uses_warps(text: str) -> bool:
    """Whether an OpenCL C source calls a sub-group builtin (``acc.warp_*``, ``acc.warp_size``)."""
    return any(w != "intel_reqd_sub_group_size" for w in _SUB_GROUP_WORD.findall(text))


def subgroup_options(device: Any, warps: bool = True, warp_size: int | None = None) -> list[str]:
    """The build options of a kernel on ``device``: ``-DALPYKA_SUBGROUPS`` where warps are
    sub-groups, with ``-DALPYKA_SUBGROUP_SIZE`` where kernels require a size: a kernel with
    ``warps`` the one the device reports (:func:`subgroup_size`), or ``warp_size`` where given
    (the GPU emulator's OpenCL twins run the emulated GPU's warps: :func:`runs_warps_of`); one
    without :data:`PINNED_SUBGROUP_SIZE` (nothing in it sees the size; 16 ran GPU-shaped blocks
    faster than 8 on an AVX2 CPU too)."""
    if not uses_subgroups(device):
        return []
    if "cl_intel_required_subgroup_size" in _extensions(device):
        size = (warp_size or subgroup_size(device)) if warps else PINNED_SUBGROUP_SIZE
        return ["-DALPYKA_SUBGROUPS", f"-DALPYKA_SUBGROUP_SIZE={size}"]
    return ["-DALPYKA_SUBGROUPS"]


def runs_warps_of(device: Any, warp_size: int) -> bool:
    """Whether kernels built for ``device`` with ``warp_size`` (:func:`subgroup_options`) run
    warps of that many lanes: sub-groups whose size a kernel may require
    (``cl_intel_required_subgroup_size``: Intel's CPU runtime takes 8 to 64), or the device's own
    fixed width."""
    if not uses_subgroups(device):
        return warp_size == 1
    if "cl_intel_required_subgroup_size" in _extensions(device):
        return warp_size in (8, 16, 32, 64)
    return _vendor_warp_size(device) == warp_size


def correctly_rounded_divide_sqrt(device: Any) -> bool:
    """Whether ``device`` builds with ``-cl-fp32-correctly-rounded-divide-sqrt`` (valid only there)."""
    try:
        return bool(device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
    except (cl.Error, AttributeError):  # a runtime that does not answer: build without it
        return False


def vectorizes_reductions(device: Any) -> bool:
    """Whether ``device``'s compiler vectorizes a float reduction loop (``s = s + x[p]``) without
    fast math, adding in another order: Intel's OpenCL runtimes (their platform's vendor)."""
    try:
        return "intel" in device.platform.vendor.lower()
    except (cl.Error, AttributeError):  # a runtime that does not answer: the loops as they are
        return False


#: the OpenCL C 3.0 feature that names the work-group collective functions
COLLECTIVES_FEATURE = "__opencl_c_work_group_collective_functions"


def collectives_std(device: Any) -> str | None:
    """The ``-cl-std`` under which ``device`` compiles OpenCL C's work-group collectives
    (``work_group_scan_inclusive_add``, ``work_group_reduce_add``...), or None where it has none:
    OpenCL C 3.0 with the feature that names them, else 2.0, where every device has them (PoCL 6
    reports 3.0 without the feature: none). Asked of the device (CL_DEVICE_OPENCL_C_ALL_VERSIONS
    and _FEATURES, OpenCL 3.0; CL_DEVICE_OPENCL_C_VERSION before it)."""
    try:
        versions = {(v.version >> 22, (v.version >> 12) & 0x3FF) for v in device.opencl_c_all_versions}
        features = {f.name for f in device.opencl_c_features}
    except (cl.Error, AttributeError):  # a runtime before OpenCL 3.0: its one OpenCL C version
        words = str(getattr(device, "opencl_c_version", "")).split()
        major = words[2].split(".")[0] if len(words) > 2 else "1"
        versions, features = ({(2, 0)} if major == "2" else set()), set()
    if (3, 0) in versions and COLLECTIVES_FEATURE in features:
        return "-cl-std=CL3.0"
    if (2, 0) in versions:
        return "-cl-std=CL2.0"
    return None


def build_program(context: Any, device: Any, src: Any, warp_size: int | None = None) -> Any:
    """``cl.Program`` of a generated source; KernelBuildError with the marked source on failure.
    Built with the sub-group size its warps need where the device pins one (:func:`subgroup_options`;
    ``warp_size``: that many lanes instead of the device's own, the GPU emulator's twins);
    without fast math unless the kernel asked for it (``-cl-fast-relaxed-math``, or its parts
    where the kernel does not build with it: :func:`_build`); float32
    ``/`` and ``sqrt`` correctly rounded (numpy's bits; OpenCL allows 2.5 and 3 ulp) on devices
    that offer it; loops kept scalar (``ALPYKA_SEQUENTIAL_LOOPS``) where the compiler would
    reorder a float reduction; a source with a work-group collective path (``ALPYKA_WG_COLLECTIVES``)
    takes it under the OpenCL C that has them where the device does (:func:`collectives_std`), and
    its fallback where that build fails but the fallback's does (the device is asked no more)."""
    options = subgroup_options(device, uses_warps(src.text), warp_size)
    options += float_options("opencl", src.fast_math)
    if not src.fast_math and correctly_rounded_divide_sqrt(device):
        options.append("-cl-fp32-correctly-rounded-divide-sqrt")
    if not src.fast_math and vectorizes_reductions(device):
        options.append("-DALPYKA_SEQUENTIAL_LOOPS")
    std = None
    if WG_COLLECTIVES in src.text and device.int_ptr not in _COLLECTIVES_FAILED:
        std = collectives_std(device)  # only kernels with a collective path build under a newer OpenCL C
    if std is not None:
        try:
            return _build(context, device, src, [*options, std, f"-D{WG_COLLECTIVES}"])
        except cl.RuntimeError:
            pass  # the fallback's build says whether the kernel or the device's collectives failed
    try:
        program = _build(context, device, src, options)  # pyopencl's cache in ALPYKA_CACHE_DIR
    except cl.RuntimeError as exc:
        raise KernelBuildError(format_build_error(src, f"OpenCL ({device.name.strip()})", build_log(exc))) from None
    if std is not None:
        _COLLECTIVES_FAILED.add(device.int_ptr)
    return program


def _build(context: Any, device: Any, src: Any, options: list[str]) -> Any:
    """:func:`build` of ``options``; a fast-math build with ``-cl-fast-relaxed-math`` that fails
    is built again with its parts (``OPENCL_FAST_MATH_PARTS``), the first failure raised where
    the parts fail too (the kernel's own error). Decided per kernel: its options never depend on
    what the process built before (each such kernel pays its failed build once per process)."""
    relaxed = list(float_options("opencl", True))
    if not src.fast_math or not set(relaxed) <= set(options):
        return build(cl, context, src.text, [device], options)
    try:
        return build(cl, context, src.text, [device], options)
    except cl.RuntimeError as exc:
        parts = [o for o in options if o not in relaxed] + list(OPENCL_FAST_MATH_PARTS)
        try:
            return build(cl, context, src.text, [device], parts)
        except cl.RuntimeError:
            raise exc from None


#: the devices (``int_ptr``) whose build with work-group collectives failed where the fallback's
#: built: they build the fallback from then on
_COLLECTIVES_FAILED: set[int] = set()


def make_plan(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple, key: tuple) -> OpenCLPlan:
    """The plan of a launch key (``prepare_launch`` calls it once per key): the arguments
    checked, the IR emitted as OpenCL C and built for the queue's device."""
    dev = queue.device
    static_shared, kir, src = build_source(queue, workdiv, kernel, args, key, "opencl")
    native = dev.native
    program = build_program(native.context, native.device, src)
    knl = cl.Kernel(program, src.entry)
    max_threads = int(knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, native.device))

    def array_values(mem: Any, offset: int) -> tuple:
        return (mem, i64(offset))

    pack = make_packer(src, dev, kernel.param_names, array_values, cl.LocalMemory)
    plan = OpenCLPlan(src, program, knl, pack, max_threads, static_shared, kernel.__name__)
    plan.needs = kir.shared_needs
    return plan


def launch(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
    """Enqueue ``kernel`` over ``workdiv`` on an OpenCL queue."""
    dev = queue.device
    plan, values, dyn, (_, local, glob) = prepare_launch(queue, workdiv, kernel, args, make_plan)
    impl = queue_impl(queue)
    check = None
    with impl.lock:  # (the flag's creation too: a simulator's table of buffers, see OpenCLBackend.allocator)
        if plan.err:
            flag = cl.Buffer(
                dev.native.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.zeros(1, np.int32)
            )
            values.append(flag)
        try:  # (a Ctrl-C raised as an enqueue returns, or before the queue was told of it)
            with plan.lock:
                plan.set_args(values)
                ev = cl.enqueue_nd_range_kernel(impl.cq, plan.kernel, glob, local)
            impl.after_enqueue(ev, args)
            if plan.err:
                host = np.zeros(1, np.int32)
                copy_ev = cl.enqueue_copy(impl.cq, host, flag, is_blocking=False)
                impl.after_enqueue(copy_ev, host, flag)
                check = range_check(plan, host)
        except BaseException:
            impl.lost_command()
            raise
    if check is not None:
        impl.enqueue_host(check)


#: how many sets of scalar values a launcher keeps a time cell for (the least recently used dropped)
_CELLS_MAX = 64


def launcher(queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> Callable[[tuple], None] | None:
    """``run(args)``: :func:`launch` prepared for arguments of the types of ``args`` on ``queue``
    over ``workdiv`` (portable/_launch.py's fast path calls it after their guard): the plan,
    geometry and dynamic shared size bound once, and a ``cl.Kernel`` of its own, set and enqueued
    under the queue's lock only (every call of a launcher is on its queue: no other launch sets
    its arguments). Its arguments are set again only when an argument is not the very object of
    the last launch (then only the values that differ, scalars mostly: :func:`set_changed`), and
    the command is enqueued with ``enqueue_nd_range_kernel`` directly (on a blocking queue then
    waited for as ``WaitChoice.choose`` said before it was enqueued, told how long the last run
    with the same objects and scalar values took: a short one is waited for joined). None
    without a plan, or for a range-checked plan (ALPYKA_DEBUG: a flag buffer per launch)."""
    prepared = prepared_plan(queue, workdiv, kernel, args)
    if prepared is None:
        return None
    plan, dyn, (_, local, glob) = prepared
    impl = queue_impl(queue)
    knl = cl.Kernel(plan.program, plan.src.entry)  # (its own: the plan's is set by other launches)
    qlock, after, cq, pack, enqueue = impl.lock, impl.after_known, impl.cq, plan.pack, cl.enqueue_nd_range_kernel
    clock = time.perf_counter
    blocking, choose, wait, flush = impl.blocking, impl.waits.choose, impl.waits.wait_chosen, impl.flush_cq
    last: list = [None]  # the arguments this launcher set last
    held: list = [[]]  # the values its cl.Kernel holds
    same = same_objects(len(args))
    scalars = [i for i, a in enumerate(args) if is_scalar(a)]  # (the guard fixed the argument types)
    objects = [i for i in range(len(args)) if i not in scalars]
    cell: list = [impl.time_cell()]  # the time cell of the last arguments' work (its last blocking run's seconds)
    cells: dict = {}  # the time cells of the last arguments' objects by their scalars' values (least recent first)

    def set_fresh(args: tuple) -> None:  # (the queue's lock held)
        """Set other arguments, and take as their work's time cell (its last run's time, and its
        token in ``q.wait()``'s known mixes) the one of the last run with the same objects and
        scalar values, among the last :data:`_CELLS_MAX` sets of values; a new one for values
        not among them or other objects (a new buffer may hold other data). A Ctrl-C in here
        leaves the next launch fresh: it sets its arguments again."""
        prev, last[0] = last[0], None
        held[0] = set_changed(knl, held[0], pack(args, workdiv, dyn))
        moved = prev is None
        for i in objects:
            moved = moved or args[i] is not prev[i]
        if moved:
            cells.clear()
        key = tuple([args[i] for i in scalars])
        got = cells.pop(key, None)
        if got is None:
            got = impl.time_cell()
            if len(cells) >= _CELLS_MAX:
                del cells[next(iter(cells))]
        cells[key] = cell[0] = got
        last[0] = args

    def run(args: tuple) -> None:
        with qlock:  # (not acquire() + try: a Ctrl-C between them would leave the lock held)
            fresh = not same(args, last[0])
            if fresh:
                set_fresh(args)
            took = cell[0]
            try:  # (a Ctrl-C raised as the enqueue returns: the queue is told of a lost command)
                if not blocking:
                    ev = enqueue(cq, knl, glob, local)
                    after(None if fresh else took, ev, args)  # (q.wait() joins known work)
                    return
                how = choose(took[0])  # (before the enqueue: nothing between it and the wait)
                t0 = clock()
                ev = enqueue(cq, knl, glob, local)
                impl.last_event, previous = ev, impl.last_event  # (the previous event let go after the wait)
            except BaseException:
                impl.lost_command()
                raise
        wait(how, ev, took, flush, t0)  # a blocking queue: this command waited for (no marker), outside the lock
        del previous  # (its release, a native call, after the wait)

    if blocking and not queue.device.properties.get("simulator"):  # (its flushes run the queue: Python)
        native = blocking_launch(impl, run, set_fresh, knl, glob, local, last, cell)
        if native is not None:
            return native
    return run
