"""pk.tools' in-kernel sorts (CMSSW's radixSort as block_radix_sort, and block_rank_sort) on every
backend, dtype and block size: the permutation numpy's stable argsort gives, for one block per
event over a global range and over a range in shared memory; the type tests and acc.bit_cast they
are built on."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, raised_by_the_front_end, upload
from alpyka_testing.numpy_compare import for_all_dtypes
from portable._block_sort import SMALL_SORT

#: the radix sort's shared workspace of a launch of up to 256 threads (8 bits a pass below 17)
WS = pk.tools.radix_sort_workspace(256, 4)
#: the workspace of 8 bits a pass, up to 16 threads (16 KiB: every device's shared memory holds it)
WS_8 = pk.tools.radix_sort_workspace(16, 8)


@pk.kernel
def radix_events(acc, keys, offsets, ind, ind2):
    ws = acc.shared_array(WS, np.int32)
    for e in acc.independent_groups(len(offsets) - 1):
        pk.tools.block_radix_sort_range(acc, keys, ind, ind2, offsets[e], offsets[e + 1], ws)


@pk.kernel
def rank_events(acc, keys, offsets, ind):
    for e in acc.independent_groups(len(offsets) - 1):
        pk.tools.block_rank_sort_range(acc, keys, ind, offsets[e], offsets[e + 1])


@pk.kernel
def radix_in_shared(acc, keys, out, n):
    """One block sorts ``keys[0:n]`` (n <= 512) copied into shared memory, indices in shared too."""
    sk = acc.shared_array(512, np.float32)
    si = acc.shared_array(512, np.uint16)
    si2 = acc.shared_array(512, np.uint16)
    ws = acc.shared_array(WS, np.int32)
    for i in range(acc.thread_idx, n, acc.block_threads):
        sk[i] = keys[i]
    acc.sync_block_threads()
    pk.tools.block_radix_sort(acc, sk, si, si2, n, ws)
    for i in range(acc.thread_idx, n, acc.block_threads):
        out[i] = si[i]


def _threads(queue) -> list[int]:
    """Block sizes to run: 1 everywhere; partial and whole warps and 256 where blocks have threads."""
    most = queue.device.limits.max_threads_per_block
    return [1] if most == 1 else [t for t in (1, 33, 64, 256) if t <= most]


def _keys(dtype, n: int, rng) -> np.ndarray:
    """Random keys of ``dtype`` with many duplicates and the extremes."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        k = rng.normal(size=n).astype(dt)
        k[::5] = k[1] if n > 1 else 0
        k[::17] = np.inf
        k[3::19] = -np.inf
        return k
    ii = np.iinfo(dt)
    k = rng.integers(ii.min, ii.max, size=n, dtype=dt, endpoint=True)
    k[::5] = k[1] if n > 1 else 0
    k[2::11] = ii.min
    k[4::13] = ii.max
    return k


def _events(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def _sorted_by_events(queue, kernel, keys, offsets, nt, *work):
    ind = upload(queue, np.full(keys.size, -1, np.int32))
    extra = [upload(queue, np.full(keys.size, -1, np.int32)) for _ in work]
    pk.exec(queue, pk.WorkDiv(3, nt, 1), kernel, upload(queue, keys), upload(queue, offsets), ind, *extra)
    return download(queue, ind)


@for_all_dtypes()
def test_radix_and_rank_sort_match_numpys_stable_argsort(queue, dtype):
    """Every dtype, every block size, events of 0, 1, block size -1/+0/+1, a large one and either
    side of the most keys a block of one thread hands to the rank sort (SMALL_SORT)."""
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    for nt in _threads(queue):
        sizes = [0, 1, 2, max(nt - 1, 0), nt, nt + 1, 1000, 0, 3, SMALL_SORT, SMALL_SORT + 1, 40]
        offsets = _events(sizes)
        keys = _keys(dtype, int(offsets[-1]), rng)
        radix = _sorted_by_events(queue, radix_events, keys, offsets, nt, "ind2")
        rank = _sorted_by_events(queue, rank_events, keys, offsets, nt)
        for e in range(len(sizes)):
            a, b = offsets[e], offsets[e + 1]
            want = np.argsort(keys[a:b], kind="stable")
            assert np.array_equal(radix[a:b], want), (nt, e, radix[a:b][:16], want[:16])
            assert np.array_equal(rank[a:b], want), (nt, e, rank[a:b][:16], want[:16])


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_radix_sort_of_many_keys_a_thread(queue, dtype):
    """128 keys a thread and more: 8 bits a pass (4 below), with its 257 counters a thread."""

    @pk.kernel
    def radix_8_bits(acc, keys, offsets, ind, ind2):
        ws = acc.shared_array(WS_8, np.int32)
        for e in acc.independent_groups(len(offsets) - 1):
            pk.tools.block_radix_sort_range(acc, keys, ind, ind2, offsets[e], offsets[e + 1], ws)

    rng = np.random.default_rng(8)
    for nt in [1, 16] if queue.device.limits.max_threads_per_block >= 16 else [1]:
        sizes = [128 * nt + 1, 128 * nt - 1]
        offsets = _events(sizes)
        keys = _keys(dtype, int(offsets[-1]), rng)
        got = _sorted_by_events(queue, radix_8_bits, keys, offsets, nt, "ind2")
        for e in range(len(sizes)):
            a, b = offsets[e], offsets[e + 1]
            assert np.array_equal(got[a:b], np.argsort(keys[a:b], kind="stable")), (nt, e)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_order_signed_zeros_and_nans(queue, dtype):
    """-0.0 sorts before 0.0 (numpy leaves them in input order); NaNs sort by their sign bit: a
    positive NaN after inf, a negative one before -inf (numpy puts every NaN last): the order of
    pk.tools.argsort."""
    neg_nan = -np.array(np.nan, dtype)
    keys = np.array([0.0, np.nan, -0.0, 1.0, neg_nan, -np.inf, np.inf, -0.0, 0.0, np.nan, -1.0], dtype)
    assert np.signbit(keys[4]) and not np.signbit(keys[1])
    offsets = _events([keys.size])
    want = [4, 5, 10, 2, 7, 0, 8, 3, 6, 1, 9]
    nt = _threads(queue)[-1]
    assert _sorted_by_events(queue, radix_events, keys, offsets, nt, "ind2").tolist() == want
    assert _sorted_by_events(queue, rank_events, keys, offsets, nt).tolist() == want
    on_host = download(queue, pk.tools.argsort(queue, upload(queue, keys)))
    assert on_host.tolist() == want


def test_radix_sort_in_shared_memory(queue):
    """Keys and both index arrays in shared memory (uint16 indices, as CMSSW's)."""
    rng = np.random.default_rng(3)
    for nt in _threads(queue):
        for n in (0, 1, nt + 1, 512):
            keys = np.round(rng.normal(size=max(n, 1)), 1).astype(np.float32) + np.float32(0)  # duplicates, no -0.0
            out = upload(queue, np.full(max(n, 1), 7, np.int32))
            pk.exec(queue, pk.WorkDiv(1, nt, 1), radix_in_shared, upload(queue, keys), out, n)
            got = download(queue, out)[:n]
            assert np.array_equal(got, np.argsort(keys[:n], kind="stable")), (nt, n)


def test_the_workspace_is_checked_at_launch(queue):
    if queue.device.limits.max_threads_per_block < 256:
        pytest.skip("the device's blocks are smaller than the workspace's 256 threads")

    @pk.kernel
    def small_ws(acc, keys, ind, ind2, n):
        ws = acc.shared_array(WS - 1, np.int32)
        pk.tools.block_radix_sort(acc, keys, ind, ind2, n, ws)

    a = upload(queue, np.zeros(4, np.int32))
    with pytest.raises(pk.WorkDivError, match=f"needs at least {WS} with 256 threads"):
        pk.exec(queue, pk.WorkDiv(1, 256, 1), small_ws, a, a, a, 4)


def test_workspace_sizes():
    assert pk.tools.radix_sort_workspace(1) == 257
    assert pk.tools.radix_sort_workspace(256, 4) == 17 * 256


# ----------------------------------------------------------------------------- what the sorts are built on
@pk.kernel
def bits_of(acc, f32, f64, u32, i64, back32, back64, n):
    for i in acc.uniform_elements(n):
        u32[i] = acc.bit_cast(f32[i], np.uint32)
        i64[i] = acc.bit_cast(f64[i], np.int64)
        back32[i] = acc.bit_cast(acc.bit_cast(f32[i], np.int32), np.float32)
        back64[i] = acc.bit_cast(acc.bit_cast(f64[i], np.uint64), np.float64)


def test_bit_cast_gives_numpys_view(queue):
    f32 = np.array([-1.5, -0.0, 0.0, np.inf, -np.nan, 3.25e-40, 1e38], np.float32)
    f64 = np.array([-1.5, -0.0, 0.0, np.inf, -np.nan, 5e-324, 1e300])
    n = f32.size
    bufs = [upload(queue, a) for a in (f32, f64)]
    outs = [upload(queue, np.zeros(n, t)) for t in (np.uint32, np.int64, np.float32, np.float64)]
    pk.exec(queue, pk.valid_workdiv(queue.device, n), bits_of, *bufs, *outs, n)
    u32, i64, back32, back64 = (download(queue, o) for o in outs)
    assert np.array_equal(u32, f32.view(np.uint32))
    assert np.array_equal(i64, f64.view(np.int64))
    assert np.array_equal(back32.view(np.uint32), f32.view(np.uint32))  # NaN payloads and signs kept
    assert np.array_equal(back64.view(np.uint64), f64.view(np.uint64))


@pk.device_function
def type_facts(a):
    if a.dtype == np.float32:
        return acc_free_bits(a) + 1000
    elif a.dtype.kind == "f" and a.dtype.itemsize == 8:
        return 2000
    else:
        return a.dtype.itemsize + (100 if a.dtype.kind == "u" else 0) + (5 if not a.dtype.kind != "i" else 0)


@pk.device_function
def acc_free_bits(a):
    return a.dtype.itemsize


@pk.kernel
def facts_of(acc, a, out):
    if acc.once_per_grid():
        out[0] = type_facts(a)
        out[1] = 1 if a.dtype != np.uint8 else 0


@pytest.mark.parametrize(
    "dtype, want", [(np.float32, 1004), (np.float64, 2000), (np.int16, 7), (np.uint8, 101), (np.uint64, 108)]
)
def test_dtype_tests_compile_the_branch_taken(dtype, want):
    """``a.dtype == np.float32``, ``.kind``, ``.itemsize``: known when compiled, so an ``if`` on
    them compiles only its branch (a bit_cast there of the wrong size is never seen)."""
    q = host_queue()
    out = np.zeros(2, np.int64)
    pk.exec(q, pk.WorkDiv(1, 1, 1), facts_of, np.zeros(1, dtype), out)
    q.wait()
    assert out.tolist() == [want, int(np.dtype(dtype) != np.uint8)]


def test_bit_cast_and_dtype_test_errors():
    @pk.kernel
    def wrong_size(acc, x, out):
        out[0] = acc.bit_cast(x[0], np.uint64)

    @pk.kernel
    def wrong_compare(acc, x, out):
        out[0] = 1 if x.dtype == 4 else 0

    q = host_queue()
    x, out = np.zeros(1, np.float32), np.zeros(1, np.uint64)
    with pytest.raises(pk.KernelSyntaxError, match="same size, got float32 and uint64") as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), wrong_size, x, out)
    assert raised_by_the_front_end(err)
    with pytest.raises(pk.KernelSyntaxError, match="compare a dtype with a numpy type") as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), wrong_compare, x, out)
    assert raised_by_the_front_end(err)
