"""Captured graphs on the built-in backends (``pk.capture``, portable/_graph.py): the recorders.

Each recorder checks a launch, copy or fill once, as the backend's normal path does, and keeps
it prepared; ``finish`` gives the replay that enqueues the whole recording with no further
Python checks:

- CPU backends (:class:`HostRecorder`): the compiled plans with their packed arguments and the
  byte views of copies and fills, run in order by one queue task (inline on a blocking queue);
- OpenCL (:class:`OpenCLRecorder`): the ``cl.Kernel`` calls with their argument values and the
  native copies and fills, enqueued in order under the queue's lock;
- CUDA (:class:`CupyRecorder`): the same prepared calls captured once into a CUDA graph with
  cupy's stream capture (on a private stream), replayed by ``graph.launch(stream)``; on ROCm,
  where cupy's stream capture is not supported, the prepared calls are enqueued in order.

Work the native queue cannot hold as such (a copy of host memory that needs a host function,
a debug build's range check) is replayed through the normal path, in its place in the order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from portable.spi import KernelHandle, MemRef, queue_impl

from ._cupy_memref import MEMCPY_DEFAULT, address, pageable


def _bytes(ref: MemRef) -> np.ndarray:
    return ref.handle[ref.offset : ref.offset + ref.nbytes]


def _run_ops(ops: tuple, keep: tuple) -> None:
    """One queue task: every prepared operation, in order (``keep``: held until it ran)."""
    for op in ops:
        op()


class HostRecorder:
    """cpu_serial and cpu_threads (see the module docstring)."""

    def __init__(self, backend: Any, queue: Any) -> None:
        self.backend, self.queue = backend, queue
        self.ops: list[Callable[[], None]] = []

    def launch(self, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        from ._host_launch import compiled_plan

        be = self.backend
        plan = compiled_plan(be.name, self.queue, workdiv, kernel, args)  # the arguments checked, as on a first launch
        dyn = kernel.shared_bytes(workdiv, args) if plan.uses_dynamic_shared else 0
        nblocks, call = plan.pack(workdiv.blocks, workdiv.elements, dyn, args)  # host memory checked
        if be.parallel_blocks:
            self.ops.append(partial(be.run_blocks, plan, nblocks, call, args, math.prod(workdiv.elements)))
        else:
            self.ops.append(partial(plan.fn, 0, nblocks, *call))

    def copy(self, dst: MemRef, src: MemRef) -> None:
        self.ops.append(partial(np.copyto, _bytes(dst), _bytes(src)))

    def fill(self, dst: MemRef, value: int) -> None:
        self.ops.append(partial(_bytes(dst).fill, value))

    def finish(self, keep: tuple) -> Callable[[], None]:
        return partial(queue_impl(self.queue).enqueue_call, _run_ops, tuple(self.ops), keep)


# ----------------------------------------------------------------------------- OpenCL
def _cl_kernel(plan: Any, values: list, glob: tuple, local: tuple, cq: Any) -> Any:
    import pyopencl as cl

    with plan.lock:  # a cl.Kernel's arguments must not interleave with another launch's
        if plan.setter is not values:  # (kernels of a graph with equal arguments share ``values``)
            plan.set_args(values)
            plan.setter = values
        return cl.enqueue_nd_range_kernel(cq, plan.kernel, glob, local)


def _cl_copy(dst: Any, src: Any, kw: dict, cq: Any) -> Any:
    import pyopencl as cl

    return cl.enqueue_copy(cq, dst, src, **kw)


def _cl_fill(handle: Any, value: np.uint8, offset: int, nbytes: int, cq: Any) -> Any:
    import pyopencl as cl

    return cl.enqueue_fill_buffer(cq, handle, value, offset, nbytes)


class OpenCLRecorder:
    """OpenCL (see the module docstring). ``ops``: ``(native, fn)``: ``fn(cq)`` enqueues and
    returns its event, or (not native) ``fn()`` is the normal path."""

    def __init__(self, backend: Any, queue: Any) -> None:
        self.backend, self.queue = backend, queue
        self.ops: list[tuple[bool, Callable[..., Any]]] = []
        self._values: dict[int, list] = {}  # per plan: the argument values of its last kernel here

    def launch(self, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        from . import _opencl_launch as ocl
        from ._gpu_launch import prepare_launch, same_value

        plan, values, _dyn, (_, local, glob) = prepare_launch(self.queue, workdiv, kernel, args, ocl.make_plan)
        if plan.err:  # a debug build's range check: a flag and a host function per launch
            self.ops.append((False, partial(ocl.launch, self.queue, workdiv, kernel, args)))
        else:
            prev = self._values.get(id(plan))  # (the plan outlives the recording: its cache holds it)
            if prev is None or len(prev) != len(values) or not all(map(same_value, prev, values)):
                prev = self._values[id(plan)] = list(values)
            self.ops.append((True, partial(_cl_kernel, plan, prev, glob, local)))

    def copy(self, dst: MemRef, src: MemRef) -> None:
        if dst.device.is_host_memory and src.device.is_host_memory:
            self.ops.append((False, partial(self.backend.copy, self.queue, dst, src)))
        elif src.device.is_host_memory:
            self.ops.append(
                (True, partial(_cl_copy, dst.handle, _bytes(src), {"dst_offset": dst.offset, "is_blocking": False}))
            )
        elif dst.device.is_host_memory:
            self.ops.append(
                (True, partial(_cl_copy, _bytes(dst), src.handle, {"src_offset": src.offset, "is_blocking": False}))
            )
        else:
            self.ops.append(
                (
                    True,
                    partial(
                        _cl_copy,
                        dst.handle,
                        src.handle,
                        {"byte_count": src.nbytes, "src_offset": src.offset, "dst_offset": dst.offset},
                    ),
                )
            )

    def fill(self, dst: MemRef, value: int) -> None:
        if dst.device.is_host_memory:
            self.ops.append((False, partial(self.backend.fill, self.queue, dst, value)))
        else:
            self.ops.append((True, partial(_cl_fill, dst.handle, np.uint8(value), dst.offset, dst.nbytes)))

    def finish(self, keep: tuple) -> Callable[[], None]:
        impl, ops = queue_impl(self.queue), tuple(self.ops)
        took = impl.time_cell()  # seconds the last wait for a replay alone took (a short one is joined)

        def replay() -> None:
            cq = impl.cq
            with impl.lock:
                events = []  # a host transfer's event blocks when deleted: kept until the last completed
                try:
                    for native, op in ops:
                        events.append(op(cq) if native else op())
                    last = events[-1] if events and events[-1] is not None else impl.marker()
                    impl.after_known(took, last, events, keep)
                except BaseException:  # (a Ctrl-C: the commands enqueued so far unknown work)
                    impl.lost_command()
                    raise

        return replay


# ----------------------------------------------------------------------------- CUDA / ROCm
def _cu_kernel(fn: Any, grid: tuple, block: tuple, values: tuple, dyn: int, stream: Any) -> None:
    with stream:
        fn(grid, block, values, shared_mem=dyn)


def _cu_call(fn: Any, args: tuple, stream: Any) -> None:
    fn(*args, stream.ptr)


def _run_checks(checks: tuple) -> None:
    for check in checks:
        check()


def _cu_run(ops: tuple, stream: Any) -> None:
    for op in ops:
        op(stream)


class CupyRecorder:
    """cuda and rocm (see the module docstring). ``ops``: ``(native, fn)``: ``fn(stream)``
    enqueues on a cupy stream, or (not native) ``fn()`` is the normal path."""

    def __init__(self, backend: Any, queue: Any) -> None:
        self.backend, self.queue = backend, queue
        self.ops: list[tuple[bool, Callable[..., Any]]] = []
        self._values: dict[int, list] = {}  # per plan: the argument values of its last kernel here
        #: native runs captured into CUDA graphs (0 on ROCm: prepared calls replayed instead)
        self.graphs = 0
        #: index of a range-checked kernel's last native operation -> its host check
        self.checks: dict[int, Callable[[], None]] = {}
        self.flags: list = []  # the range checks' device flags and pinned host words

    def launch(self, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        from . import _cupy_launch as cul
        from ._gpu_launch import prepare_launch, range_check

        q, impl = self.queue, queue_impl(self.queue)
        plan, values, dyn, (grid, block, _) = prepare_launch(q, workdiv, kernel, args, cul.make_plan)
        if dyn:
            with impl.scope:
                cul.opt_in_dynamic_shared(plan, dyn)
        if not plan.err:
            self.ops.append((True, partial(_cu_kernel, plan.function, grid, block, tuple(values), dyn)))
            return
        # range checks (debug, the emulator's checks): as the normal path, the device flag zeroed
        # before the kernel and copied after it to pinned memory (graph nodes, one flag per
        # recorded launch), read by a host check that each replay enqueues after its graph
        cp = impl.cupy
        with impl.scope, impl.stream:
            flag = cp.empty(1, dtype=cp.int32)
        host = cul.pinned_int32(cp)
        fp, rt = int(flag.data.ptr), cp.cuda.runtime
        self.flags += [flag, host]
        self.ops.append((True, partial(_cu_call, rt.memsetAsync, (fp, 0, 4))))
        self.ops.append((True, partial(_cu_kernel, plan.function, grid, block, (*values, np.uint64(fp)), dyn)))
        self.ops.append((True, partial(_cu_call, rt.memcpyAsync, (int(host.ctypes.data), fp, 4, cul.D2H))))
        self.checks[len(self.ops) - 1] = range_check(plan, host)

    def copy(self, dst: MemRef, src: MemRef) -> None:
        if dst.device.is_host_memory and src.device.is_host_memory or pageable(dst) or pageable(src):
            # host functions or a staged copy: not a graph node, the normal path in its place
            self.ops.append((False, partial(self.backend.copy, self.queue, dst, src)))
            return
        memcpy = queue_impl(self.queue).cupy.cuda.runtime.memcpyAsync
        self.ops.append((True, partial(_cu_call, memcpy, (address(dst), address(src), src.nbytes, MEMCPY_DEFAULT))))

    def fill(self, dst: MemRef, value: int) -> None:
        if dst.device.is_host_memory:
            self.ops.append((False, partial(self.backend.fill, self.queue, dst, value)))
            return
        memset = queue_impl(self.queue).cupy.cuda.runtime.memsetAsync
        self.ops.append((True, partial(_cu_call, memset, (address(dst), value, dst.nbytes))))

    def _segment(self, impl: Any, natives: list) -> Callable[[], None]:
        """One run of native operations as a single replayable stream operation."""
        ops, stream = tuple(natives), impl.stream
        if impl.api == "CUDA":
            cp = impl.cupy
            with impl.scope:
                side = cp.cuda.Stream(non_blocking=True)  # private: nothing else enqueues there
                side.begin_capture()
                try:
                    _cu_run(ops, side)
                finally:
                    graph = side.end_capture()
            self.graphs += 1
            return partial(graph.launch, stream)
        return partial(_cu_run, ops, stream)

    def finish(self, keep: tuple) -> Callable[[], None]:
        impl = queue_impl(self.queue)
        keep = (*keep, *self.flags)
        # (fn submitted to the stream, the host checks after it) or (the normal path's call, ())
        steps: list[tuple[bool, Callable[[], None], tuple]] = []
        natives: list = []
        checks: list = []
        for i, (native, op) in enumerate(self.ops):
            if native:
                natives.append(op)
                if i in self.checks:
                    checks.append(self.checks[i])
                continue
            if natives:
                steps.append((True, self._segment(impl, natives), tuple(checks)))
                natives, checks = [], []
            steps.append((False, op, ()))
        if natives:
            steps.append((True, self._segment(impl, natives), tuple(checks)))
        submit = impl.submit
        if len(steps) == 1 and steps[0][0] and not steps[0][2]:
            return partial(submit, steps[0][1], keep)
        frozen = tuple(steps)

        def replay() -> None:
            for on_stream, fn, after in frozen:
                if not on_stream:
                    fn()
                    continue
                submit(fn, keep)
                if after:
                    impl.enqueue_host(partial(_run_checks, after))

        return replay


__all__ = ["CupyRecorder", "HostRecorder", "OpenCLRecorder"]
