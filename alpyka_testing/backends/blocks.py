"""Multi-thread block kernels shared by the backend tests: barrier-correct reductions,
shared-memory tiles, dynamic shared memory, atomics under contention, Python arithmetic, device
functions with shared arrays and views, the math library. tests/backends/test_multithread_blocks.py
runs them on the device backends, test_nvrtc.py compiles them to PTX, test_cuda_on_cpu.py runs
them on the cupy stand-in's CPU executor."""

import math

import numpy as np

import portable as pk
import soa

BLOCK = 128


@pk.kernel
def block_sums(acc, out, x, n):
    """One partial sum per block: a tree reduction in shared memory with barriers."""
    sh = acc.shared_array(BLOCK, np.float64)
    t = acc.thread_idx
    s = 0.0
    for i in acc.uniform_elements(n):
        s += x[i]
    sh[t] = s
    acc.sync_block_threads()
    stride = acc.block_threads // 2
    while stride > 0:
        if t < stride:
            sh[t] += sh[t + stride]
        acc.sync_block_threads()
        stride //= 2
    if acc.once_per_block():
        out[acc.block_idx] = sh[0]


@pk.kernel
def transpose_tiled(acc, out, inp, rows, cols):
    tile = acc.shared_array((16, 17), np.float32)  # padded against bank conflicts
    ty = acc.thread_idx[0]
    tx = acc.thread_idx[1]
    r = acc.block_idx[0] * 16 + ty
    c = acc.block_idx[1] * 16 + tx
    if r < rows and c < cols:
        tile[ty, tx] = inp[r, c]
    acc.sync_block_threads()
    r2 = acc.block_idx[1] * 16 + ty
    c2 = acc.block_idx[0] * 16 + tx
    if r2 < cols and c2 < rows:
        out[r2, c2] = tile[tx, ty]


@pk.kernel(dynamic_shared_bytes=lambda wd, out, x, n: wd.threads[0] * 4)
def reverse_in_block(acc, out, x, n):
    sh = acc.dynamic_shared_array(np.float32)
    t = acc.thread_idx
    base = acc.block_idx * acc.block_threads
    if base + t < n:
        sh[t] = x[base + t]
    acc.sync_block_threads()
    j = acc.block_threads - 1 - t
    if base + j < n and base + t < n:
        out[base + t] = sh[j]


@pk.kernel
def histogram(acc, hist, hist_f64, lo_hi, x, n, nbins):
    for i in acc.uniform_elements(n):
        b = int(x[i] * nbins)
        acc.atomic_add(hist, b, 1)
        acc.atomic_add(hist_f64, b, x[i])
        acc.atomic_min(lo_hi, 0, x[i])
        acc.atomic_max(lo_hi, 1, x[i])


@pk.kernel
def counters(acc, ints, longs, n):
    for i in acc.uniform_elements(n):
        acc.atomic_inc(ints, 0, np.uint32(9))
        acc.atomic_dec(ints, 1, np.uint32(9))
        acc.atomic_sub(longs, 0, np.int64(3))
        acc.atomic_max(longs, 1, np.int64(i))
        acc.atomic_or(ints, 2, np.uint32(1) << np.uint32(i % 32))
        old = acc.atomic_cas(longs, 2, np.int64(i), np.int64(i + 1))  # noqa: F841 - a CAS whose old value is kept


@pk.kernel
def python_arith(acc, out_i, out_f, a_i, b_i, a_f, b_f, n):
    for i in acc.uniform_elements(n):
        out_i[i, 0] = a_i[i] // b_i[i]
        out_i[i, 1] = a_i[i] % b_i[i]
        out_f[i, 0] = a_f[i] // b_f[i]
        out_f[i, 1] = a_f[i] % b_f[i]
        out_f[i, 2] = a_i[i] / b_i[i]
        out_f[i, 3] = math.atan2(a_f[i], b_f[i]) + math.hypot(a_f[i], b_f[i]) + math.exp(a_f[i] / 100.0)
        out_f[i, 4] = min(a_f[i], b_f[i], 0.5) + max(abs(a_i[i]), 3) + a_i[i] ** 2


@pk.device_function
def tree_sum(acc, sh, t):
    """Block-wide tree reduction of a shared array, in a device function (barriers inside)."""
    stride = acc.block_threads // 2
    while stride > 0:
        if t < stride:
            sh[t] += sh[t + stride]
        acc.sync_block_threads()
        stride //= 2
    return sh[0]


@pk.device_function
def weighted(v, i):
    return v.w[i] * (v.p[i, 0] + v.p[i, 1] + v.p[i, 2])


@pk.kernel
def weighted_block_sums(acc, out, v, n):
    sh = acc.shared_array(BLOCK, np.float64)
    t = acc.thread_idx
    s = 0.0
    for i in acc.uniform_elements(n):
        s += weighted(v, i)
    sh[t] = s
    acc.sync_block_threads()
    total = tree_sum(acc, sh, t)
    if t == 0:
        acc.atomic_add(out, 0, total)


class WP(soa.Layout):
    w = soa.column(np.float64)
    p = soa.vector(np.float64, 3)


@pk.kernel
def math_all(acc, out, x, y, n):
    for i in acc.uniform_elements(n):
        a = x[i]
        b = y[i]
        out[i, 0] = math.sqrt(a) + math.exp(-a) + math.exp2(a) + math.expm1(a)
        out[i, 1] = math.log(a) + math.log2(a) + math.log10(a) + math.log1p(a)
        out[i, 2] = math.sin(a) + math.cos(a) + math.tan(a) + math.atan(a)
        out[i, 3] = math.asin(a / 4) + math.acos(a / 4) + math.sinh(a) + math.cosh(a) + math.tanh(a)
        out[i, 4] = math.asinh(a) + math.acosh(a + 1) + math.atanh(a / 4) + math.atan2(a, b)
        out[i, 5] = math.pow(a, b) + math.hypot(a, b) + math.fabs(-a) + math.copysign(a, -b) + math.fmod(b, a)
        out[i, 6] = math.erf(a) + math.erfc(a) + math.lgamma(a) + math.tgamma(a)
        out[i, 7] = math.floor(b * 3) + math.ceil(b * 3) + math.trunc(-b * 3)
        out[i, 8] = math.isnan(a) + 2 * math.isinf(a / 0.5) + 4 * math.isfinite(b)
