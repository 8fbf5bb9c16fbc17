"""pk.tools' in-kernel sorts: CMSSW's block-wide ``radixSort`` and a rank sort for small ranges,
device functions every thread of a block calls together.

Both are stable and give an index permutation (``ind[first + r]`` is the local index, in
``[0, last - first)``, of the ``r``-th smallest key of ``keys[first:last]``), in the keys' value
order: integers as numbers; floats in IEEE order, ``-inf < ... < -0.0 < 0.0 < ... < inf``, NaNs by
their sign bit (after ``inf``, or before ``-inf`` when negative) as ``pk.tools.argsort`` orders
them. The result is the same on every backend and for every block size (one thread included).

The radix sort runs LSD passes of 8 bits (4 where the workspace is smaller), each thread
counting, then scattering in order, a contiguous chunk of the range: a pass is a count, a scan
of the ``radix * block_threads`` counts (digit-major, so equal digits keep their order) and a
scatter; a pass where every key has the same digit is skipped. A block of one thread (the CPU
backends') sorts up to :data:`SMALL_SORT` keys with the rank sort instead. CMSSW's own (256 threads at least,
16-bit indices) ranks equal digits of each 256-element tile with atomics instead.
"""

from __future__ import annotations

import numpy as np

from ._tools_serial import sortable_key
from .compiler import device_function

__all__ = [
    "block_radix_sort",
    "block_radix_sort_range",
    "block_rank_sort",
    "block_rank_sort_range",
    "radix_sort_workspace",
]


#: the most keys that block_radix_sort gives to block_rank_sort in a block of one thread (the same
#: permutation: both are stable): below it 8 passes' counters to clear, scan and check cost more
#: (cpu_serial, examples/sort_by_pt2.py vs its numba twin, best of 300: 48 gave 1.4x at 8, 40 and
#: 80 vertices an event; 16 gave 1.16-1.27x at 40, 96 1.15x at 80; the radix sort alone 0.69x at 8)
SMALL_SORT = 48


def radix_sort_workspace(block_threads: int, bits: int = 8) -> int:
    """The elements of the radix sort's shared ``ws`` for ``bits`` a pass (8 or 4): the digits'
    counts of every thread and one total per thread. 17 per thread is the least (4 bits a pass)."""
    return ((1 << bits) + 1) * block_threads


def _least_workspace(block_threads: int) -> int:
    return radix_sort_workspace(block_threads, 4)


@device_function
def sort_key(acc, keys, i):
    """``keys[i]`` as a uint64 in the order of its value (``pk.tools``' sortable key)."""
    if keys.dtype == np.float32:  # a test of the type: only the branch taken is compiled
        return sortable_key(acc.bit_cast(keys[i], np.uint32), 2, 32)
    elif keys.dtype == np.float64:
        return sortable_key(acc.bit_cast(keys[i], np.uint64), 2, 64)
    else:
        return sortable_key(keys[i], 1 if keys.dtype.kind == "i" else 0, keys.dtype.itemsize * 8)


@device_function
def _scan_counts(acc, ws, cells):
    """Exclusive scan of ``ws[0:cells]`` by the block: each thread its ``cells / block_threads``
    cells, the threads' totals (in ``ws[cells:cells + block_threads]``) by thread 0."""
    t = acc.thread_idx
    nt = acc.block_threads
    per = cells // nt
    s = 0
    for c in range(t * per, (t + 1) * per):
        v = ws[c]
        ws[c] = s
        s += v
    ws[cells + t] = s
    acc.sync_block_threads()
    if t == 0:
        s = 0
        for u in range(nt):
            v = ws[cells + u]
            ws[cells + u] = s
            s += v
    acc.sync_block_threads()
    base = ws[cells + t]
    for c in range(t * per, (t + 1) * per):
        ws[c] += base
    acc.sync_block_threads()


@device_function
def _one_digit(ws, radix, nt, n):
    """Whether the scanned counts say every key has the same digit (the pass would keep the order)."""
    same = False
    for d in range(radix):
        end = ws[(d + 1) * nt] if d + 1 < radix else n
        same = same or (ws[d * nt] == 0 and end == n)
    return same


@device_function(min_shared={"ws": _least_workspace})
def block_radix_sort_range(acc, keys, ind, ind2, first, last, ws):
    t = acc.thread_idx
    nt = acc.block_threads
    n = max(last - first, 0)
    by_rank = nt == 1 and n <= SMALL_SORT
    if by_rank:  # a few keys, one thread: the rank sort is faster than the passes' fixed cost
        block_rank_sort_range(acc, keys, ind, first, last)
    left = 0 if by_rank else n  # the keys the radix passes sort (none: no pass runs)
    # 8 bits a pass where ws holds radix_sort_workspace(nt, 8) and each thread has keys enough to
    # pay for 256 counters a pass (measured: 4 bits were faster below about 100 keys a thread)
    bits = 8 if len(ws) >= 257 * nt and left >= 128 * nt else 4
    radix = 1 << bits
    mask = np.uint64(radix - 1)
    cells = radix * nt
    chunk = (left + nt - 1) // nt
    lo = min(t * chunk, left)
    hi = min(lo + chunk, left)
    for i in range(lo, hi):
        ind[first + i] = i
    parity = 0  # the order so far is in ind (0) or ind2 (1)
    for p in range((keys.dtype.itemsize * 8 + bits - 1) // bits if left > 1 else 0):
        shift = np.uint64(p * bits)
        for d in range(radix):
            ws[d * nt + t] = 0
        for i in range(lo, hi):
            j = ind[first + i] if parity == 0 else ind2[first + i]
            d = np.int64((sort_key(acc, keys, first + j) >> shift) & mask)
            ws[d * nt + t] += 1
        acc.sync_block_threads()
        _scan_counts(acc, ws, cells)
        same = _one_digit(ws, radix, nt, left)
        acc.sync_block_threads()
        if not same:
            for i in range(lo, hi):
                j = ind[first + i] if parity == 0 else ind2[first + i]
                slot = np.int64((sort_key(acc, keys, first + j) >> shift) & mask) * nt + t
                pos = ws[slot]
                ws[slot] = pos + 1
                if parity == 0:
                    ind2[first + pos] = j
                else:
                    ind[first + pos] = j
            parity = 1 - parity
        acc.sync_block_threads()
    if parity == 1:
        for i in range(lo, hi):
            ind[first + i] = ind2[first + i]
    acc.sync_block_threads()


@device_function(min_shared={"ws": _least_workspace})
def block_radix_sort(acc, keys, ind, ind2, size, ws):
    block_radix_sort_range(acc, keys, ind, ind2, 0, size, ws)


@device_function
def block_rank_sort_range(acc, keys, ind, first, last):
    n = max(last - first, 0)
    for i in range(acc.thread_idx, n, acc.block_threads):
        k = sort_key(acc, keys, first + i)
        rank = 0
        for j in range(n):
            kj = sort_key(acc, keys, first + j)
            if kj < k or (kj == k and j < i):
                rank += 1
        ind[first + rank] = i
    acc.sync_block_threads()


@device_function
def block_rank_sort(acc, keys, ind, size):
    block_rank_sort_range(acc, keys, ind, 0, size)
