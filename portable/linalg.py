"""Small dense linear algebra per thread: device functions over 1D and 2D arrays, written in
alpyka's kernel language, for the matrices of a track fit (sizes up to 6x6 and beyond).

Every function takes ``acc`` first and the sizes last (``pk.linalg.cholesky_solve(acc, m, v, n)``);
the arrays are a kernel's per-thread arrays (``acc.local_array``), shared arrays or Buffers,
indexed ``m[row, col]`` and ``v[i]``. Sizes are run-time values: a kernel that passes constants
gets loops of constant length, which the GPU compilers unroll so that a per-thread array indexed
only by them stays in registers.

- products: ``matmul(acc, a, b, out, n, k, m)`` (``out = a @ b``, ``a`` n x k, ``b`` k x m),
  ``matvec(acc, a, v, out, n, m)``, ``similarity(acc, j, c, out, n, m)`` (``out = j @ c @ j.T``,
  ``j`` n x m, ``c`` m x m: the propagation of a covariance), ``transpose(acc, a, out, n, m)``;
- vectors: ``dot(acc, a, b, n)``, ``squared_norm(acc, v, n)``, ``norm(acc, v, n)``,
  ``cross(acc, a, b, out)`` (3-vectors), ``cross2d(acc, a, b)`` (the z of the 2D cross product);
- helpers: ``copy(acc, src, dst, n, m)``, ``set_identity(acc, m, n)``, ``set_zero(acc, m, n, k)``;
- symmetric positive definite systems: ``cholesky(acc, m, n)`` (the lower factor ``L``, in place),
  ``cholesky_solve(acc, m, v, n)`` (``v`` becomes the solution of ``m x = v``; ``m`` its factor),
  ``ldlt(acc, m, n)`` / ``ldlt_solve(acc, m, v, n)`` (the same without square roots: unit lower
  ``L`` below the diagonal, ``D`` on it), ``cholesky_inverse(acc, m, out, n)`` (``out = m^-1``,
  ``m`` unchanged: CMSSW's ``cholesky::invert``);
- general square matrices: ``inverse(acc, m, out, n)`` (Gauss-Jordan with partial pivoting;
  returns the determinant, 0 for a singular matrix) and ``determinant(acc, m, n)`` (LU with
  partial pivoting). Both overwrite ``m``, as LAPACK's factorisations do: ``copy`` it first to
  keep it.

Outputs must not alias inputs (``matmul(acc, a, b, a, ...)`` reads what it already wrote). The
arithmetic is plain ``+ - * /`` and ``sqrt`` in a fixed order, so each function gives the same
bits on every backend (no FMA: docs/kernels.md). Float64 arrays are the intended use; with
float32 arrays intermediate values follow the kernel language's promotion rules.
"""

from __future__ import annotations

import math

from .compiler import device_function

__all__ = [
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "copy",
    "cross",
    "cross2d",
    "determinant",
    "dot",
    "inverse",
    "ldlt",
    "ldlt_solve",
    "matmul",
    "matvec",
    "norm",
    "set_identity",
    "set_zero",
    "similarity",
    "squared_norm",
    "transpose",
]


# ----------------------------------------------------------------------------- helpers and products


@device_function
def copy(acc, src, dst, n, m):
    """``dst[:n, :m] = src[:n, :m]``."""
    for i in range(n):
        for j in range(m):
            dst[i, j] = src[i, j]


@device_function
def set_identity(acc, m, n):
    """``m[:n, :n]`` = the identity."""
    for i in range(n):
        for j in range(n):
            m[i, j] = 1 if i == j else 0


@device_function
def set_zero(acc, m, n, k):
    """``m[:n, :k] = 0``."""
    for i in range(n):
        for j in range(k):
            m[i, j] = 0


@device_function
def matmul(acc, a, b, out, n, k, m):
    """``out[:n, :m] = a[:n, :k] @ b[:k, :m]`` (sums in order of the inner index)."""
    for i in range(n):
        for j in range(m):
            s = a[i, 0] * b[0, j]
            for p in range(1, k):
                s += a[i, p] * b[p, j]
            out[i, j] = s


@device_function
def matvec(acc, a, v, out, n, m):
    """``out[:n] = a[:n, :m] @ v[:m]``."""
    for i in range(n):
        s = a[i, 0] * v[0]
        for p in range(1, m):
            s += a[i, p] * v[p]
        out[i] = s


@device_function
def similarity(acc, j, c, out, n, m):
    """``out[:n, :n] = j[:n, :m] @ c[:m, :m] @ j[:n, :m].T``: each entry as ``sum_a j[r, a] *
    (sum_b c[a, b] * j[s, b])``, no scratch array."""
    for r in range(n):
        for s in range(n):
            t = c[0, 0] * j[s, 0]
            for b in range(1, m):
                t += c[0, b] * j[s, b]
            total = j[r, 0] * t
            for a in range(1, m):
                t = c[a, 0] * j[s, 0]
                for b in range(1, m):
                    t += c[a, b] * j[s, b]
                total += j[r, a] * t
            out[r, s] = total


@device_function
def transpose(acc, a, out, n, m):
    """``out[:m, :n] = a[:n, :m].T``."""
    for i in range(n):
        for j in range(m):
            out[j, i] = a[i, j]


# ----------------------------------------------------------------------------- vectors


@device_function
def dot(acc, a, b, n):
    """``a[:n] . b[:n]``."""
    s = a[0] * b[0]
    for i in range(1, n):
        s += a[i] * b[i]
    return s


@device_function
def squared_norm(acc, v, n):
    """``v[:n] . v[:n]``."""
    s = v[0] * v[0]
    for i in range(1, n):
        s += v[i] * v[i]
    return s


@device_function
def norm(acc, v, n):
    """The Euclidean norm of ``v[:n]``."""
    return math.sqrt(squared_norm(acc, v, n))


@device_function
def cross(acc, a, b, out):
    """``out[:3] = a[:3] x b[:3]``."""
    out[0] = a[1] * b[2] - a[2] * b[1]
    out[1] = a[2] * b[0] - a[0] * b[2]
    out[2] = a[0] * b[1] - a[1] * b[0]


@device_function
def cross2d(acc, a, b):
    """``a[0] * b[1] - a[1] * b[0]`` (CMSSW's ``cross2D``)."""
    return a[0] * b[1] - a[1] * b[0]


# ----------------------------------------------------------------------------- symmetric positive definite


@device_function
def cholesky(acc, m, n):
    """``m[:n, :n]`` (symmetric positive definite; its lower triangle is read) becomes its
    Cholesky factor ``L`` (``m = L @ L.T``) in the lower triangle, in place; the strict upper
    triangle is left as it was. A matrix that is not positive definite gives NaN."""
    for j in range(n):
        d = m[j, j]
        for k in range(j):
            d -= m[j, k] * m[j, k]
        d = math.sqrt(d)
        m[j, j] = d
        for i in range(j + 1, n):
            s = m[i, j]
            for k in range(j):
                s -= m[i, k] * m[j, k]
            m[i, j] = s / d


@device_function
def cholesky_solve(acc, m, v, n):
    """Solve ``m x = v`` (``m`` symmetric positive definite): ``v[:n]`` becomes ``x`` and ``m``
    its Cholesky factor (:func:`cholesky`)."""
    cholesky(acc, m, n)
    for i in range(n):  # L y = v
        s = v[i]
        for k in range(i):
            s -= m[i, k] * v[k]
        v[i] = s / m[i, i]
    for i in range(n - 1, -1, -1):  # L.T x = y
        s = v[i]
        for k in range(i + 1, n):
            s -= m[k, i] * v[k]
        v[i] = s / m[i, i]


@device_function
def ldlt(acc, m, n):
    """``m[:n, :n]`` (symmetric, lower triangle read) becomes ``L`` (unit lower, below the
    diagonal) and ``D`` (on the diagonal) with ``m = L @ diag(D) @ L.T``, in place, without
    square roots (no pivoting: for positive definite or quasi-definite matrices)."""
    for j in range(n):
        d = m[j, j]
        for k in range(j):
            d -= m[j, k] * m[j, k] * m[k, k]
        m[j, j] = d
        for i in range(j + 1, n):
            s = m[i, j]
            for k in range(j):
                s -= m[i, k] * m[j, k] * m[k, k]
            m[i, j] = s / d


@device_function
def ldlt_solve(acc, m, v, n):
    """Solve ``m x = v`` by :func:`ldlt`: ``v[:n]`` becomes ``x``, ``m`` its factors."""
    ldlt(acc, m, n)
    for i in range(n):  # L y = v
        s = v[i]
        for k in range(i):
            s -= m[i, k] * v[k]
        v[i] = s
    for i in range(n):  # D z = y
        v[i] = v[i] / m[i, i]
    for i in range(n - 1, -1, -1):  # L.T x = z
        s = v[i]
        for k in range(i + 1, n):
            s -= m[k, i] * v[k]
        v[i] = s


@device_function
def cholesky_inverse(acc, m, out, n):
    """``out[:n, :n]`` = the inverse of the symmetric positive definite ``m[:n, :n]`` (its lower
    triangle is read; ``m`` is unchanged): ``L``, then ``L^-1`` and ``L^-T L^-1``, all inside
    ``out`` (CMSSW's ``math::cholesky::invert``)."""
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = m[i, j]
    cholesky(acc, out, n)
    for j in range(n):  # L^-1, column by column, in place
        out[j, j] = 1 / out[j, j]
        for i in range(j + 1, n):
            s = out[i, j] * out[j, j]
            for k in range(j + 1, i):
                s += out[i, k] * out[k, j]
            out[i, j] = -s / out[i, i]
    for i in range(n):  # L^-T L^-1 in the lower triangle, row by row: (i, j) reads rows >= i
        for j in range(i + 1):  # and, of row i, only (i, j) and (i, i): the diagonal goes last
            s = out[i, i] * out[i, j]
            for k in range(i + 1, n):
                s += out[k, i] * out[k, j]
            out[i, j] = s
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i]


# ----------------------------------------------------------------------------- general square matrices


@device_function
def inverse(acc, m, out, n):
    """``out[:n, :n]`` = the inverse of ``m[:n, :n]`` by Gauss-Jordan elimination with partial
    pivoting; ``m`` is overwritten. Returns the determinant (0 for a singular matrix, whose
    ``out`` is then undefined)."""
    set_identity(acc, out, n)
    det = 1.0
    for c in range(n):
        p = c
        best = abs(m[c, c])
        for r in range(c + 1, n):
            if abs(m[r, c]) > best:
                best = abs(m[r, c])
                p = r
        if best == 0:
            return 0.0
        if p != c:
            det = -det
            for k in range(n):
                t = m[c, k]
                m[c, k] = m[p, k]
                m[p, k] = t
                t = out[c, k]
                out[c, k] = out[p, k]
                out[p, k] = t
        pivot = m[c, c]
        det *= pivot
        for k in range(n):
            m[c, k] = m[c, k] / pivot
            out[c, k] = out[c, k] / pivot
        for r in range(n):
            if r != c:
                f = m[r, c]
                for k in range(n):
                    m[r, k] -= f * m[c, k]
                    out[r, k] -= f * out[c, k]
    return det


@device_function
def determinant(acc, m, n):
    """The determinant of ``m[:n, :n]`` by LU elimination with partial pivoting; ``m`` is
    overwritten (its upper triangle becomes ``U``)."""
    det = 1.0
    for c in range(n):
        p = c
        best = abs(m[c, c])
        for r in range(c + 1, n):
            if abs(m[r, c]) > best:
                best = abs(m[r, c])
                p = r
        if best == 0:
            return 0.0
        if p != c:
            det = -det
            for k in range(c, n):
                t = m[c, k]
                m[c, k] = m[p, k]
                m[p, k] = t
        det *= m[c, c]
        for r in range(c + 1, n):
            f = m[r, c] / m[c, c]
            for k in range(c, n):
                m[r, k] -= f * m[c, k]
    return det
