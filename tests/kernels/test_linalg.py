"""pk.linalg on every backend: each device function on sizes 1 to 6 against numpy (within
rounding) and against the same Python code run on the host, which gives the bits every backend
must give (the kernel language's float64 arithmetic is Python's, operation by operation, and no
backend fuses a multiply and an add)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.compiler._kernel import DeviceFunction

#: the test kernels inline every pk.linalg function: numba compiles each in ~10 s of CPU (minutes
#: of wall time on a loaded 2-core machine, past the suite's default 240 s per test)
pytestmark = pytest.mark.timeout(900)

MAXN = 6
OPS = (
    "matmul",
    "matvec",
    "similarity",
    "transpose",
    "dot",
    "norm",
    "cross",
    "cross2d",
    "cholesky",
    "cholesky_solve",
    "ldlt",
    "ldlt_solve",
    "cholesky_inverse",
    "inverse",
    "determinant",
    "copy",
)


@pk.device_function
def apply(acc, op, m1, m2, m3, x, y, z, n, k):
    """Operation number ``op`` of :data:`OPS` on one case's arrays; returns its scalar, if any."""
    r = 0.0
    if op == 0:
        pk.linalg.matmul(acc, m1, m2, m3, n, k, n)
    elif op == 1:
        pk.linalg.matvec(acc, m1, x, z, n, k)
    elif op == 2:
        pk.linalg.similarity(acc, m1, m2, m3, n, k)
    elif op == 3:
        pk.linalg.transpose(acc, m1, m3, n, k)
    elif op == 4:
        r = pk.linalg.dot(acc, x, y, n)
    elif op == 5:
        r = pk.linalg.norm(acc, x, n)
    elif op == 6:
        pk.linalg.cross(acc, x, y, z)
    elif op == 7:
        r = pk.linalg.cross2d(acc, x, y)
    elif op == 8:
        pk.linalg.cholesky(acc, m1, n)
    elif op == 9:
        pk.linalg.cholesky_solve(acc, m1, x, n)
    elif op == 10:
        pk.linalg.ldlt(acc, m1, n)
    elif op == 11:
        pk.linalg.ldlt_solve(acc, m1, x, n)
    elif op == 12:
        pk.linalg.cholesky_inverse(acc, m1, m3, n)
    elif op == 13:
        r = pk.linalg.inverse(acc, m1, m3, n)
    elif op == 14:
        r = pk.linalg.determinant(acc, m1, n)
    elif op == 15:
        pk.linalg.copy(acc, m1, m3, n, k)
    return r


@pk.device_function
def load(acc, c, a, b, v, w, m1, m2, m3, x, y, z):
    for i in range(MAXN):
        x[i] = v[c, i]
        y[i] = w[c, i]
        z[i] = 0.0
        for j in range(MAXN):
            m1[i, j] = a[c, i, j]
            m2[i, j] = b[c, i, j]
            m3[i, j] = 0.0


@pk.device_function
def store(acc, c, r, m1, m3, x, z, out_m1, out_m3, out_x, out_z, out_s):
    out_s[c] = r
    for i in range(MAXN):
        out_x[c, i] = x[i]
        out_z[c, i] = z[i]
        for j in range(MAXN):
            out_m1[c, i, j] = m1[i, j]
            out_m3[c, i, j] = m3[i, j]


@pk.kernel
def linalg_in_shared(acc, ops, sizes, a, b, v, w, out_m1, out_m3, out_x, out_z, out_s, cases):
    """One case per block, in its shared arrays, by the block's thread 0."""
    m1 = acc.shared_array((MAXN, MAXN), np.float64)
    m2 = acc.shared_array((MAXN, MAXN), np.float64)
    m3 = acc.shared_array((MAXN, MAXN), np.float64)
    x = acc.shared_array(MAXN, np.float64)
    y = acc.shared_array(MAXN, np.float64)
    z = acc.shared_array(MAXN, np.float64)
    for c in acc.independent_groups(cases):
        if acc.thread_idx == 0:
            load(acc, c, a, b, v, w, m1, m2, m3, x, y, z)
            r = apply(acc, ops[c], m1, m2, m3, x, y, z, sizes[c, 0], sizes[c, 1])
            store(acc, c, r, m1, m3, x, z, out_m1, out_m3, out_x, out_z, out_s)
        acc.sync_block_threads()


@pk.kernel
def linalg_in_local(acc, ops, sizes, a, b, v, w, out_m1, out_m3, out_x, out_z, out_s, cases):
    """One case per thread, in its per-thread arrays."""
    m1 = acc.local_array((MAXN, MAXN), np.float64)
    m2 = acc.local_array((MAXN, MAXN), np.float64)
    m3 = acc.local_array((MAXN, MAXN), np.float64)
    x = acc.local_array(MAXN, np.float64)
    y = acc.local_array(MAXN, np.float64)
    z = acc.local_array(MAXN, np.float64)
    for c in acc.uniform_elements(cases):
        load(acc, c, a, b, v, w, m1, m2, m3, x, y, z)
        r = apply(acc, ops[c], m1, m2, m3, x, y, z, sizes[c, 0], sizes[c, 1])
        store(acc, c, r, m1, m3, x, z, out_m1, out_m3, out_x, out_z, out_s)


# ----------------------------------------------------------------------------- the host's run of the same code


def _on_host(df: DeviceFunction, done: dict) -> types.FunctionType:
    """``df``'s Python function with the device functions it calls made callable on the host."""
    if df.__name__ in done:
        return done[df.__name__]
    fn = df.py_function
    glob = dict(fn.__globals__)
    done[df.__name__] = host = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__, fn.__closure__)
    for name, value in fn.__globals__.items():
        if isinstance(value, DeviceFunction):
            glob[name] = _on_host(value, done)
    return host


HOST = {name: _on_host(getattr(pk.linalg, name), {}) for name in pk.linalg.__all__}


def _host_apply(op, m1, m2, m3, x, y, z, n, k):
    """:func:`apply` on the host (same order of operations, Python's float64 arithmetic)."""
    h, acc = HOST, None
    name = OPS[op]
    args = {
        "matmul": (m1, m2, m3, n, k, n),
        "matvec": (m1, x, z, n, k),
        "similarity": (m1, m2, m3, n, k),
        "transpose": (m1, m3, n, k),
        "dot": (x, y, n),
        "norm": (x, n),
        "cross": (x, y, z),
        "cross2d": (x, y),
        "cholesky": (m1, n),
        "cholesky_solve": (m1, x, n),
        "ldlt": (m1, n),
        "ldlt_solve": (m1, x, n),
        "cholesky_inverse": (m1, m3, n),
        "inverse": (m1, m3, n),
        "determinant": (m1, n),
        "copy": (m1, m3, n, k),
    }[name]
    r = h[name](acc, *args)
    return 0.0 if r is None else float(r)


# ----------------------------------------------------------------------------- the cases


def _cases(seed: int = 7):
    """``(ops, sizes, a, b, v, w)``: every operation on every size it takes, three draws each;
    symmetric positive definite ``a`` for the Cholesky/LDLT cases (as ill-conditioned as a track
    fit's: diagonal spread over 8 orders of magnitude)."""
    rng = np.random.default_rng(seed)
    rows = []
    for op, name in enumerate(OPS):
        sizes = [(3, 3)] if name == "cross" else [(2, 2)] if name == "cross2d" else [(n, n) for n in range(1, MAXN + 1)]
        if name in ("matvec", "similarity", "transpose", "copy"):
            sizes += [(2, 5), (5, 3), (3, 1)]
        for n, k in sizes:
            for _ in range(3):
                a = rng.standard_normal((MAXN, MAXN))
                if name.startswith(("cholesky", "ldlt")):
                    scale = 10.0 ** rng.uniform(-4, 4, MAXN)
                    spd = a @ a.T + MAXN * np.eye(MAXN)
                    a = spd * np.outer(scale, scale)
                rows.append((op, n, k, a, rng.standard_normal((MAXN, MAXN)), rng.standard_normal(MAXN),
                             rng.standard_normal(MAXN)))  # fmt: skip
    ops = np.array([r[0] for r in rows], np.int32)
    sizes = np.array([(r[1], r[2]) for r in rows], np.int64)
    return ops, sizes, *(np.array([r[i] for r in rows]) for i in (3, 4, 5, 6))


CASES = _cases()


def _host_results():
    ops, sizes, a, b, v, w = CASES
    out_m1, out_m3 = a.copy(), np.zeros_like(a)
    out_x, out_z, out_s = v.copy(), np.zeros_like(v), np.zeros(len(ops))
    for c in range(len(ops)):
        y = w[c].copy()
        out_s[c] = _host_apply(int(ops[c]), out_m1[c], b[c].copy(), out_m3[c], out_x[c], y, out_z[c], *sizes[c])
    return out_m1, out_m3, out_x, out_z, out_s


HOST_RESULTS = _host_results()


def _run(queue, kernel, workdiv):
    ops, sizes, a, b, v, w = CASES
    outs = [upload(queue, np.zeros_like(x)) for x in (a, a, v, v, np.zeros(len(ops)))]
    args = [upload(queue, x) for x in (ops, sizes, a, b, v, w)]
    pk.exec(queue, workdiv, kernel, *args, *outs, len(ops))
    return [download(queue, o) for o in outs]


def test_same_bits_as_the_host_in_shared_arrays(queue):
    got = _run(queue, linalg_in_shared, pk.make_workdiv(queue.device, len(CASES[0]), 1))
    for name, g, want in zip(("m1", "m3", "x", "z", "scalar"), got, HOST_RESULTS):
        assert np.array_equal(g.view(np.int64), want.view(np.int64)), name


def test_same_bits_as_the_host_in_local_arrays(queue):
    cases = len(CASES[0])
    got = _run(queue, linalg_in_local, pk.make_workdiv(queue.device, -(-cases // 32), 32))
    for name, g, want in zip(("m1", "m3", "x", "z", "scalar"), got, HOST_RESULTS):
        assert np.array_equal(g.view(np.int64), want.view(np.int64)), name


# ----------------------------------------------------------------------------- the host's results against numpy


def _by_op(name):
    ops, sizes, a, b, v, w = CASES
    for c in np.flatnonzero(ops == OPS.index(name)):
        n, k = sizes[c]
        yield c, n, k, a[c], b[c], v[c], w[c]


def _close(got, want, scale=None):
    scale = np.max(np.abs(want)) if scale is None else scale
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(scale, 1e-300))


def test_products_match_numpy():
    m1, m3, x, z, s = HOST_RESULTS
    for c, n, k, a, b, _, _ in _by_op("matmul"):
        _close(m3[c, :n, :n], a[:n, :k] @ b[:k, :n])
    for c, n, k, a, _, v, _ in _by_op("matvec"):
        _close(z[c, :n], a[:n, :k] @ v[:k])
    for c, n, k, a, b, _, _ in _by_op("similarity"):
        _close(m3[c, :n, :n], a[:n, :k] @ b[:k, :k] @ a[:n, :k].T)
    for c, n, k, a, _, _, _ in _by_op("transpose"):
        assert np.array_equal(m3[c, :k, :n], a[:n, :k].T)
    for c, n, k, a, _, _, _ in _by_op("copy"):
        assert np.array_equal(m3[c, :n, :k], a[:n, :k])


def test_vectors_match_numpy():
    _, _, _, z, s = HOST_RESULTS
    for c, n, _, _, _, v, w in _by_op("dot"):
        _close(s[c], np.dot(v[:n], w[:n]), np.abs(v[:n]) @ np.abs(w[:n]))
    for c, n, _, _, _, v, _ in _by_op("norm"):
        _close(s[c], np.linalg.norm(v[:n]))
    for c, _, _, _, _, v, w in _by_op("cross"):
        _close(z[c, :3], np.cross(v[:3], w[:3]))
    for c, _, _, _, _, v, w in _by_op("cross2d"):
        _close(s[c], v[0] * w[1] - v[1] * w[0])


def _residual(a, x, v):
    """``a @ x - v`` with the products rounded and their sum exact (math.fsum): the same bits on
    every CPU (numpy's ``@`` is OpenBLAS's kernel for the machine, whose order of additions and
    FMAs differ between an AVX2 and an AVX-512 CPU)."""
    return np.array([math.fsum([*(a[i, j] * x[j] for j in range(len(x))), -v[i]]) for i in range(len(v))])


def _assert_backward_stable(a, x, v):
    """``x`` solves ``a x = v`` as a backward-stable solve does: each residual within
    ``(3n+1) eps (|a| |x| + |v|)`` of zero (modelled on Higham, Accuracy and Stability of Numerical
    Algorithms, 10.1, whose Cholesky bound has ``|R^T| |R|`` where this has ``|a|``: a heuristic
    bound, not the theorem's; a bound relative to ``|v|`` alone is not one: with a diagonal
    spread over 8 orders of magnitude, a row's ``|a| |x|`` reaches 1.2e7 where ``|v|`` is below 1,
    and case 171's exact residual, 1.3e-9, is past ``1e-9 |v|`` on every CPU; the worst case is at
    0.13 of this bound)."""
    n = len(x)
    bound = (3 * n + 1) * np.finfo(np.float64).eps * (np.abs(a) @ np.abs(x) + np.abs(v))
    r = _residual(a, x, v)
    assert np.all(np.abs(r) <= bound), (r, bound)


def test_factorisations_match_numpy():
    m1, m3, x, _, _ = HOST_RESULTS
    for c, n, _, a, _, _, _ in _by_op("cholesky"):
        low = np.tril(m1[c, :n, :n])
        np.testing.assert_allclose(low, np.linalg.cholesky(a[:n, :n]), rtol=1e-10, atol=0)
        assert np.array_equal(np.triu(m1[c, :n, :n], 1), np.triu(a[:n, :n], 1))  # the upper triangle kept
    for c, n, _, a, _, _, _ in _by_op("ldlt"):
        low = np.tril(m1[c, :n, :n], -1) + np.eye(n)
        np.testing.assert_allclose(low * np.diag(m1[c, :n, :n]) @ low.T, a[:n, :n], rtol=1e-10, atol=0)
    for name in ("cholesky_solve", "ldlt_solve"):
        for c, n, _, a, _, v, _ in _by_op(name):
            want = np.linalg.solve(a[:n, :n], v[:n])
            np.testing.assert_allclose(x[c, :n], want, rtol=1e-6, atol=0)  # condition numbers up to 1e16
            _assert_backward_stable(a[:n, :n], x[c, :n], v[:n])
    for c, n, _, a, _, _, _ in _by_op("cholesky_inverse"):
        inv = m3[c, :n, :n]
        assert np.array_equal(inv, inv.T)
        assert np.array_equal(m1[c], a)  # m unchanged
        d = 1 / np.sqrt(np.diag(a[:n, :n]))  # compare in the scaled matrix, as the condition asks
        np.testing.assert_allclose(
            inv / np.outer(d, d), np.linalg.inv(a[:n, :n]) / np.outer(d, d), rtol=1e-9, atol=1e-9
        )


def test_inverse_and_determinant_match_numpy():
    m1, m3, _, _, s = HOST_RESULTS
    for c, n, _, a, _, _, _ in _by_op("inverse"):
        _close(m3[c, :n, :n], np.linalg.inv(a[:n, :n]), np.abs(np.linalg.inv(a[:n, :n])).max() * 1e3)
        np.testing.assert_allclose(s[c], np.linalg.det(a[:n, :n]), rtol=1e-10)
    for c, n, _, a, _, _, _ in _by_op("determinant"):
        np.testing.assert_allclose(s[c], np.linalg.det(a[:n, :n]), rtol=1e-10)


def test_singular_matrix():
    """inverse and determinant of a singular matrix give 0 (no division by a zero pivot)."""
    a = np.ones((3, 3))
    assert HOST["determinant"](None, a.copy(), 3) == 0.0
    assert HOST["inverse"](None, a.copy(), np.zeros((3, 3)), 3) == 0.0
    assert math.isnan(HOST["norm"](None, np.array([math.nan]), 1))
