"""pk.tools (CMSSW's alpakatools) on every backend: prefix scans, one-to-many associations, radix
sorts, and the in-kernel building blocks."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload


@pytest.mark.parametrize("n", [1, 7, 2048, 2049, 40_001])  # 40001: 3 segments on the CPU backends
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_prefix_scan_any_length(queue, n, dtype):
    rng = np.random.default_rng(n)
    x = rng.integers(-100, 100, n).astype(dtype)
    dst = upload(queue, np.zeros(n, dtype))
    pk.tools.prefix_scan(queue, upload(queue, x), dst)
    np.testing.assert_allclose(download(queue, dst), np.cumsum(x), rtol=0, atol=0)


def test_prefix_scan_in_place_and_empty(device, queue):
    x = np.arange(5000, dtype=np.int64)
    buf = upload(queue, x)
    pk.tools.prefix_scan(queue, buf, buf)
    np.testing.assert_array_equal(download(queue, buf), np.cumsum(x))
    empty, other = upload(queue, np.zeros(0, np.int32)), upload(queue, np.zeros(0, np.int32))
    queue.wait()
    stats = device.backend.allocator(device).stats
    before = (stats.hits, stats.misses, stats.live_blocks)
    assert pk.tools.prefix_scan(queue, empty, empty) is None
    assert pk.tools.prefix_scan(queue, empty, other) is None
    queue.wait()
    stats = device.backend.allocator(device).stats
    assert (stats.hits, stats.misses, stats.live_blocks) == before  # no workspace, nothing launched
    assert download(queue, empty).shape == download(queue, other).shape == (0,)


def test_prefix_scan_refuses_bad_input(queue):
    a = upload(queue, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="dst has 3 elements, the other array 4"):
        pk.tools.prefix_scan(queue, a, upload(queue, np.zeros(3, np.int32)))
    with pytest.raises(ValueError, match="1-dimensional"):
        pk.tools.prefix_scan(queue, upload(queue, np.zeros((2, 2), np.int32)), a)
    with pytest.raises(TypeError, match="pk.Queue"):
        pk.tools.prefix_scan(None, a, a)


@pytest.mark.parametrize("n, nbins", [(1, 1), (1000, 7), (30_000, 1000)])
def test_one_to_many(queue, n, nbins):
    keys = np.random.default_rng(n).integers(-2, nbins + 2, n).astype(np.int32)  # some out of range
    offsets, content = pk.tools.one_to_many(queue, upload(queue, keys), nbins)
    off, con = download(queue, offsets), download(queue, content)
    assert off.shape == (nbins + 1,) and off[0] == 0
    np.testing.assert_array_equal(np.diff(off), np.bincount(keys[(keys >= 0) & (keys < nbins)], minlength=nbins))
    for b in range(nbins):
        assert sorted(con[off[b]:off[b + 1]].tolist()) == np.flatnonzero(keys == b).tolist()
    assert (con[off[nbins]:] == -1).all()  # the slots of the keys left out


def test_one_to_many_refuses_bad_input(queue):
    with pytest.raises(ValueError, match="nbins"):
        pk.tools.one_to_many(queue, upload(queue, np.zeros(3, np.int32)), 0)
    with pytest.raises(TypeError, match="integers"):
        pk.tools.one_to_many(queue, upload(queue, np.zeros(3, np.float32)), 4)


_KEYS = {
    "int32": lambda r, n: r.integers(-2**31, 2**31, n).astype(np.int32),
    "uint8": lambda r, n: r.integers(0, 256, n).astype(np.uint8),
    "int64": lambda r, n: r.integers(-2**62, 2**62, n) * 2,
    "uint64": lambda r, n: r.integers(0, 2**63, n).astype(np.uint64) * np.uint64(2),
    "float32": lambda r, n: np.concatenate([r.standard_normal(n - 4), [np.inf, -np.inf, 0.0, -0.0]]).astype(np.float32),
    "float64": lambda r, n: np.round(r.standard_normal(n), 1) + 0.0,  # many equal keys (and no -0.0)
}


@pytest.mark.parametrize("kind", sorted(_KEYS))
def test_argsort_is_stable_and_radix_sort_sorts(queue, kind):
    keys = _KEYS[kind](np.random.default_rng(5), 1201)  # 5 workers on GPU-like backends
    buf = upload(queue, keys)
    order = download(queue, pk.tools.argsort(queue, buf))
    want = np.argsort(keys, kind="stable")
    if kind == "float32":  # -0.0 sorts before 0.0 here; numpy calls them equal
        assert np.array_equal(keys[order], keys[want]) and sorted(order.tolist()) == list(range(keys.size))
    else:
        np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(download(queue, pk.tools.radix_sort(queue, buf)), np.sort(keys))


@pk.kernel
def user_block_scan(acc, data, out, n):
    """A user kernel calling the in-kernel building blocks: one block scans, sums and bins."""
    ws = acc.shared_array(1024, np.int64)
    wsum = acc.shared_array(1024, np.int64)
    pk.tools.block_prefix_scan(acc, data, out, n, ws)
    total = pk.tools.block_sum(acc, data[acc.thread_idx] if acc.thread_idx < n else 0, wsum)
    if acc.thread_idx == 0:
        out[n] = total


def test_in_kernel_building_blocks(device, queue):
    n = 100
    data = np.arange(1, n + 1, dtype=np.int64)
    out = upload(queue, np.zeros(n + 1, np.int64))
    threads = 1 if device.kind == "cpu" else 128  # every thread holds one value for block_sum
    pk.exec(queue, pk.WorkDiv(1, threads, 1), user_block_scan, upload(queue, data), out, n)
    got = download(queue, out)
    np.testing.assert_array_equal(got[:n], np.cumsum(data))
    assert got[n] == (data.sum() if threads > 1 else data[0])


@pk.kernel
def block_sums_everywhere(acc, per_block, per_thread, data, n):
    """Each block sums its threads' values with pk.tools.block_sum; every thread keeps what it got."""
    ws = acc.shared_array(1024, np.int64)  # one word per warp: 255 with one-thread warps
    i = acc.block_idx * acc.block_threads + acc.thread_idx
    total = pk.tools.block_sum(acc, data[i] if i < n else 0, ws)
    per_thread[i] = total
    if acc.thread_idx == 0:
        per_block[acc.block_idx] = total


@pytest.mark.hip_differs  # the rocm stand-in's 64-lane wavefronts too
def test_block_sum_with_partial_last_warps(device, queue):
    """Blocks of 1, 33, 100 and 255 threads (as many as the device runs per block: 1 on the CPU
    backends): a warp of the block is partial in each but the 1-thread block on 32- and 64-lane
    warps, and every thread gets its block's exact sum."""
    sizes = [t for t in (1, 33, 100, 255) if t <= device.limits.max_threads_per_block]
    assert sizes, f"{device} runs no block of 1 thread"
    rng = np.random.default_rng(17)
    for threads in sizes:
        blocks = 3
        n = blocks * threads - threads // 2  # the last block half empty (its threads add 0)
        data = rng.integers(1, 1_000_000, n).astype(np.int64)
        padded = np.zeros(blocks * threads, np.int64)
        padded[:n] = data
        want = padded.reshape(blocks, threads).sum(axis=1)
        wd = pk.WorkDiv(blocks, threads, 1)
        wd.check(device)
        per_block = upload(queue, np.zeros(blocks, np.int64))
        per_thread = upload(queue, np.zeros(blocks * threads, np.int64))
        pk.exec(queue, wd, block_sums_everywhere, per_block, per_thread, upload(queue, data), n)
        np.testing.assert_array_equal(download(queue, per_block), want, err_msg=f"{threads} threads per block")
        np.testing.assert_array_equal(download(queue, per_thread), np.repeat(want, threads),
                                      err_msg=f"{threads} threads per block: a thread's total")
