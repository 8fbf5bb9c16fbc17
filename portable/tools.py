"""CMSSW's alpakatools for alpyka: building blocks for kernels and the host calls that use them.

In kernels (``@pk.device_function``s; every thread of the block must call the ones that
synchronise):

- ``block_prefix_scan(acc, src, dst, size, ws)``: inclusive scan of ``src[0:size]`` into ``dst``
  (``dst`` may be ``src``) by the block's threads; ``ws`` is a shared workspace of at least
  ``acc.block_threads`` elements (a smaller shared array is a WorkDivError at launch, naming it).
  ``block_prefix_scan_range(acc, src, dst, first, last, ws)`` scans ``[first, last)``. CMSSW's
  ``blockPrefixScan``.
- ``block_sum(acc, value, ws)``: the sum of ``value`` over the block, returned to every thread:
  warp shuffles, then the warps' sums through ``ws`` (at least one element per warp).
- ``assoc_count(acc, offsets, key)`` and ``assoc_fill(acc, offsets, content, key, value)``: the two
  steps of a one-to-many association (CMSSW's ``OneToManyAssoc`` / ``HistoContainer``): count
  every key, scan ``offsets`` (``nbins + 1`` entries) inclusively, fill every ``(key, value)``;
  afterwards ``content[offsets[b]:offsets[b + 1]]`` holds the values of key ``b``.
- ``block_radix_sort(acc, keys, ind, ind2, size, ws)`` (CMSSW's ``radixSort``) and
  ``block_radix_sort_range(acc, keys, ind, ind2, first, last, ws)``: the stable order of
  ``keys[0:size]`` (of ``keys[first:last]``) into ``ind`` (local indices), ``ind2`` a workspace of
  the same extent, ``ws`` a shared workspace of at least ``radix_sort_workspace(block_threads, 4)``
  elements (8 bits a pass with ``radix_sort_workspace(block_threads)`` and 128 keys a thread or
  more); ``block_rank_sort(acc,
  keys, ind, size)`` and ``block_rank_sort_range`` sort small ranges with no workspace
  (portable/_block_sort.py).
- ``for_each_in_bins(acc, hist, value, n, fn, *args)``: CMSSW's ``forEachInBins``: with ``hist``
  the tuple ``(offsets, content)`` of such an association, ``fn(acc, j, *args)`` for every entry
  ``j`` of the bins ``value - n`` to ``value + n`` (``value`` a bin, the window clamped to the
  histogram's bins), in content order.

On the host (enqueued on a queue, asynchronous like every launch):

- ``prefix_scan(queue, src, dst)``: inclusive scan of any length (CMSSW's ``multiBlockPrefixScan``:
  each block scans a segment, the segments' totals are scanned, then added).
- ``one_to_many(queue, keys, nbins, out=None) -> (offsets, content)``: ``content[offsets[b]:offsets[b+1]]``
  are the indices ``i`` with ``keys[i] == b``; keys outside ``[0, nbins)`` are left out. Within a
  bin the order is ascending on one-thread devices, unspecified on the others.
- ``argsort(queue, keys, out=None)`` (stable, int32 indices) and ``radix_sort(queue, keys, out=None)``:
  an LSD radix sort, 8 bits per pass, of integer and float keys (floats by their IEEE order: -inf
  < ... < -0.0 < 0.0 < ... < inf; NaNs by their sign bit, after inf or before -inf).

``out=`` takes the result Buffers. Where a block is one thread or the hardware a CPU, each call is
one launch of a one-thread kernel (portable/_tools_serial.py); elsewhere the multi-block
algorithms below run. Workspaces stay with their queue (:func:`_take`): after a first call, a
call allocates only its outputs.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from . import _tools_serial as _serial
from ._block_sort import (
    block_radix_sort,
    block_radix_sort_range,
    block_rank_sort,
    block_rank_sort_range,
    radix_sort_workspace,
)
from ._buffer import Buffer, reinterpret
from ._errors import ArgumentError, ArgumentTypeError
from ._memory import memset
from ._queue import Queue, exec
from ._tools_serial import sortable_key
from ._workdiv import WorkDiv
from .compiler import device_function, kernel
from .compiler._signature import check_byte_order

__all__ = [
    "argsort",
    "assoc_count",
    "assoc_fill",
    "block_prefix_scan",
    "block_prefix_scan_range",
    "block_radix_sort",
    "block_radix_sort_range",
    "block_rank_sort",
    "block_rank_sort_range",
    "block_sum",
    "for_each_in_bins",
    "one_to_many",
    "prefix_scan",
    "radix_sort",
    "radix_sort_workspace",
]


# ----------------------------------------------------------------------------- in kernels
def _one_per_thread(block_threads: int) -> int:
    """``ws`` of the block scans: one element per thread of the block (checked at launch)."""
    return block_threads


@device_function(min_shared={"ws": _one_per_thread})
def block_prefix_scan_range(acc, src, dst, first, last, ws):
    """Inclusive scan of ``src[first:last]`` into ``dst[first:last]``: each thread scans a chunk,
    the chunks' totals are scanned in ``ws`` (the work-group's ``work_group_scan_inclusive_add``
    where the OpenCL device has it and the values are integers, else Hillis-Steele), then each
    chunk adds its base."""
    t = acc.thread_idx
    nt = acc.block_threads
    size = max(last - first, 0)
    chunk = (size + nt - 1) // nt
    lo = first + min(t * chunk, size)
    hi = min(lo + chunk, last)
    s = 0
    for i in range(lo, hi):
        s += src[i]
        dst[i] = s
    if acc.block_collectives:  # every thread of the block is here: the work-group's own scan
        ws[t] = acc.block_scan_add(s)
        acc.sync_block_threads()
    else:
        ws[t] = s
        acc.sync_block_threads()
        off = 1
        while off < nt:
            v = ws[t - off] if t >= off else 0
            acc.sync_block_threads()
            ws[t] += v
            acc.sync_block_threads()
            off *= 2
    if t > 0:
        base = ws[t - 1]
        for i in range(lo, hi):
            dst[i] += base
    acc.sync_block_threads()


@device_function(min_shared={"ws": _one_per_thread})
def block_prefix_scan(acc, src, dst, size, ws):
    block_prefix_scan_range(acc, src, dst, 0, size, ws)


@device_function
def block_sum(acc, value, ws):
    if acc.block_collectives:  # every thread of the block is here: the work-group's own sum
        total = acc.block_reduce_add(value)
        acc.sync_block_threads()
    else:
        w = acc.warp_size
        t = acc.thread_idx
        lane = t % w
        lanes = min(w, acc.block_threads - (t - lane))  # the block's last warp may be partial
        v = value
        off = w // 2
        while off > 0:
            # a lane reads only lanes the warp has (a partial warp's absent lanes are undefined on a GPU)
            other = acc.warp_shfl(v, lane + off if lane + off < lanes else lane)
            if lane + off < lanes:
                v += other
            off //= 2
        if lane == 0:
            ws[t // w] = v
        acc.sync_block_threads()
        total = ws[0]
        for k in range(1, (acc.block_threads + w - 1) // w):
            total += ws[k]
        acc.sync_block_threads()
    return total


@device_function
def assoc_count(acc, offsets, key):
    acc.atomic_add(offsets, key, 1)


@device_function
def assoc_fill(acc, offsets, content, key, value):
    w = acc.atomic_sub(offsets, key, 1)
    content[w - 1] = value


@device_function
def for_each_in_bins(acc, hist, value, n, fn, *args):
    offsets, content = hist
    last = offsets.shape[0] - 2  # the last bin: offsets has one entry more than there are bins
    b = int(value)
    first_bin = max(b - n, 0)
    last_bin = min(b + n, last)
    if first_bin <= last_bin:
        for k in range(offsets[first_bin], offsets[last_bin + 1]):
            fn(acc, content[k], *args)


# ----------------------------------------------------------------------------- kernels of the host calls
@device_function
def _scan_segments(acc, src, dst, partial, n, seg, ws):
    """Each block scans its segments of ``seg`` elements and stores each segment's total."""
    for b in acc.independent_groups((n + seg - 1) // seg):
        last = min((b + 1) * seg, n)
        block_prefix_scan_range(acc, src, dst, b * seg, last, ws)
        if acc.thread_idx == 0:
            partial[b] = dst[last - 1]


# a shared array's type is a constant of its kernel: one kernel per workspace type
@kernel
def _scan_segments_int(acc, src, dst, partial, n, seg):
    ws = acc.shared_array(1024, np.int64)
    _scan_segments(acc, src, dst, partial, n, seg, ws)


@kernel
def _scan_segments_float(acc, src, dst, partial, n, seg):
    ws = acc.shared_array(1024, np.float64)
    _scan_segments(acc, src, dst, partial, n, seg, ws)


@kernel
def _add_segment_bases(acc, dst, partial, n, seg):
    for i in acc.uniform_elements(seg, n):
        dst[i] += partial[i // seg - 1]


@kernel
def _count_keys(acc, keys, offsets, n, nbins):
    for i in acc.uniform_elements(n):
        k = keys[i]
        if 0 <= k and k < nbins:
            assoc_count(acc, offsets, k)


@kernel
def _fill_keys(acc, keys, offsets, content, n, nbins):
    for i in acc.uniform_elements(n):
        k = keys[i]
        if 0 <= k and k < nbins:
            assoc_fill(acc, offsets, content, k, i)


@kernel
def _sortable(acc, bits, out, idx, n, kind, nbits):
    """Keys as uint64 in the order of their values (``_tools_serial.sortable_key``)."""
    for i in acc.uniform_elements(n):
        out[i] = sortable_key(bits[i], kind, nbits)
        idx[i] = i


@kernel
def _digit_counts(acc, keys, hist, n, workers, chunk, shift):
    for w in acc.uniform_elements(workers):
        for d in range(256):
            hist[d * workers + w] = 0
        for i in range(w * chunk, min((w + 1) * chunk, n)):
            d = np.int64((keys[i] >> np.uint64(shift)) & np.uint64(255))
            hist[d * workers + w] += 1


@kernel
def _scatter_digits(acc, keys, idx, hist, out_keys, out_idx, n, workers, chunk, shift):
    """Each worker walks its chunk backwards into the slots below its (inclusive) scan: stable."""
    for w in acc.uniform_elements(workers):
        for i in range(min((w + 1) * chunk, n) - 1, w * chunk - 1, -1):
            k = keys[i]
            slot = np.int64((k >> np.uint64(shift)) & np.uint64(255)) * workers + w
            pos = hist[slot] - 1
            hist[slot] = pos
            out_keys[pos] = k
            out_idx[pos] = idx[i]


@kernel
def _gather(acc, src, idx, out, n):
    for i in acc.uniform_elements(n):
        out[i] = src[idx[i]]


# ----------------------------------------------------------------------------- host calls
def _check_1d(queue: Any, *arrays: tuple[Any, str]) -> int:
    if not isinstance(queue, Queue):
        raise ArgumentTypeError(f"pk.tools needs a pk.Queue first, got {type(queue).__name__}")
    n = None
    for arr, what in arrays:
        shape = getattr(arr, "shape", None)
        if shape is None or len(shape) != 1:
            raise ArgumentError(
                f"{what} must be a 1-dimensional pk.Buffer (or a numpy array on a CPU backend), "
                f"got {type(arr).__name__} of shape {shape}"
            )
        dt = arr.dtype
        if dt not in _CHECKED_DTYPES:
            if np.dtype(dt).kind not in "uif":
                raise ArgumentTypeError(f"{what} must hold integers or floats, got {dt}")
            check_byte_order(dt, f"pk.tools: {what}")
        if n is not None and shape[0] != n:
            raise ArgumentError(f"{what} has {shape[0]} elements, the other array {n}")
        n = shape[0]
    assert n is not None
    if n >= 2**31:
        raise ArgumentError(f"pk.tools works on fewer than 2**31 elements, got {n}")
    return n


#: the native-order integer and float dtypes (those _check_1d passes without a closer look)
_CHECKED_DTYPES = frozenset(np.dtype(t) for t in "bBhHiIlLqQefd")

#: per queue: the workspace Buffers of its calls by (what, dtype, size class), reused by the next
#: call on that queue (queue order makes that safe) with no allocation. A call takes them out
#: while it enqueues and puts them back after, so calls from two host threads on one queue never
#: share one.
_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: workspaces up to this size stay with their queue; larger ones go back to the caching
#: allocator after each call (their work dwarfs an allocation's cost)
WORKSPACE_KEEP_BYTES = 1 << 22


def _size_class(n: int) -> int:
    """Workspaces come in powers of two (256 elements at least): a call reuses those of any
    earlier call of the same size class."""
    return 1 << max(8, (n - 1).bit_length())


def _take(queue: Queue, key: tuple, *parts: tuple[int, Any]) -> tuple[Buffer, ...]:
    """Workspaces ``(elements, dtype)`` for one call: the queue's own set for ``key``, else new."""
    per = _WORKSPACES.get(queue)
    ws = per.pop(key, None) if per is not None else None
    if ws is None:
        ws = tuple(Buffer(queue.device, m, dt) for m, dt in parts)
    return ws


def _give(queue: Queue, key: tuple, ws: tuple[Buffer, ...]) -> None:
    """Put a call's workspaces back with ``queue`` for its next call (if they are small)."""
    if sum(b.nbytes for b in ws) <= WORKSPACE_KEEP_BYTES:
        per = _WORKSPACES.get(queue)
        if per is None:
            per = _WORKSPACES.setdefault(queue, {})
        per[key] = ws


def _one_thread(device: Any) -> bool:
    """Whether ``device`` runs pk.tools' one-thread kernels (portable/_tools_serial.py): its
    blocks are one thread (the CPU backends) or its hardware is a CPU (OpenCL on a CPU)."""
    return device.capabilities.cpu_shaped


#: the work division of the one-thread kernels
_ONE = WorkDiv(1, 1, 1)


def _threads(queue: Queue, wanted: int) -> int:
    dev = queue.device
    return 1 if dev.kind == "cpu" else max(1, min(wanted, dev.limits.max_threads_per_block, 1024))


def _linear(queue: Queue, n: int, per_thread: int = 1) -> WorkDiv:
    """A 1D work division covering ``n`` elements: GPU-style 256-thread blocks, or CPU chunks."""
    t = _threads(queue, 256)
    if t == 1:
        e = max(1, min(-(-n // 64), 1 << 16))
        return WorkDiv(max(1, -(-n // e)), 1, e)
    return WorkDiv(max(1, min(-(-n // (t * per_thread)), 65535)), t, 1)


def prefix_scan(queue: Queue, src: Any, dst: Any) -> None:
    """Enqueue the inclusive scan of ``src`` into ``dst`` (same length; ``dst`` may be ``src``;
    ``dst`` may be wider, int32 sums into int64 or float64; float values into integers are refused:
    :func:`_check_scan_dtypes`)."""
    n = _check_1d(queue, (src, "src"), (dst, "dst"))
    _check_scan_dtypes(src.dtype, dst.dtype)
    if n == 0:
        return
    if _one_thread(queue.device):
        exec(queue, _ONE, _serial.scan_serial, src, dst, n)
    else:
        _scan_blocks(queue, src, dst, n)


def _check_scan_dtypes(src: Any, dst: Any) -> None:
    """ArgumentTypeError for float values scanned into an integer ``dst``: each backend truncated
    its own partial sums (a float32 scan into int32 gave 4,992,688 on the CPU backends and 4,986,388
    on CUDA where numpy's ``np.cumsum(x, dtype=np.int32)`` gives 4,942,690), so no answer is right."""
    if np.dtype(src).kind == "f" and np.dtype(dst).kind != "f":
        raise ArgumentTypeError(
            f"prefix_scan: src holds {np.dtype(src)} and dst {np.dtype(dst)}: a scan of floats into integers "
            "truncates partial sums, differently on each backend; give dst a float dtype, or convert src to "
            "integers first (as np.cumsum(x, dtype=int) does)"
        )


def _scan_blocks(queue: Queue, src: Any, dst: Any, n: int, level: int = 0) -> None:
    """The multi-block scan of ``src[0:n]`` (CMSSW's ``multiBlockPrefixScan``): one launch when
    one block scans it all, else the segments, their totals (recursively), the bases added."""
    threads = _threads(queue, 256)
    seg = threads * 8 if threads > 1 else 1 << 14
    blocks = -(-n // seg)
    key = ("partial", level, np.dtype(dst.dtype).char, _size_class(blocks))
    ws = _take(queue, key, (key[3], dst.dtype))
    partial = ws[0]
    scan = _scan_segments_float if np.dtype(dst.dtype).kind == "f" else _scan_segments_int
    exec(queue, WorkDiv(min(blocks, 65535), threads, 1), scan, src, dst, partial, n, seg)
    if blocks > 1:
        _scan_blocks(queue, partial, partial, blocks, level + 1)
        exec(queue, _linear(queue, n - seg), _add_segment_bases, dst, partial, n, seg)
    _give(queue, key, ws)


def one_to_many(queue: Queue, keys: Any, nbins: int, out: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
    """Enqueue the association of each bin ``b`` in ``[0, nbins)`` with the indices of its keys:
    ``(offsets, content)``, int32 Buffers of ``nbins + 1`` and ``len(keys)`` elements (new ones,
    or ``out``'s: per event, reusing them saves the allocations)."""
    n = _check_1d(queue, (keys, "keys"))
    if np.dtype(keys.dtype).kind == "f":
        raise ArgumentTypeError(f"keys must be integers (bin numbers), got {keys.dtype}")
    if not isinstance(nbins, (int, np.integer)) or isinstance(nbins, bool) or not 0 < nbins < 2**31 - 1:
        raise ArgumentError(f"nbins must be a positive int below 2**31 - 1, got {nbins!r}")
    dev = queue.device
    nbins = int(nbins)
    if out is None:
        offsets, content = Buffer(dev, nbins + 1, np.int32), Buffer(dev, n, np.int32)
    else:
        offsets, content = (
            _out(out[0], nbins + 1, np.int32, "out[0] (offsets)"),
            _out(out[1], n, np.int32, "out[1] (content)"),
        )
    if _one_thread(dev):
        exec(queue, _ONE, _serial.counting_sort, keys, offsets, content, n, nbins)
        return offsets, content
    memset(queue, offsets, 0)
    memset(queue, content, 0xFF)  # -1 past offsets[nbins] when keys were left out
    if n:
        exec(queue, _linear(queue, n), _count_keys, keys, offsets, n, nbins)
        _scan_blocks(queue, offsets, offsets, nbins + 1)
        exec(queue, _linear(queue, n), _fill_keys, keys, offsets, content, n, nbins)
    return offsets, content


def _out(arr: Any, n: int, dtype: Any, what: str) -> Any:
    """``arr`` if it can take a result of ``n`` elements of ``dtype``."""
    shape = getattr(arr, "shape", None)
    if shape != (n,) or getattr(arr, "dtype", None) != np.dtype(dtype):
        raise ArgumentError(
            f"pk.tools: {what} must be a 1-dimensional {np.dtype(dtype)} pk.Buffer of {n} elements, "
            f"got {type(arr).__name__} of shape {shape} and dtype {getattr(arr, 'dtype', None)}"
        )
    return arr


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def argsort(queue: Queue, keys: Any, out: Any = None) -> Any:
    """Enqueue a stable sort of ``keys``' indices by key: a new int32 Buffer, or ``out``."""
    n = _check_1d(queue, (keys, "keys"))
    idx = Buffer(queue.device, n, np.int32) if out is None else _out(out, n, np.int32, "out")
    if n:
        _sort(queue, keys, n, idx, None)
    return idx


def radix_sort(queue: Queue, keys: Any, out: Any = None) -> Any:
    """Enqueue sorting ``keys`` (integers or floats): a new Buffer of the sorted values, or ``out``."""
    n = _check_1d(queue, (keys, "keys"))
    out = Buffer(queue.device, n, keys.dtype) if out is None else _out(out, n, keys.dtype, "out")
    if n:
        key = ("order", _size_class(n))
        ws = _take(queue, key, (key[1], np.int32))
        _sort(queue, keys, n, ws[0], out)
        _give(queue, key, ws)
    return out


def _workers(n: int, threads: int) -> int:
    """How many chunks the general radix sort cuts ``n`` keys into (each with its histogram)."""
    return max(1, min(-(-n // 256), 4096)) if threads > 1 else max(1, min(-(-n // 65536), 64))


def _sort(queue: Queue, keys: Any, n: int, idx: Any, out: Any) -> None:
    """Enqueue the stable order of ``keys[0:n]`` into ``idx`` (and, with ``out``, the sorted keys).
    The keys are sorted as 32-bit words when they fit, else 64-bit."""
    dt = np.dtype(keys.dtype)
    kind = {"u": 0, "i": 1, "f": 2}[dt.kind]
    word = _UNSIGNED[dt.itemsize]
    bits = reinterpret(keys, word) if kind == 2 else keys
    key_t = np.uint32 if dt.itemsize <= 4 else np.uint64
    size = _size_class(n)
    if _one_thread(queue.device):
        key = ("radix", dt.itemsize, size)
        ws = _take(queue, key, (size, key_t), (size, key_t), (size, np.int32), (256 * dt.itemsize, np.int32), (1, word))
        exec(
            queue,
            _ONE,
            _serial.radix_serial,
            bits,
            ws[0],
            ws[1],
            idx,
            ws[2],
            ws[3],
            ws[4] if out is None else reinterpret(out, word),
            n,
            kind,
            dt.itemsize * 8,
            int(out is not None),
        )
        _give(queue, key, ws)
        return
    threads = _threads(queue, 256)
    workers = _workers(n, threads)
    chunk = -(-n // workers)
    key = ("radix_blocks", dt.itemsize, size)
    ws = _take(queue, key, (size, key_t), (size, key_t), (size, np.int32), (256 * _workers(size, threads), np.int32))
    cur, other, idx_b, hist = ws
    first, second = (idx, idx_b) if dt.itemsize % 2 == 0 else (idx_b, idx)  # the last pass ends in idx
    exec(queue, _linear(queue, n), _sortable, bits, cur, first, n, kind, dt.itemsize * 8)
    wd = WorkDiv(-(-workers // threads), threads, 1)
    for p in range(dt.itemsize):
        exec(queue, wd, _digit_counts, cur, hist, n, workers, chunk, 8 * p)
        _scan_blocks(queue, hist, hist, 256 * workers)
        exec(queue, wd, _scatter_digits, cur, first, hist, other, second, n, workers, chunk, 8 * p)
        cur, other, first, second = other, cur, second, first
    if out is not None:
        exec(queue, _linear(queue, n), _gather, keys, idx, out, n)
    _give(queue, key, ws)
