"""Warp operations right after divergent loops: a kernel, its host model and
the comparison, shared by tests/kernels/test_warps_divergent.py (every backend, the cuda/rocm
stand-in included) and benchmarks/gpu_check.py (a real GPU, block sizes up to 1024).

Each thread runs a grid-stride loop whose trip count differs between lanes, with a data-dependent
inner loop, so the lanes of a warp leave it at different times; then it votes (ballot, all, any,
a broadcast shuffle), runs a second uneven loop and calls ``pk.tools.block_sum``. Only answers
the language defines are compared: every lane of the warp reaches each operation, and no shuffle
reads a lane the launch did not create.
"""

from __future__ import annotations

import numpy as np

import portable as pk
from alpyka_testing.kernels import download, upload

#: the columns ``divergent_warps`` writes per thread
COLUMNS = ("s", "ballot", "all", "any", "shfl_lane0", "block_sum")


@pk.kernel
def divergent_warps(acc, out, data, n):
    """``out[g, :]`` per global thread ``g`` (see the module docstring and :data:`COLUMNS`)."""
    ws = acc.shared_array(1024, np.int64)  # block_sum's one element per warp (warps of 1 on CPUs)
    t = acc.thread_idx
    nt = acc.block_threads
    g = acc.block_idx * nt + t
    s = np.int64(0)
    for i in range(g, n, acc.grid_blocks * nt):
        k = data[i] % 5
        while k > 0:  # 0-4 extra rounds per element
            s += k
            k -= 1
        s += data[i]
    out[g, 1] = np.int64(acc.warp_ballot(s % 3 == 0))
    out[g, 2] = 1 if acc.warp_all(s % 2 == 0) else 0
    out[g, 3] = 1 if acc.warp_any(s % 7 == 0) else 0
    out[g, 4] = acc.warp_shfl(s, 0)
    for i in range(g, n, acc.grid_blocks * nt // 2 + 1):  # a second loop, other trip counts
        if data[i] % 4 == 1:
            s += 1
    out[g, 0] = s
    out[g, 5] = pk.tools.block_sum(acc, s, ws)


def _signed(mask: int) -> int:
    """A uint64 mask as the int64 the kernel stores."""
    return mask - (1 << 64) if mask >= 1 << 63 else mask


def expected(data: np.ndarray, blocks: int, threads: int, warp: int) -> np.ndarray:
    """The host model of ``divergent_warps`` (1D blocks of ``threads``, warps of ``warp`` lanes; the
    block's last warp holds only the lanes the launch created)."""
    n, stride = data.size, blocks * threads
    first = np.zeros(stride, np.int64)
    for g in range(stride):
        idx = data[g:n:stride]
        k = idx % 5
        first[g] = int((k * (k + 1) // 2).sum() + idx.sum())
    out = np.zeros((stride, len(COLUMNS)), np.int64)
    for g in range(stride):
        t = g % threads
        lo = g - t % warp
        lanes = first[lo : lo + min(warp, threads - (t - t % warp))]
        out[g, 1] = _signed(sum(1 << k for k, x in enumerate(lanes) if x % 3 == 0))
        out[g, 2] = int(all(x % 2 == 0 for x in lanes))
        out[g, 3] = int(any(x % 7 == 0 for x in lanes))
        out[g, 4] = lanes[0]
        out[g, 0] = first[g] + int((data[g : n : stride // 2 + 1] % 4 == 1).sum())
    out[:, 5] = np.repeat(out[:, 0].reshape(blocks, threads).sum(axis=1), threads)
    return out


def warp_size(queue) -> int:
    """The warp size kernels see on ``queue``'s device."""
    out = upload(queue, np.zeros(1, np.int64))
    pk.exec(queue, pk.WorkDiv(1, 1, 1), _warp_size, out)
    return int(download(queue, out)[0])


@pk.kernel
def _warp_size(acc, out):
    out[0] = acc.warp_size


def run(queue, threads: int, blocks: int = 3, seed: int = 32) -> dict:
    """Launch ``divergent_warps`` with ``blocks`` x ``threads`` on ``queue`` and compare with the
    host model: ``{"threads", "blocks", "warp", "passed", "mismatches": {column: count}}``."""
    warp = warp_size(queue)
    n = 3 * blocks * threads + threads // 2 + 5  # the stride does not divide n: uneven trip counts
    data = np.random.default_rng(seed).integers(0, 1000, n)
    out = upload(queue, np.zeros((blocks * threads, len(COLUMNS)), np.int64))
    pk.exec(queue, pk.WorkDiv(blocks, threads, 1), divergent_warps, out, upload(queue, data), n)
    got, want = download(queue, out), expected(data, blocks, threads, warp)
    bad = {c: int((got[:, j] != want[:, j]).sum()) for j, c in enumerate(COLUMNS)}
    return {"threads": threads, "blocks": blocks, "warp": warp, "passed": not any(bad.values()), "mismatches": bad}
