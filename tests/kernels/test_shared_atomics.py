"""Shared memory + barriers (block reductions) and atomics (contention, old values)."""

import os

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import (
    Particles,
    atomic_sequence,
    block_sum,
    block_sum_dynamic,
    contended,
    download,
    histogram,
    scalar_field_atomics,
    upload,
)


def _seed():
    """The data's seed: fixed (a run is repeatable), ALPYKA_TEST_SEED to try others. 2505286034
    once failed a tolerance with no atol: a block's sum near 0 differs in its last bits between
    summation orders."""
    return int(os.environ.get("ALPYKA_TEST_SEED", "2505286034"))


def _assert_sums(got, parts, what):
    """``got[g]`` is the float64 sum of ``parts[g]`` in some order. Two summation orders of m
    terms each lie within gamma_(m-1) * sum|x| of the exact sum (recursive summation, Higham,
    "Accuracy and Stability of Numerical Algorithms", 4.2; numpy's pairwise sum is tighter), so
    they differ by at most 2 * gamma_(m-1) * sum|x|, about (m - 1) * eps * sum|x|. A relative
    tolerance alone fails a sum near 0 (seed 2505286034: a block's terms cancel)."""
    eps = np.finfo(np.float64).eps
    for g, (value, x) in enumerate(zip(got, parts)):
        m = len(x)
        bound = 2 * (m - 1) * (eps / 2) / (1 - (m - 1) * eps / 2) * float(np.abs(x).sum())
        assert abs(value - x.sum()) <= bound, (
            f"{what}: block {g}: {value!r} vs {x.sum()!r}, {m} terms: more than the summation bound {bound:.3g} apart"
        )


def test_block_reduction_static_shared(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for blocks, elements, n in [(3, 16, 100), (4, 64, 1000), (1, 8, 5)]:
        wd = pk.make_workdiv(device, blocks, elements)
        data = rng.standard_normal(n)
        groups = -(-n // (wd.threads[0] * wd.elements[0]))
        partial = upload(queue, np.zeros(groups))
        pk.exec(queue, wd, block_sum, partial, upload(queue, data), n)
        got = download(queue, partial)
        be = wd.threads[0] * wd.elements[0]
        _assert_sums(got, [data[g * be : (g + 1) * be] for g in range(groups)], f"seed={seed} {wd}")


@pytest.mark.hip_differs  # the rocm stand-in too: HIP's dynamic shared memory limit
def test_block_reduction_dynamic_shared(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    wd = pk.make_workdiv(device, 5, 32)
    n = 700
    data = rng.standard_normal(n)
    be = wd.threads[0] * wd.elements[0]
    groups = -(-n // be)
    partial = upload(queue, np.zeros(groups))
    pk.exec(queue, wd, block_sum_dynamic, partial, upload(queue, data), n)
    _assert_sums(download(queue, partial), [2 * data[g * be : (g + 1) * be] for g in range(groups)], f"seed={seed}")


def test_histogram_under_contention(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n, nbins = 200_000, 7
    data = rng.integers(0, 1000, n).astype(np.int64)
    hist, fhist = upload(queue, np.zeros(nbins, np.int32)), upload(queue, np.zeros(nbins, np.float64))
    pk.exec(queue, pk.make_workdiv(device, 64, 64), histogram, hist, fhist, upload(queue, data), n, nbins)
    want = np.bincount(data % nbins, minlength=nbins)
    np.testing.assert_array_equal(download(queue, hist), want, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(download(queue, fhist), want * 0.5, err_msg=f"seed={seed}")


def test_contended_atomics(device, queue):
    n = 50_000
    init = np.array([-1, 0, 0, 0, 0, 0, 0], np.int64)
    cnt = upload(queue, init)
    pk.exec(queue, pk.make_workdiv(device, 32, 128), contended, cnt, n)
    got = download(queue, cnt)
    xor = 0
    for i in range(n):
        xor ^= i
    assert got[0] == n - 1 and got[1] == -(n - 1)
    assert got[2] == n and got[3] == -n
    assert got[4] == xor and got[5] == 7
    assert 1 <= got[6] <= n  # the cas chain advanced at least once and never beyond n


def test_atomic_old_values(device, queue):
    a = upload(queue, np.array([10, 5, 1, 7, 12, 0, 0, 2], np.int32))
    f = upload(queue, np.array([1.0, 0.5, 3.0, 0.0], np.float32))
    old = upload(queue, np.zeros(16, np.int32))
    fold = upload(queue, np.zeros(6, np.float32))
    pk.exec(queue, pk.make_workdiv(device, 2, 1), atomic_sequence, a, f, old, fold)
    got_old, got_a = download(queue, old), download(queue, a)
    # add 5 -> 15 (old 10); sub 2 -> 13 (old 15); min(5,3) -> 3 (old 5); max(3,10) -> 10 (old 3);
    # exch 42 (old 1); cas(7==7 -> 8) (old 7); cas(8 != 7) (old 8); and 12&6=4 (old 12); or 4|9=13 (old 4);
    # xor 13^5=8 (old 13); inc wrap at 2: 0->1->2->0 (olds 0,1,2); dec limit 3: 0->3->2 (olds 0,3); dec 2->1 (old 2)
    np.testing.assert_array_equal(got_old, [10, 15, 5, 3, 1, 7, 8, 12, 4, 13, 0, 1, 2, 0, 3, 2])
    np.testing.assert_array_equal(got_a, [13, 10, 42, 8, 8, 0, 2, 1])
    np.testing.assert_array_equal(download(queue, fold), [1.0, 2.5, 0.5, -1.0, 3.0, 0.0])
    np.testing.assert_array_equal(download(queue, f), [2.25, 2.0, 7.0, 3.0])


def test_scalar_field_atomics(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 5000
    coll = pk.PortableCollection(Particles, n, queue)
    coll.zero(queue)
    y = rng.standard_normal(n)
    host = pk.PortableCollection(Particles, n, pk.host())
    host.view().y[:] = y
    host.view().count[...] = 0
    host.view().total[...] = 0
    pk.memcpy(queue, coll, host)
    pk.exec(queue, pk.make_workdiv(device, 16, 32), scalar_field_atomics, coll.view(), n)
    d = coll.to_dict(queue)
    assert d["count"] == n
    np.testing.assert_allclose(d["total"], y.sum(), rtol=1e-9, err_msg=f"seed={seed}")
