"""Counter-based random numbers: Philox4x32-10 (Random123; alpaka's default engine) in kernels
and on the host.

In kernels, ``eng = acc.rand_engine(seed, subsequence)`` makes a per-thread engine and
``acc.rand_u32/rand_uniform/rand_normal(eng, ...)`` draw from it. The device functions below do
it, written in the kernel language, so every backend compiles the same integer arithmetic and
draws the same bits. An engine is a ``uint32[16]``: words 0-3 the counter (of the block after the
current one, on every backend: the CPU backends' block computed ahead is that block), 4-5 the key,
6-9 the current block (on the CPU backends its unused outputs, the next draw first), 10 how many of
its outputs were used, 11-15 the block computed ahead (:func:`_refill`; a kernel's own store to an
engine word, or a store of a device function the kernel passed the engine to, sets word 11 to 1,
dropping it: portable/compiler/_assignments.py). Stores to the counter and the key (words 0-5, with
word 10 set to 4 to drop the rest of the current block) give the same draws on every backend.
``seed`` is the key (low word first), ``subsequence`` the counter's high half, and the counter's
low half counts blocks: draw ``4 m + j`` is word ``j`` of ``philox4x32_10((m_lo, m_hi, sub_lo,
sub_hi), (seed_lo, seed_hi))``.

On the host, ``philox4x32_10(counter, key)`` reproduces Random123's known-answer vectors and
``stream(seed, subsequence, n)`` gives exactly the first ``n`` values ``acc.rand_u32`` yields for
that engine, on every backend; ``uniform`` and ``normal`` follow ``acc.rand_uniform`` and
``acc.rand_normal`` (uniforms bit for bit; normals up to the last bits of each device's
``log``/``cos``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._errors import ArgumentError, ArgumentTypeError
from .compiler import device_function
from .compiler._library import RAND_AHEAD_WORD, RAND_STATE_WORDS, register

__all__ = ["normal", "philox4x32_10", "stream", "uniform"]

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_USED = np.uint32(4)
_F32_ULP = np.float32(2.0**-24)
_F64_ULP = 2.0**-53
_TWO_PI = 2.0 * math.pi


def _words(value: Any, n: int, what: str) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "ui" or a.shape[-1:] != (n,):
        raise ArgumentError(
            f"philox4x32_10: {what} must be {n} unsigned 32-bit integers (shape (..., {n})), "
            f"got dtype {a.dtype} and shape {a.shape}"
        )
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise ArgumentError(f"philox4x32_10: every {what} word must be in [0, 2**32)")
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
        raise ArgumentTypeError(f"{what} must be an integer, got {type(value).__name__}")
    if not 0 <= int(value) < 2**64:
        raise ArgumentError(f"{what} must be in [0, 2**64) (the kernels take it as uint64), got {value}")
    return int(value)


def _check_count(n: Any, what: str) -> int:
    """``n`` draws: a non-negative integer (TypeError for 2.7 rather than truncating it)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(f"{what}: n is a count of draws, an integer; got {type(n).__name__} {n!r}")
    if n < 0:
        raise ArgumentError(f"{what}: n must be >= 0, got {n}")
    return int(n)


def stream(seed: int, subsequence: int, n: int) -> np.ndarray:
    """The first ``n`` draws of ``acc.rand_u32`` from ``acc.rand_engine(seed, subsequence)``."""
    seed = _check_u64(seed, "seed")
    subsequence = _check_u64(subsequence, "subsequence")
    n = _check_count(n, "stream")
    blocks = np.arange((n + 3) // 4, dtype=np.uint64)
    counter = np.zeros((blocks.size, 4), np.uint64)
    counter[:, 0], counter[:, 1] = blocks & _LO, blocks >> _S32
    counter[:, 2], counter[:, 3] = subsequence & 0xFFFFFFFF, subsequence >> 32
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64)
    return philox4x32_10(counter, key).reshape(-1)[:n]


def uniform(seed: int, subsequence: int, n: int, dtype: Any = np.float64) -> np.ndarray:
    """The first ``n`` values of ``acc.rand_uniform(engine, dtype)`` (in [0, 1))."""
    n = _check_count(n, "uniform")
    dt = np.dtype(dtype)
    if dt == np.float32:
        return (stream(seed, subsequence, n) >> 8).astype(np.float32) * np.float32(2.0**-24)
    if dt != np.float64:
        raise ArgumentTypeError(f"uniform: dtype must be float32 or float64, got {dt}")
    u = stream(seed, subsequence, 2 * n).reshape(n, 2)
    return ((u[:, 0] >> 5).astype(np.float64) * 67108864.0 + (u[:, 1] >> 6)) * 2.0**-53


def normal(seed: int, subsequence: int, n: int, dtype: Any = np.float64) -> np.ndarray:
    """The first ``n`` values of ``acc.rand_normal(engine, dtype)`` (Box-Muller, cosine branch)."""
    n = _check_count(n, "normal")
    dt = np.dtype(dtype)
    u = uniform(seed, subsequence, 2 * n, dt).reshape(n, 2)
    one, two, tau = dt.type(1.0), dt.type(-2.0), dt.type(2.0 * math.pi)
    return (np.sqrt(two * np.log(one - u[:, 0])) * np.cos(tau * u[:, 1])).astype(dt)


# ----------------------------------------------------------------------------- in kernels
@device_function
def init(e, seed, subsequence):
    e[0] = 0
    e[1] = 0
    e[2] = np.uint32(subsequence & _LO)
    e[3] = np.uint32(subsequence >> _S32)
    e[4] = np.uint32(seed & _LO)
    e[5] = np.uint32(seed >> _S32)
    e[10] = _USED
    e[11] = 0


@device_function
def _rounds(e, step):
    """The four outputs (ten rounds) of the block ``step`` (0 or 1) after the counter's; the
    counter stays."""
    lo = np.uint64(e[0]) + step
    c0 = lo & _LO
    c1 = (np.uint64(e[1]) + (lo >> _S32)) & _LO
    c2 = np.uint64(e[2])
    c3 = np.uint64(e[3])
    k0 = np.uint64(e[4])
    k1 = np.uint64(e[5])
    for r in range(10):
        if r > 0:
            k0 = (k0 + _W0) & _LO
            k1 = (k1 + _W1) & _LO
        p0 = c0 * _M0
        p1 = c2 * _M1
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n2 = (p0 >> _S32) ^ c3 ^ k1
        c1 = p1 & _LO
        c3 = p0 & _LO
        c0 = n0
        c2 = n2
    return np.uint32(c0), np.uint32(c1), np.uint32(c2), np.uint32(c3)


@device_function
def _advance(e):
    """The counter moves on to its next block (the carry into word 1 at 2**32 blocks)."""
    lo = np.uint64(e[0]) + _ONE
    e[0] = np.uint32(lo & _LO)
    e[1] = np.uint32((np.uint64(e[1]) + (lo >> _S32)) & _LO)  # (the carry, without a branch)


@device_function
def _block(e):
    """The counter's four outputs; the counter then moves on to its next block."""
    a, b, c, d = _rounds(e, _ZERO)
    _advance(e)
    return a, b, c, d


@device_function
def _refill(e):
    """Words 6-9 the next four draws, on a target running each thread as scalar code. From an
    engine's second block on, the block after them is computed one refill ahead into words 12-15
    (word 11: 0 before the first block, 1 after it, 2 while one is ahead): a CPU core overlaps
    its ten dependent rounds with the draws before it instead of waiting for them. An engine
    drawing four values or fewer computes one block. The counter names the block after words
    6-9 on every backend (the one computed ahead, while there is one), so a store to the
    engine's words, which drops that block, makes the next refill compute the block its words
    then name, as on the other backends."""
    ahead = e[11]
    if ahead == 2:
        e[6] = e[12]
        e[7] = e[13]
        e[8] = e[14]
        e[9] = e[15]
    else:
        e[6], e[7], e[8], e[9] = _rounds(e, _ZERO)
    if ahead > 0:
        e[12], e[13], e[14], e[15] = _rounds(e, _ONE)  # (the counter moves after: no wait on it)
        e[11] = np.uint32(2)
    else:
        e[11] = np.uint32(1)
    _advance(e)


@device_function
def next_u32(acc, e):
    """The engine's next uint32.

    Words are addressed by constant indices only: the CPU backends then keep the whole engine in
    scalars (portable/compiler/_local_arrays.py) and a GPU in registers (a run-time index of a
    local array puts it in slow thread-local memory). Scalar code (the CPU backends) computes a
    block ahead and moves the outputs down a word a draw; lanes in lockstep (OpenCL, CUDA, HIP)
    compute each block when it is needed and select the word, which keeps fewer words live in
    each lane (a block ahead made Intel's CPU OpenCL 2.1x slower where it ran 16 lanes a core)."""
    used = e[10]
    r = np.uint32(0)
    if acc.requires_single_thread_per_block:
        if used >= _USED:
            _refill(e)
            used = np.uint32(0)
        e[10] = np.uint32(used + _ONE)
        r = e[6]
        e[6] = e[7]
        e[7] = e[8]
        e[8] = e[9]
    else:
        if used >= _USED:
            e[6], e[7], e[8], e[9] = _block(e)
            used = np.uint32(0)
        e[10] = np.uint32(used + _ONE)
        r = e[9]
        if used == 0:
            r = e[6]
        elif used == 1:
            r = e[7]
        elif used == 2:
            r = e[8]
    return r


@device_function
def uniform_f32(acc, e):
    """[0, 1) on the float32 grid of 2**-24: the draw's top 24 bits."""
    return np.float32(next_u32(acc, e) >> 8) * _F32_ULP


@device_function
def next_pair(acc, e):
    """The engine's next two uint32. Scalar code refills once at most: one inlined copy of the
    rounds where two calls of :func:`next_u32` make two (numba's compile time grows with them)."""
    a = np.uint32(0)
    b = np.uint32(0)
    if acc.requires_single_thread_per_block:
        used = e[10]
        a = e[6]
        b = e[7]
        if used >= 3:  # fewer than two left
            _refill(e)
            if used == 3:  # ``a`` was the old block's last word
                b = e[6]
                e[6] = e[7]
                e[7] = e[8]
                e[8] = e[9]
                e[10] = np.uint32(1)
            else:
                a = e[6]
                b = e[7]
                e[6] = e[8]
                e[7] = e[9]
                e[10] = np.uint32(2)
        else:
            e[6] = e[8]
            e[7] = e[9]
            e[10] = np.uint32(used + np.uint32(2))
    else:
        a = next_u32(acc, e)
        b = next_u32(acc, e)
    return a, b


@device_function
def uniform_f64(acc, e):
    """[0, 1) on the float64 grid of 2**-53: 27 bits of one draw, 26 of the next."""
    a, b = next_pair(acc, e)
    return (np.float64(a >> 5) * 67108864.0 + np.float64(b >> 6)) * _F64_ULP


@device_function
def normal_f32(acc, e):
    """A standard normal draw (Box-Muller's cosine branch of two uniforms; 1 - u keeps log finite)."""
    a, b = next_pair(acc, e)
    u1 = np.float32(1.0) - np.float32(a >> 8) * _F32_ULP
    u2 = np.float32(b >> 8) * _F32_ULP
    return np.float32(math.sqrt(np.float32(-2.0) * math.log(u1)) * math.cos(np.float32(_TWO_PI) * u2))


@device_function
def normal_f64(acc, e):
    """:func:`normal_f32`'s recipe on two float64 uniforms."""
    u1 = 0.0
    u2 = 0.0
    for j in range(2):  # one call of uniform_f64 (one inlined copy of the rounds), not two
        u = uniform_f64(acc, e)
        if j == 0:
            u1 = 1.0 - u
        else:
            u2 = u
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


assert RAND_STATE_WORDS == 16 and RAND_AHEAD_WORD == 11  # the layout above
for _name, _fn in [
    ("init", init),
    ("next_u32", next_u32),
    ("uniform_f32", uniform_f32),
    ("uniform_f64", uniform_f64),
    ("normal_f32", normal_f32),
    ("normal_f64", normal_f64),
]:
    register("rand." + _name, _fn)
