"""Work divisions: how many blocks, threads per block and elements per thread a launch uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._device import Device
from ._errors import WorkDivError
from ._registry import get_backend

Extent = tuple[int, ...]


def _extent(value: Any, what: str, allow_zero: bool = False) -> Extent:
    """``value`` (an int or a 1-3 tuple/list of ints) as a tuple; WorkDivError naming ``what``
    and the offending value otherwise (floats, strings, bools, negative or zero entries)."""
    kind = "non-negative" if allow_zero else "positive"
    rule = f"{what} must be a {kind} int or a tuple of 1 to 3 {kind} ints"
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        vals: tuple = (value,)
    elif isinstance(value, (tuple, list)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        vals = tuple(value)
    else:
        raise WorkDivError(f"{rule}, got {value!r} ({type(value).__name__})")
    if not 1 <= len(vals) <= 3:
        raise WorkDivError(f"{rule}, got {value!r} ({len(vals)} entries)")
    lo = 0 if allow_zero else 1
    for v in vals:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise WorkDivError(f"{rule}, got {value!r} (an entry is {type(v).__name__})")
        if v < lo:
            raise WorkDivError(f"{rule}, got {value!r} (entries must be integers >= {lo})")
    return tuple(int(v) for v in vals)


def _prod(extent: Sequence[int]) -> int:
    return int(math.prod(extent))


@dataclass(frozen=True, init=False)
class WorkDiv:
    """``WorkDiv(blocks, threads, elements)``: grid blocks, threads per block, elements per
    thread; each an int or a tuple of 1-3 ints (all of the same dimension; ints broadcast).
    Dimension 0 is the slowest-varying, as in alpaka."""

    blocks: Extent
    threads: Extent
    elements: Extent

    def __init__(self, blocks: Any, threads: Any = 1, elements: Any = 1) -> None:
        given = {"blocks": blocks, "threads": threads, "elements": elements}
        ext = {k: _extent(v, f"WorkDiv {k}") for k, v in given.items()}
        dim = max(len(x) for x in ext.values())
        parts = []
        for name, x in ext.items():
            if len(x) != dim:
                if not isinstance(given[name], (int, np.integer)):
                    raise WorkDivError(
                        f"WorkDiv {name} {given[name]!r} has {len(x)} dimension(s), "
                        f"expected {dim}; pass a {dim}-tuple or an int"
                    )
                x = (1,) * (dim - 1) + x  # an int stands for the fastest dimension
            parts.append(x)
        object.__setattr__(self, "blocks", parts[0])
        object.__setattr__(self, "threads", parts[1])
        object.__setattr__(self, "elements", parts[2])

    @property
    def dim(self) -> int:
        return len(self.blocks)

    @property
    def grid_threads(self) -> Extent:
        return tuple(b * t for b, t in zip(self.blocks, self.threads))

    @property
    def grid_elements(self) -> Extent:
        return tuple(b * t * e for b, t, e in zip(self.blocks, self.threads, self.elements))

    def check(self, device: Device) -> None:
        """Raise WorkDivError if ``device`` cannot run this work division."""
        lim = device.limits
        n_threads = _prod(self.threads)
        if n_threads > lim.max_threads_per_block:
            hint = (
                " (CPU backends run one thread per block: put the work in blocks and elements, "
                "e.g. pk.make_workdiv(dev, blocks, elements))"
                if lim.max_threads_per_block == 1
                else ""
            )
            raise WorkDivError(
                f"{self} asks for {n_threads} threads per block; {device} allows at most "
                f"{lim.max_threads_per_block}{hint}"
            )
        for d in range(self.dim):
            ad = 3 - self.dim + d  # alpaka's limits are given for 3 dims, slowest first
            if self.threads[d] > lim.max_block_dims[ad]:
                raise WorkDivError(
                    f"{self}: threads[{d}]={self.threads[d]} exceeds {device}'s "
                    f"limit {lim.max_block_dims[ad]} for that dimension"
                )
            if self.blocks[d] > lim.max_grid_dims[ad]:
                raise WorkDivError(
                    f"{self}: blocks[{d}]={self.blocks[d]} exceeds {device}'s "
                    f"limit {lim.max_grid_dims[ad]} for that dimension"
                )
            if self.elements[d] > lim.max_elements_per_thread:
                raise WorkDivError(f"{self}: elements[{d}]={self.elements[d]} exceeds {lim.max_elements_per_thread}")

    def __str__(self) -> str:
        def fmt(x: Extent) -> str:
            return str(x[0]) if len(x) == 1 else str(x)

        return f"WorkDiv(blocks={fmt(self.blocks)}, threads={fmt(self.threads)}, elements={fmt(self.elements)})"


def make_workdiv(device: Device, blocks: Any, elements: Any) -> WorkDiv:
    """CMSSW's ``make_workdiv``: on GPUs ``(blocks, elements as threads, 1)``, on CPUs
    ``(blocks, 1, elements)``. A GPU-model device whose hardware is a CPU (OpenCL on a CPU:
    ``device.capabilities.hardware == "cpu"``) gets the CPU shape: its runtime runs a block's
    threads one after another between barriers, so one thread taking the elements is faster."""
    if device.capabilities.cpu_shaped:
        return WorkDiv(blocks, 1, elements)
    return WorkDiv(blocks, elements, 1)


def valid_workdiv(
    device: Device,
    n_elements: Any,
    elements: Any = 1,
    *,
    block_threads_must_divide: bool = False,
    kernel: Any = None,
    args: Sequence[Any] | None = None,
) -> WorkDiv:
    """alpaka's ``getValidWorkDiv`` (``subDivideGridElems``): a work division covering
    ``n_elements`` (int or 1-3 tuple) with ``elements`` per thread that ``device`` can run.

    Block threads: the largest extent the device allows, halved while over its thread limit
    (or ``kernel``'s, compiled for ``args``, when given: alpaka's ``getValidWorkDivForKernel``).
    The last block may be partial (alpyka's element loops guard the tail); with
    ``block_threads_must_divide=True`` (alpaka's default) block threads divide the grid threads
    exactly, down to one-thread blocks for a prime ``n``, for kernels that index by
    ``global_thread_idx`` without a guard.

    A ``kernel`` that synchronises its blocks (``acc.sync_block_threads``, pk.tools' block-level
    tools) on a CPU-shaped device of many threads per block (OpenCL on a CPU, whose runtime runs a
    work-group's work-items one after another between barriers) gets the block's threads as
    elements of one thread, as :func:`make_workdiv` shapes it there: the same blocks and grid
    elements. Barrier-free kernels keep many threads per block (a CPU runtime vectorises them)."""
    n = _extent(n_elements, "valid_workdiv n_elements", allow_zero=True)
    e = _extent(elements, "valid_workdiv elements")
    if len(e) == 1 and len(n) > 1:
        e = (1,) * (len(n) - 1) + e
    if len(e) != len(n):
        raise WorkDivError(f"elements {e} and n_elements {n} differ in dimension")
    lim = device.limits
    dim = len(n)
    e = tuple(max(1, min(ei, ni)) for ei, ni in zip(e, n))
    max_threads = lim.max_threads_per_block
    if kernel is not None:
        max_threads = min(max_threads, kernel_thread_limit(device, kernel, args, WorkDiv((1,) * dim, 1, e)))
    grid_threads = [max(1, -(-ni // ei)) for ni, ei in zip(n, e)]
    block = [min(lim.max_block_dims[3 - dim + d], grid_threads[d]) for d in range(dim)]
    while _prod(block) > max_threads:
        i = max(range(dim), key=lambda k: block[k])
        block[i] = -(-block[i] // 2)
    if block_threads_must_divide:
        for d in range(dim):
            while grid_threads[d] % block[d]:
                block[d] -= 1
    blocks = tuple(-(-g // b) for g, b in zip(grid_threads, block))
    if kernel is not None and _prod(block) > 1 and _one_thread_blocks(device, kernel, args, dim):
        e, block = tuple(b * ei for b, ei in zip(block, e)), [1] * dim
    wd = WorkDiv(blocks, tuple(block), e)
    wd.check(device)
    return wd


def _one_thread_blocks(device: Device, kernel: Any, args: Sequence[Any] | None, dim: int) -> bool:
    """Whether ``kernel`` runs fastest in one-thread blocks on ``device``: a CPU-shaped device
    and a kernel that meets a barrier of its block."""
    return bool(device.capabilities.cpu_shaped and kernel.synchronises_blocks(tuple(args or ()), dim))


def kernel_thread_limit(device: Device, kernel: Any, args: Sequence[Any] | None, workdiv: WorkDiv) -> int:
    """The most threads per block ``kernel`` can run with ``args`` on ``device`` for work
    divisions like ``workdiv`` (its dimension and elements): alpaka's
    ``getFunctionAttributes(...).maxThreadsPerBlock``. GPU backends compile the kernel to ask
    (registers and private memory lower it); CPU backends answer the device's limit."""
    if not hasattr(kernel, "__alpyka_kernel__"):
        raise WorkDivError(
            f"valid_workdiv kernel={getattr(kernel, '__name__', kernel)!r} is not a kernel; pass a @pk.kernel function"
        )
    if args is None or not isinstance(args, (tuple, list)):
        raise WorkDivError(
            f"valid_workdiv kernel={kernel.__name__!r} needs the launch's arguments too "
            "(args=(...), as pk.exec gets them): the kernel is compiled for their types"
        )
    return int(get_backend(device.backend_name).kernel_thread_limit(device, workdiv, kernel, tuple(args)))
