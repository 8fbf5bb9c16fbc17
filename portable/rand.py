"""Counter-based random numbers on the host: the twin of the kernels' ``acc.rand_*``.

``philox4x32_10(counter, key)`` is Random123's Philox4x32-10 (it reproduces the published
known-answer vectors); ``stream(seed, subsequence, n)`` gives exactly the first ``n`` values
``acc.rand_u32`` yields for an engine made by ``acc.rand_engine(seed, subsequence)``, on every
backend. ``uniform`` and ``normal`` follow ``acc.rand_uniform`` and ``acc.rand_normal``
(uniforms bit for bit; normals up to the last bits of each device's ``log``/``cos``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["normal", "philox4x32_10", "stream", "uniform"]

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def _words(value: Any, n: int, what: str) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "ui" or a.shape[-1:] != (n,):
        raise ValueError(f"philox4x32_10: {what} must be {n} unsigned 32-bit integers (shape (..., {n})), "
                         f"got dtype {a.dtype} and shape {a.shape}")
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise ValueError(f"philox4x32_10: every {what} word must be in [0, 2**32)")
    return a.astype(np.uint64)


def philox4x32_10(counter: Any, key: Any) -> np.ndarray:
    """Philox4x32-10 of ``counter`` (4 uint32, or an array of shape (..., 4)) under ``key``
    (2 uint32, (..., 2)); uint32 of the counter's shape."""
    c = _words(counter, 4, "counter")
    k = _words(key, 2, "key")
    c0, c1, c2, c3 = (c[..., i] for i in range(4))
    k0, k1 = k[..., 0], k[..., 1]
    with np.errstate(over="ignore"):
        for r in range(10):
            if r:
                k0, k1 = (k0 + _W0) & _LO, (k1 + _W1) & _LO
            p0, p1 = c0 * _M0, c2 * _M1
            c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _LO, (p0 >> _S32) ^ c3 ^ k1, p0 & _LO
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1).astype(np.uint32)


def _check_u64(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    if not 0 <= int(value) < 2**64:
        raise ValueError(f"{what} must be in [0, 2**64) (the kernels take it as uint64), got {value}")
    return int(value)


def stream(seed: int, subsequence: int, n: int) -> np.ndarray:
    """The first ``n`` draws of ``acc.rand_u32`` from ``acc.rand_engine(seed, subsequence)``."""
    seed = _check_u64(seed, "seed")
    subsequence = _check_u64(subsequence, "subsequence")
    n = int(n)
    if n < 0:
        raise ValueError(f"stream: n must be >= 0, got {n}")
    blocks = np.arange((n + 3) // 4, dtype=np.uint64)
    counter = np.zeros((blocks.size, 4), np.uint64)
    counter[:, 0], counter[:, 1] = blocks & _LO, blocks >> _S32
    counter[:, 2], counter[:, 3] = subsequence & 0xFFFFFFFF, subsequence >> 32
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64)
    return philox4x32_10(counter, key).reshape(-1)[:n]


def uniform(seed: int, subsequence: int, n: int, dtype: Any = np.float64) -> np.ndarray:
    """The first ``n`` values of ``acc.rand_uniform(engine, dtype)`` (in [0, 1))."""
    dt = np.dtype(dtype)
    if dt == np.float32:
        return (stream(seed, subsequence, n) >> 8).astype(np.float32) * np.float32(2.0**-24)
    if dt != np.float64:
        raise TypeError(f"uniform: dtype must be float32 or float64, got {dt}")
    u = stream(seed, subsequence, 2 * n).reshape(n, 2)
    return ((u[:, 0] >> 5).astype(np.float64) * 67108864.0 + (u[:, 1] >> 6)) * 2.0**-53


def normal(seed: int, subsequence: int, n: int, dtype: Any = np.float64) -> np.ndarray:
    """The first ``n`` values of ``acc.rand_normal(engine, dtype)`` (Box-Muller, cosine branch)."""
    dt = np.dtype(dtype)
    u = uniform(seed, subsequence, 2 * n, dt).reshape(n, 2)
    one, two, tau = dt.type(1.0), dt.type(-2.0), dt.type(2.0 * math.pi)
    return (np.sqrt(two * np.log(one - u[:, 0])) * np.cos(tau * u[:, 1])).astype(dt)
