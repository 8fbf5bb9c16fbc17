"""Warps, block-synchronising predicates and memory fences (alpaka's warp::*, syncBlockThreadsPredicate,
mem_fence) on every backend, against a host model of a warp: lanes are consecutive threads of a block,
a shuffle from a lane outside the warp gives the caller's own value."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError

# the rocm stand-in runs this file too: warps: HIP's wavefront intrinsics, 64 lanes
pytestmark = pytest.mark.hip_differs


@pk.kernel
def warp_sizes(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = acc.warp_size


@pk.kernel
def shuffles(acc, out, n, d):
    """One thread per element (the launch gives exactly n threads)."""
    for i in acc.uniform_elements(n):
        ws = acc.warp_size
        v = i * 7 + 3
        lane = acc.thread_idx % ws
        out[i, 0] = acc.warp_shfl(v, (lane + d) % ws)
        out[i, 1] = acc.warp_shfl_up(v, d)
        out[i, 2] = acc.warp_shfl_down(v, d)
        out[i, 3] = acc.warp_shfl_xor(v, d)
        out[i, 4] = np.int64(acc.warp_ballot(v % 3 == 0))
        out[i, 5] = 1 if acc.warp_all(v % 2 == 1) else 0
        out[i, 6] = 1 if acc.warp_any(v % 5 == 0) else 0
        out[i, 7] = np.int64(acc.warp_active_mask())
        out[i, 8] = int(acc.warp_shfl_down(np.float32(v) * np.float32(0.5), d) * 2)
        out[i, 9] = 1 if acc.warp_shfl_xor(v % 4 == 0, d) else 0


def _warp_size(q, device) -> int:
    wd = pk.make_workdiv(device, 1, 8)
    out = upload(q, np.zeros(8, np.int64))
    pk.exec(q, wd, warp_sizes, out, 8)
    sizes = set(download(q, out).tolist())
    assert len(sizes) == 1, sizes
    return sizes.pop()


def _signed(mask: int) -> int:
    """A uint64 mask as the int64 the kernel stores."""
    return mask - (1 << 64) if mask >= 1 << 63 else mask


def _expected(n: int, threads: int, ws: int, d: int) -> np.ndarray:
    """The host model of the shuffles kernel (1D blocks of ``threads``, warps of ``ws``)."""
    v = np.arange(n) * 7 + 3
    out = np.zeros((n, 10), np.int64)
    for i in range(n):
        t = i % threads
        lane, first = t % ws, i - t % ws
        size = min(ws, threads - (t - lane))  # lanes in this warp (the block's last may be partial)
        lanes = v[first : first + size]

        def src(k, own):
            return lanes[k] if 0 <= k < size else own

        out[i, 0] = src((lane + d) % ws, v[i])
        out[i, 1] = src(lane - d, v[i])
        out[i, 2] = src(lane + d, v[i])
        out[i, 3] = src(lane ^ d, v[i])
        out[i, 4] = _signed(sum(1 << k for k in range(size) if lanes[k] % 3 == 0))
        out[i, 5] = int(all(x % 2 == 1 for x in lanes))
        out[i, 6] = int(any(x % 5 == 0 for x in lanes))
        out[i, 7] = _signed((1 << size) - 1)
        out[i, 8] = int(np.float32(src(lane + d, v[i])) * np.float32(0.5) * 2)
        out[i, 9] = int(src(lane ^ d, v[i]) % 4 == 0)
    return out


def test_warp_size_per_backend(backend, device, queue):
    ws = _warp_size(queue, device)
    if device.kind == "cpu":
        assert ws == 1  # alpaka's CPU accelerators: warps of one thread
    elif backend in ("cuda", "rocm"):
        assert ws == device.limits.warp_size  # 32 on NVIDIA, the wavefront (64 on CDNA) on AMD
    else:
        assert ws >= 1 and ws & (ws - 1) == 0  # OpenCL: the sub-group size, else 1
    # what the device reports is what a kernel sees (Intel's CPU OpenCL said 1, gave 16: issue 39)
    assert device.limits.warp_size == ws and device.capabilities.warp_size == ws


@pytest.mark.parametrize("d", [1, 3])
def test_shuffles_ballots_votes(device, queue, d):
    ws = _warp_size(queue, device)
    threads = 1 if device.kind == "cpu" else 2 * max(ws, 32)
    blocks = 3
    n = blocks * threads
    wd = pk.WorkDiv(blocks, threads, 1)
    out = upload(queue, np.zeros((n, 10), np.int64))
    pk.exec(queue, wd, shuffles, out, n, d)
    got = download(queue, out)
    want = _expected(n, threads, ws, d)
    names = [
        "shfl",
        "shfl_up",
        "shfl_down",
        "shfl_xor",
        "ballot",
        "all",
        "any",
        "active_mask",
        "float shfl_down",
        "bool shfl_xor",
    ]
    for c, name in enumerate(names):
        np.testing.assert_array_equal(got[:, c], want[:, c], err_msg=f"{name} (warp size {ws}, d={d})")


@pk.kernel
def warp_block_sum(acc, out, data, n):
    """CMSSW's pattern: a warp reduction by shuffles, warps' sums through shared memory."""
    partial = acc.shared_array(1024, np.int64)
    ws = acc.warp_size
    t = acc.thread_idx
    for b in acc.independent_groups(acc.grid_blocks * 0 + (n + acc.block_threads - 1) // acc.block_threads):
        i = b * acc.block_threads + t
        v = data[i] if i < n else 0
        off = ws // 2
        while off > 0:
            v += acc.warp_shfl_down(v, off)
            off //= 2
        if t % ws == 0:
            partial[t // ws] = v
        acc.sync_block_threads()
        if t == 0:
            s = partial[0]
            for w in range(1, (acc.block_threads + ws - 1) // ws):
                s += partial[w]
            out[b] = s
        acc.sync_block_threads()


def test_warp_reduction_same_result_everywhere(device, queue):
    rng = np.random.default_rng(7)
    n = 1000
    data = rng.integers(-1000, 1000, n)
    threads = 1 if device.kind == "cpu" else 128
    groups = -(-n // threads)
    out = upload(queue, np.zeros(groups, np.int64))
    pk.exec(queue, pk.WorkDiv(4, threads, 1), warp_block_sum, out, upload(queue, data), n)
    want = [data[g * threads : (g + 1) * threads].sum() for g in range(groups)]
    np.testing.assert_array_equal(download(queue, out), want)


@pk.kernel
def predicates(acc, out, flags, n):
    """Per block: how many flags are set, whether all and whether any (one element per thread)."""
    for b in acc.independent_groups((n + acc.block_threads - 1) // acc.block_threads):
        i = b * acc.block_threads + acc.thread_idx
        p = i < n and flags[i] != 0
        c = acc.sync_block_threads_count(p)
        a = acc.sync_block_threads_and(p or i >= n)
        o = acc.sync_block_threads_or(p)
        if acc.thread_idx == 0:
            out[b, 0] = c
            out[b, 1] = 1 if a else 0
            out[b, 2] = 1 if o else 0


@pytest.mark.parametrize("pattern", ["mixed", "all", "none"])
def test_block_predicates(device, queue, pattern):
    threads = 1 if device.kind == "cpu" else 64
    n = 5 * threads - (0 if device.kind == "cpu" else 7)
    flags = {"mixed": (np.arange(n) * 37 % 11 < 4), "all": np.ones(n, bool), "none": np.zeros(n, bool)}[pattern]
    flags = flags.astype(np.int32)
    blocks = -(-n // threads)
    out = upload(queue, np.zeros((blocks, 3), np.int64))
    pk.exec(queue, pk.WorkDiv(2, threads, 1), predicates, out, upload(queue, flags), n)
    got = download(queue, out)
    for b in range(blocks):
        f = flags[b * threads : (b + 1) * threads]
        assert got[b].tolist() == [int(f.sum()), int(f.all()), int(f.any())], (b, pattern)


@pk.kernel
def propagate_min(acc, label, n):
    """Each element takes the minimum label of its neighbours until nothing changes: a loop
    ended by a block predicate, as CMSSW's clusterizer does (one block)."""
    changed = True
    while acc.sync_block_threads_or(changed):
        changed = False
        for i in acc.uniform_elements(n):
            for j in range(max(i - 1, 0), min(i + 2, n)):
                m = acc.atomic_add(label, j, 0)  # an atomic read: other threads lower label[j]
                if m < acc.atomic_min(label, i, m):
                    changed = True
        acc.mem_fence("block")


def test_predicate_ends_a_loop(device, queue):
    n = 300
    lab = upload(queue, np.arange(n, dtype=np.int32)[::-1].copy())
    threads = 1 if device.kind == "cpu" else 64
    elements = n if device.kind == "cpu" else 1
    pk.exec(queue, pk.WorkDiv(1, threads, elements), propagate_min, lab, n)
    np.testing.assert_array_equal(download(queue, lab), np.zeros(n, np.int32))


@pk.kernel
def last_block_sums(acc, partial, counter, out, data, n):
    """CMSSW's multi-block pattern: each block stores its sum, fences, counts itself in; the
    block that counts last adds up every block's sum."""
    for b in acc.independent_groups(acc.grid_blocks):
        if acc.thread_idx == 0:
            s = 0
            for i in range(b, n, acc.grid_blocks):
                s += data[i]
            acc.atomic_exch(partial, b, s)
            acc.mem_fence("grid")
            if acc.atomic_inc(counter, 0, np.uint32(acc.grid_blocks)) == acc.grid_blocks - 1:
                acc.mem_fence("device")
                total = 0
                for k in range(acc.grid_blocks):
                    total += acc.atomic_add(partial, k, 0)
                out[0] = total


def test_fences_last_block_done(device, queue):
    data = np.arange(1000, dtype=np.int64)
    blocks = 8
    partial = upload(queue, np.zeros(blocks, np.int64))
    counter = upload(queue, np.zeros(1, np.uint32))
    out = upload(queue, np.zeros(1, np.int64))
    pk.exec(
        queue,
        pk.WorkDiv(blocks, 1 if device.kind == "cpu" else 32, 1),
        last_block_sums,
        partial,
        counter,
        out,
        upload(queue, data),
        data.size,
    )
    assert download(queue, out)[0] == data.sum()


def test_errors_name_the_fix(device, queue):
    @pk.kernel
    def bad_lane(acc, out):
        out[0] = acc.warp_shfl(1, 0.5)

    @pk.kernel
    def bad_scope(acc, out):
        acc.mem_fence("warp")

    @pk.kernel
    def predicate_as_statement_value(acc, out):
        acc.sync_block_threads_count()

    out = upload(queue, np.zeros(1, np.int64))
    for k, text in [
        (bad_lane, "lane must be an integer"),
        (bad_scope, '"block", "grid" or "device"'),
        (predicate_as_statement_value, "takes 1 positional"),
    ]:
        with pytest.raises(KernelSyntaxError, match=text):
            pk.exec(queue, pk.WorkDiv(1, 1, 1), k, out)
