"""The CPU backends' prepared launches: portable/_launch.py's fast path for a kernel, work
division and argument types that launched through ``HostBackend.launch`` before."""

from __future__ import annotations

import math
from typing import Any

from portable.compiler import debug_enabled
from portable.spi import KernelHandle, PlanCache, queue_impl, signature_key


def host_launcher(backend: Any, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> Any:
    """``run(args)``: the launch of ``kernel`` over ``workdiv`` on ``queue`` that
    ``HostBackend.launch`` does for arguments of the types of ``args``, with the compiled plan,
    the queue's lock or task and the work division's tuples bound once (portable/_launch.py's
    fast path calls it after the guard of those types). None when no plan was compiled yet."""
    key = (len(workdiv.blocks), signature_key(args, kernel.__name__, kernel), debug_enabled())
    plan = kernel.slot(backend.name, PlanCache).get(key)
    if plan is None:
        return None
    dyn = kernel.shared_bytes(workdiv, args) if plan.uses_dynamic_shared else 0
    impl = queue_impl(queue)
    blocks, elements = workdiv.blocks, workdiv.elements
    if impl.blocking:
        lock = impl.lock
        if backend.parallel_blocks:
            launch_blocks = backend.launch_blocks

            def run_spread(args: tuple) -> None:
                lock.acquire()
                try:
                    launch_blocks(plan, workdiv, dyn, args)
                finally:
                    lock.release()

            return run_spread
        invoke = plan.invoke

        def run_here(args: tuple) -> None:
            lock.acquire()
            try:
                invoke(blocks, elements, dyn, args)
            finally:
                lock.release()

        return run_here
    pack, enqueue_call, run_blocks = plan.pack, impl.enqueue_call, backend.run_blocks
    units = elements[0] if len(elements) == 1 else math.prod(elements)

    def run_queued(args: tuple) -> None:
        nblocks, call = pack(blocks, elements, dyn, args)
        enqueue_call(run_blocks, plan, nblocks, call, args, units)

    return run_queued
