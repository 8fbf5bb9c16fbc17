"""pk.tools (CMSSW's alpakatools) on every backend: prefix scans, one-to-many associations, radix
sorts, and the in-kernel building blocks."""

from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, upload
from portable._allocator import CachingAllocator


def test_prefix_scan_of_floats_into_integers_is_refused(queue):
    """float32 values scanned into int32 gave a different wrong answer on each backend (4,992,688
    on the CPU backends, 4,986,388 on the emulated CUDA, numpy 4,942,690): refused, naming the fix;
    a wider dst (int32 into int64 or float64) is numpy's answer everywhere."""
    x = (np.random.default_rng(0).random(100_000) * 100).astype(np.float32)
    with pytest.raises(pk.ArgumentTypeError, match="src holds float32 and dst int32: a scan of floats into integers"):
        pk.tools.prefix_scan(queue, upload(queue, x), upload(queue, np.zeros(x.size, np.int32)))
    ints = x.astype(np.int32)
    for wide in (np.int64, np.float64):
        dst = upload(queue, np.zeros(x.size, wide))
        pk.tools.prefix_scan(queue, upload(queue, ints), dst)
        np.testing.assert_array_equal(download(queue, dst), np.cumsum(ints, dtype=wide))


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


def _refused_by_the_host_checks(err: pytest.ExceptionInfo) -> bool:
    """The error came from pk.tools' own host code alone (the checks of shapes, dtypes and the
    queue's type, before it reads anything of the device or launches): the same on every backend,
    so these checks run once, on cpu_serial."""
    return {Path(e.path).name for e in err.traceback[1:]} == {"tools.py"}


def test_prefix_scan_refuses_bad_input():
    queue = host_queue()
    a = upload(queue, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="dst has 3 elements, the other array 4") as err:
        pk.tools.prefix_scan(queue, a, upload(queue, np.zeros(3, np.int32)))
    assert _refused_by_the_host_checks(err)
    with pytest.raises(ValueError, match="1-dimensional") as err:
        pk.tools.prefix_scan(queue, upload(queue, np.zeros((2, 2), np.int32)), a)
    assert _refused_by_the_host_checks(err)
    with pytest.raises(TypeError, match="pk.Queue") as err:
        pk.tools.prefix_scan(None, a, a)
    assert _refused_by_the_host_checks(err)


@pytest.mark.parametrize("n, nbins", [(1, 1), (1000, 7), (30_000, 1000)])
def test_one_to_many(queue, n, nbins):
    keys = np.random.default_rng(n).integers(-2, nbins + 2, n).astype(np.int32)  # some out of range
    offsets, content = pk.tools.one_to_many(queue, upload(queue, keys), nbins)
    off, con = download(queue, offsets), download(queue, content)
    assert off.shape == (nbins + 1,) and off[0] == 0
    np.testing.assert_array_equal(np.diff(off), np.bincount(keys[(keys >= 0) & (keys < nbins)], minlength=nbins))
    for b in range(nbins):
        assert sorted(con[off[b] : off[b + 1]].tolist()) == np.flatnonzero(keys == b).tolist()
    assert (con[off[nbins] :] == -1).all()  # the slots of the keys left out


def test_one_to_many_refuses_bad_input():
    queue = host_queue()
    with pytest.raises(ValueError, match="nbins") as err:
        pk.tools.one_to_many(queue, upload(queue, np.zeros(3, np.int32)), 0)
    assert _refused_by_the_host_checks(err)
    with pytest.raises(TypeError, match="integers") as err:
        pk.tools.one_to_many(queue, upload(queue, np.zeros(3, np.float32)), 4)
    assert _refused_by_the_host_checks(err)


_KEYS = {
    "int32": lambda r, n: r.integers(-(2**31), 2**31, n).astype(np.int32),
    "uint8": lambda r, n: r.integers(0, 256, n).astype(np.uint8),
    "int64": lambda r, n: r.integers(-(2**62), 2**62, n) * 2,
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
        np.testing.assert_array_equal(
            download(queue, per_thread),
            np.repeat(want, threads),
            err_msg=f"{threads} threads per block: a thread's total",
        )


# ----------------------------------------------------------------------------- per-event sizes (issue 33)
def _all_calls(queue, keys, nbins):
    """prefix_scan, one_to_many, argsort and radix_sort of ``keys`` on ``queue``, downloaded."""
    n = keys.size
    buf = upload(queue, keys)
    scanned = upload(queue, np.zeros(n, keys.dtype))
    pk.tools.prefix_scan(queue, buf, scanned)
    offsets, content = pk.tools.one_to_many(queue, buf, nbins)
    order, ordered = pk.tools.argsort(queue, buf), pk.tools.radix_sort(queue, buf)
    return [download(queue, b) for b in (scanned, offsets, content, order, ordered)]


# 255-257: the size classes of the workspaces and a 256-thread block; 2047-2049: one segment of
# the general scan on a GPU-like device; 1e3 and 1e5 the sizes the issue names
@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1000, 2047, 2048, 2049, 100_000])
def test_one_thread_paths_give_what_the_general_paths_give(device, queue, monkeypatch, n):
    """The one-thread kernels (cpu_serial, cpu_threads, OpenCL on a CPU) against the multi-block
    ones, forced on the same device: the same scan, offsets, stable order and sorted keys; the
    same indices in every bin (the one-thread fill keeps them ascending). Both against numpy. A
    device that runs the multi-block kernels anyway (a GPU, Oclgrind) runs the calls once: forcing
    them would repeat the same launches (half of this test's time in the Oclgrind pass)."""
    keys = np.random.default_rng(n).integers(-3, 300, n).astype(np.int32)  # some outside [0, 290)
    fast = general = _all_calls(queue, keys, 290)
    if pk.tools._one_thread(device):
        monkeypatch.setattr(pk.tools, "_one_thread", lambda dev: False)
        general = _all_calls(queue, keys, 290)
    for got, want, what in zip(fast, general, ("scan", "offsets", "content", "argsort", "radix_sort")):
        if what != "content":
            np.testing.assert_array_equal(got, want, err_msg=what)
    off, con, ref = fast[1], fast[2], general[2]
    np.testing.assert_array_equal(fast[0], np.cumsum(keys), err_msg="scan")
    kept = keys[(keys >= 0) & (keys < 290)]
    np.testing.assert_array_equal(off, np.concatenate([[0], np.cumsum(np.bincount(kept, minlength=290))]))
    np.testing.assert_array_equal(fast[3], np.argsort(keys, kind="stable"))
    np.testing.assert_array_equal(fast[4], np.sort(keys), err_msg="radix_sort")
    for b in range(290):
        assert sorted(ref[off[b] : off[b + 1]].tolist()) == np.flatnonzero(keys == b).tolist()
        if pk.tools._one_thread(device):
            assert con[off[b] : off[b + 1]].tolist() == np.flatnonzero(keys == b).tolist(), f"bin {b}"
    assert (con[off[290] :] == -1).all() and (ref[off[290] :] == -1).all()


@pytest.mark.parametrize(
    "keys",
    [
        np.full(700, 12345, np.int64),  # every byte constant: no pass at all
        np.arange(300, dtype=np.uint64)[::-1] % 200,  # one pass (the result comes back from the workspace)
        np.random.default_rng(1).integers(1000, 1100, 900),  # two of eight bytes vary
        np.random.default_rng(2).integers(-50, 50, 900).astype(np.int8),
        (np.round(np.random.default_rng(3).standard_normal(900), 1) + 0.0).astype(np.float32),  # no -0.0
    ],
    ids=["constant", "one-byte", "two-bytes", "int8", "float32"],
)
def test_sorts_that_skip_byte_passes(queue, keys):
    buf = upload(queue, keys)
    np.testing.assert_array_equal(download(queue, pk.tools.argsort(queue, buf)), np.argsort(keys, kind="stable"))
    np.testing.assert_array_equal(download(queue, pk.tools.radix_sort(queue, buf)), np.sort(keys, kind="stable"))


def _count_launches(monkeypatch):
    """The kernels pk.tools launches from now on, by name (every launch of it is ``pk.exec``)."""
    launched = []
    real = pk.tools.exec
    monkeypatch.setattr(pk.tools, "exec", lambda *a: (launched.append(a[2].__name__), real(*a))[1])
    return launched


def test_calls_at_1e3_elements_launch_once_and_allocate_nothing(device, queue, monkeypatch):
    """After a first call (which makes the queue's workspaces), a call at 1e3 elements takes no
    allocation but its outputs (none with ``out=``): one launch each where one thread runs it,
    no more than the general algorithm's (1 + 3 per key byte for argsort) elsewhere."""
    n = 1000
    keys = upload(queue, np.random.default_rng(0).integers(0, 2**31, n).astype(np.int32))
    scanned, idx, ordered = (upload(queue, np.zeros(n, np.int32)) for _ in range(3))
    offsets, content = upload(queue, np.zeros(101, np.int32)), upload(queue, np.zeros(n, np.int32))
    calls = {
        "prefix_scan": (lambda: pk.tools.prefix_scan(queue, keys, scanned), 0, 1),
        "one_to_many": (lambda: pk.tools.one_to_many(queue, keys, 100), 2, 3),
        "one_to_many out=": (lambda: pk.tools.one_to_many(queue, keys, 100, out=(offsets, content)), 0, 3),
        "argsort": (lambda: pk.tools.argsort(queue, keys), 1, 13),
        "argsort out=": (lambda: pk.tools.argsort(queue, keys, out=idx), 0, 13),
        "radix_sort out=": (lambda: pk.tools.radix_sort(queue, keys, out=ordered), 0, 14),
    }
    one = pk.tools._one_thread(device)
    allocator = device.backend.allocator(device)
    for name, (call, outputs, general_launches) in calls.items():
        call()  # makes the queue's workspaces
        queue.wait()
        launched = _count_launches(monkeypatch)
        before = allocator.stats.hits, allocator.stats.misses
        results = call()  # noqa: F841 - the outputs stay alive until the counts are read
        queue.wait()
        hits, misses = allocator.stats.hits - before[0], allocator.stats.misses - before[1]
        assert hits + misses == outputs, f"{name}: {hits + misses} allocations for {outputs} outputs"
        if isinstance(allocator, CachingAllocator):  # cupy's pool may grow while the last outputs are in flight
            assert misses == 0, f"{name}: {misses} new allocations"
        assert len(launched) <= (1 if one else general_launches), f"{name}: launched {launched}"
        monkeypatch.undo()
    np.testing.assert_array_equal(download(queue, idx), np.argsort(download(queue, keys), kind="stable"))


def test_out_arguments_are_checked(queue):
    keys = upload(queue, np.zeros(10, np.int32))
    with pytest.raises(ValueError, match=r"out must be a 1-dimensional int32 pk.Buffer of 10 elements"):
        pk.tools.argsort(queue, keys, out=upload(queue, np.zeros(9, np.int32)))
    with pytest.raises(ValueError, match=r"out\[0\] \(offsets\) must be .* of 5 elements"):
        pk.tools.one_to_many(queue, keys, 4, out=(upload(queue, np.zeros(4, np.int32)), keys))
    with pytest.raises(ValueError, match="out must be a 1-dimensional int32"):
        pk.tools.radix_sort(queue, keys, out=upload(queue, np.zeros(10, np.int64)))
