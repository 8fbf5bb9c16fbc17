"""pk.tools' one-thread path: each host call as one kernel run by a single thread, for devices
whose blocks are one thread (cpu_serial, cpu_threads) or whose hardware is a CPU (OpenCL on a CPU).

alpaka code specialises per accelerator; here the multi-block GPU algorithms of ``pk.tools`` (a
launch per pass, atomics, per-worker histograms) are the wrong shape for one thread, so the host
calls pick these kernels on such devices: a serial scan, a counting sort, an LSD radix sort whose
byte passes are skipped where every key has the same byte. The results are those of the general
path: the same sums, the same stable order (``one_to_many`` here fills each bin in ascending index
order, an order the general path leaves unspecified).
"""

from __future__ import annotations

import numpy as np

from .compiler import device_function, kernel


@kernel
def scan_serial(acc, src, dst, n):
    """Inclusive scan of ``src[0:n]`` into ``dst`` (``dst`` may be ``src``)."""
    if acc.once_per_grid():
        s = 0
        for i in range(n):
            s += src[i]
            dst[i] = s


@kernel
def counting_sort(acc, keys, offsets, content, n, nbins):
    """``one_to_many``: count the keys, scan the counts, fill each bin backwards (ascending indices
    within a bin); ``content`` past the kept keys is -1."""
    if acc.once_per_grid():
        for b in range(nbins + 1):
            offsets[b] = 0
        for i in range(n):
            k = keys[i]
            if 0 <= k and k < nbins:
                offsets[k] += 1
        s = 0
        for b in range(nbins + 1):
            s += offsets[b]
            offsets[b] = s  # the end of bin b
        for i in range(n - 1, -1, -1):
            k = keys[i]
            if 0 <= k and k < nbins:
                w = offsets[k] - 1
                offsets[k] = w
                content[w] = i
        for i in range(offsets[nbins], n):
            content[i] = -1


@device_function
def sortable_key(bits, kind, nbits):
    """A key's ``nbits`` bits as a uint64 in the order of its value (``kind`` 0 unsigned, 1 signed,
    2 float): unsigned as they are, signed with the sign bit flipped, floats with the sign bit
    flipped (positive) or every bit flipped (negative). Both radix sorts of ``pk.tools`` use it."""
    top = np.uint64(1) << np.uint64(nbits - 1)
    every = (top << np.uint64(1)) - np.uint64(1) if nbits < 64 else ~np.uint64(0)
    u = np.uint64(bits) & every
    if kind == 1:
        u ^= top
    elif kind == 2:
        u = (u ^ every) if (u & top) != 0 else (u ^ top)
    return u


@device_function
def _byte_pass(src_keys, src_idx, dst_keys, dst_idx, hist, p, n):
    """One stable LSD pass on byte ``p``: ``hist[p * 256 + d]`` holds digit ``d``'s first slot."""
    shift = np.uint64(8 * p)
    for i in range(n):
        k = src_keys[i]
        slot = p * 256 + np.int64((np.uint64(k) >> shift) & np.uint64(255))
        pos = hist[slot]
        hist[slot] = pos + 1
        dst_keys[pos] = k
        dst_idx[pos] = src_idx[i]


@kernel
def radix_serial(acc, bits, keys_a, keys_b, idx, idx_b, hist, out, n, kind, nbits, gather):
    """Stable LSD radix sort of ``bits`` (the keys' bits; ``kind`` 0 unsigned, 1 signed, 2 float)
    into ``idx``: one pass histograms every byte of the order-preserving keys; bytes that are
    the same in every key are skipped; with ``gather`` the sorted keys go to ``out`` too."""
    if acc.once_per_grid():
        nbytes = nbits // 8
        for j in range(nbytes * 256):
            hist[j] = 0
        for i in range(n):
            u = sortable_key(bits[i], kind, nbits)
            keys_a[i] = u
            idx[i] = i
            for p in range(nbytes):
                hist[p * 256 + np.int64((u >> np.uint64(8 * p)) & np.uint64(255))] += 1
        parity = 0
        for p in range(nbytes):
            constant = False
            s = 0
            for d in range(256):
                c = hist[p * 256 + d]
                constant = constant or c == n
                hist[p * 256 + d] = s
                s += c
            if not constant:
                if parity == 0:
                    _byte_pass(keys_a, idx, keys_b, idx_b, hist, p, n)
                else:
                    _byte_pass(keys_b, idx_b, keys_a, idx, hist, p, n)
                parity = 1 - parity
        if parity == 1:
            for i in range(n):
                idx[i] = idx_b[i]
        if gather != 0:
            for i in range(n):
                out[i] = bits[idx[i]]
