"""Real multi-thread blocks on the device backends: barrier-correct reductions, shared-memory
tiles, dynamic shared memory, atomics under contention, Python arithmetic semantics, limits (the
kernels: alpyka_testing/backends/blocks.py, shared with test_nvrtc.py and test_cuda_on_cpu.py)."""

import math

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.backends.blocks import (
    BLOCK,
    WP,
    block_sums,
    counters,
    histogram,
    math_all,
    python_arith,
    reverse_in_block,
    transpose_tiled,
    weighted_block_sums,
)
from alpyka_testing.kernels import download, upload

gpu = pytest.mark.alpyka_backends(kind="gpu")


@gpu
def test_block_reduction_with_barriers(device, queue):
    rng = np.random.default_rng(3)
    n = 100_003
    x = rng.standard_normal(n)
    blocks = 37
    out = pk.Buffer(device, blocks, np.float64, queue=queue)
    pk.exec(queue, pk.WorkDiv(blocks, BLOCK, 1), block_sums, out, upload(queue, x), n)
    partial = download(queue, out)
    # the same grid-stride split computed with numpy: thread t of block b takes i = (b*BLOCK+t) + k*grid
    grid = blocks * BLOCK
    idx = np.arange(n)
    expected = np.bincount((idx % grid) // BLOCK, weights=x, minlength=blocks)
    np.testing.assert_allclose(partial, expected, rtol=1e-12, atol=1e-12)


@gpu
def test_shared_memory_tiled_transpose(device, queue):
    rng = np.random.default_rng(4)
    rows, cols = 75, 130
    a = rng.random((rows, cols)).astype(np.float32)
    out = pk.Buffer(device, (cols, rows), np.float32, queue=queue)
    wd = pk.WorkDiv((math.ceil(rows / 16), math.ceil(cols / 16)), (16, 16), (1, 1))
    pk.exec(queue, wd, transpose_tiled, out, upload(queue, a), rows, cols)
    np.testing.assert_array_equal(download(queue, out), a.T)


@pytest.mark.hip_differs  # the rocm stand-in too: HIP's dynamic shared memory limit
@gpu
def test_dynamic_shared_memory(device, queue):
    n, threads = 1000, 64
    x = np.arange(n, dtype=np.float32)
    out = pk.Buffer(device, n, np.float32, queue=queue)
    pk.memset(queue, out, 0)
    pk.exec(queue, pk.WorkDiv(math.ceil(n / threads), threads, 1), reverse_in_block, out, upload(queue, x), n)
    got = download(queue, out)
    full = (n // threads) * threads
    expected = x[:full].reshape(-1, threads)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(got[:full], expected)


@gpu
def test_atomics_contention_across_blocks(device, queue):
    rng = np.random.default_rng(5)
    n, nbins = 50_000, 16
    x = rng.random(n).astype(np.float32)
    hist = upload(queue, np.zeros(nbins, np.int32))
    hist_f64 = upload(queue, np.zeros(nbins, np.float64))
    lo_hi = upload(queue, np.array([np.inf, -np.inf], np.float32))
    pk.exec(queue, pk.WorkDiv(64, 64, 2), histogram, hist, hist_f64, lo_hi, upload(queue, x), n, nbins)
    bins = (x * nbins).astype(np.int64)
    np.testing.assert_array_equal(download(queue, hist), np.bincount(bins, minlength=nbins))
    np.testing.assert_allclose(
        download(queue, hist_f64), np.bincount(bins, weights=x.astype(np.float64), minlength=nbins), rtol=1e-9
    )
    np.testing.assert_array_equal(download(queue, lo_hi), [x.min(), x.max()])


@gpu
def test_integer_atomics_wrap_and_cas(device, queue):
    n = 1000
    ints = upload(queue, np.array([0, 0, 0], np.uint32))
    longs = upload(queue, np.array([0, -1, 0], np.int64))
    pk.exec(queue, pk.WorkDiv(8, 32, 1), counters, ints, longs, n)
    got_i, got_l = download(queue, ints), download(queue, longs)
    assert got_i[0] == n % 10  # inc wraps to 0 after 9 (CUDA/alpaka semantics)
    assert got_i[1] == (-n) % 10  # dec: 0 -> 9, then down
    assert got_i[2] == 0xFFFFFFFF
    assert got_l[0] == -3 * n and got_l[1] == n - 1
    assert 1 <= got_l[2] <= n  # the CAS chain advanced at least once and never skipped a value


@gpu
def test_python_division_and_math_semantics(device, queue):
    rng = np.random.default_rng(6)
    n = 2000
    a_i = rng.integers(-50, 50, n)
    b_i = rng.integers(1, 9, n) * rng.choice([-1, 1], n)
    a_f = rng.uniform(-20, 20, n)
    b_f = rng.uniform(0.5, 5, n) * rng.choice([-1, 1], n)
    out_i = pk.Buffer(device, (n, 2), np.int64, queue=queue)
    out_f = pk.Buffer(device, (n, 5), np.float64, queue=queue)
    args = [upload(queue, v) for v in (a_i, b_i, a_f, b_f)]
    pk.exec(queue, pk.valid_workdiv(device, n), python_arith, out_i, out_f, *args, n)
    gi, gf = download(queue, out_i), download(queue, out_f)
    np.testing.assert_array_equal(gi[:, 0], np.floor_divide(a_i, b_i))
    np.testing.assert_array_equal(gi[:, 1], np.mod(a_i, b_i))
    np.testing.assert_array_equal(gf[:, 0], np.floor_divide(a_f, b_f))
    np.testing.assert_allclose(gf[:, 1], np.mod(a_f, b_f), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gf[:, 2], a_i / b_i, rtol=1e-15)
    ref3 = np.arctan2(a_f, b_f) + np.hypot(a_f, b_f) + np.exp(a_f / 100.0)
    np.testing.assert_allclose(gf[:, 3], ref3, rtol=1e-12)
    ref4 = np.minimum(np.minimum(a_f, b_f), 0.5) + np.maximum(np.abs(a_i), 3) + a_i**2
    np.testing.assert_allclose(gf[:, 4], ref4, rtol=1e-12)


@pytest.mark.hip_differs  # the rocm stand-in too: HIP's device limits
@gpu
def test_work_division_over_the_limits_is_refused(device, queue):
    x = pk.Buffer(device, 16, np.float64)
    too_many = device.limits.max_threads_per_block * 2
    with pytest.raises(pk.WorkDivError):
        pk.exec(queue, pk.WorkDiv(1, too_many, 1), block_sums, x, x, 16)


@gpu
def test_a_kernels_own_thread_limit_is_checked_on_every_launch_over_it(device, queue):
    """Below the device's limit a kernel may allow fewer threads per block (its registers or
    private memory): the plan's limit. A work division over it is refused every time (only
    work divisions that fit are remembered as checked); one within it still launches."""
    x = upload(queue, np.arange(16, dtype=np.float64))
    out = pk.Buffer(device, 1, np.float64, queue=queue)
    fits = pk.WorkDiv(1, 32, 1)
    pk.exec(queue, fits, block_sums, out, x, 16)
    from backends._gpu_launch import launch_key

    plan = device.backend.plans(block_sums)[launch_key(device, fits, block_sums, (out, x, 16))]
    saved = plan.max_threads
    plan.max_threads = 32  # as if the kernel's registers allowed 32 threads per block here
    try:
        over = pk.WorkDiv(1, 64, 1)
        for _ in range(2):
            with pytest.raises(pk.WorkDivError, match="'block_sums' can run at most 32 threads per block"):
                pk.exec(queue, over, block_sums, out, x, 16)
        pk.memset(queue, out, 0)
        pk.exec(queue, fits, block_sums, out, x, 16)
        assert download(queue, out)[0] == 120.0
    finally:
        plan.max_threads = saved


@gpu
def test_collection_of_another_device_is_refused(device, queue):
    """A view whose memory belongs to another device (here a stand-in CUDA device) is refused
    before anything is enqueued."""

    class L(soa.Layout):
        x = soa.column(np.float32)

    other = pk.Device(
        "cuda" if device.backend_name != "cuda" else "opencl", 0, "stand-in", "gpu", "elsewhere:0", device.limits
    )
    v = soa.View(L, 4, object(), None, device=other)
    x = pk.Buffer(device, 4, np.float64)
    with pytest.raises(pk.DeviceMismatch, match="lives on .*stand-in"):
        pk.exec(queue, pk.WorkDiv(1, 4, 1), block_sums, x, v, 4)


@gpu
def test_device_functions_with_shared_arrays_and_views(device, queue):
    rng = np.random.default_rng(7)
    n = 5000
    data = {"w": rng.random(n), "p": rng.random((n, 3))}
    coll = pk.PortableCollection.from_dict(WP, data, queue)
    out = upload(queue, np.zeros(1, np.float64))
    pk.exec(queue, pk.WorkDiv(9, BLOCK, 1), weighted_block_sums, out, coll.const_view(), n)
    expected = (data["w"] * data["p"].sum(axis=1)).sum()
    np.testing.assert_allclose(download(queue, out)[0], expected, rtol=1e-12)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_functions_match_numpy(device, queue, dtype):
    from math import erf, erfc, gamma, lgamma

    rng = np.random.default_rng(8)
    n = 512
    x = rng.uniform(0.1, 3.5, n).astype(dtype)
    y = rng.uniform(0.2, 2.0, n).astype(dtype)
    out = pk.Buffer(device, (n, 9), np.float64, queue=queue)
    pk.exec(queue, pk.valid_workdiv(device, n), math_all, out, upload(queue, x), upload(queue, y), n)
    got = download(queue, out)
    a, b = x.astype(np.float64), y.astype(np.float64)
    ref = np.stack(
        [
            np.sqrt(a) + np.exp(-a) + np.exp2(a) + np.expm1(a),
            np.log(a) + np.log2(a) + np.log10(a) + np.log1p(a),
            np.sin(a) + np.cos(a) + np.tan(a) + np.arctan(a),
            np.arcsin(a / 4) + np.arccos(a / 4) + np.sinh(a) + np.cosh(a) + np.tanh(a),
            np.arcsinh(a) + np.arccosh(a + 1) + np.arctanh(a / 4) + np.arctan2(a, b),
            np.power(a, b) + np.hypot(a, b) + np.abs(a) + np.copysign(a, -b) + np.fmod(b, a),
            np.array([erf(v) + erfc(v) + lgamma(v) + gamma(v) for v in a]),
            np.floor(b * 3) + np.ceil(b * 3) + np.trunc(-b * 3),
            0 + 0 + 4 * np.ones(n),
        ],
        axis=1,
    )
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)
