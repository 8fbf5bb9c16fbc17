"""Philox4x32-10 (Random123; alpaka's default engine) written in the kernel language, so every
backend compiles the same integer arithmetic and draws the same bits.

An engine is a per-thread ``uint32[12]`` (``acc.rand_engine``): words 0-3 the counter, 4-5 the
key, 6-9 the last block of four outputs, 10 how many of them were used. ``seed`` is the key
(low word first), ``subsequence`` the counter's high half, and the counter's low half counts
the blocks: draw ``4 m + j`` of a stream is word ``j`` of
``philox4x32_10((m_lo, m_hi, sub_lo, sub_hi), (seed_lo, seed_hi))``. :mod:`portable.rand` is the
host twin.
"""

from __future__ import annotations

import math

import numpy as np

from ._kernel import device_function

#: uint32 words of an engine's state
STATE_WORDS = 12

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # the round multipliers
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)  # the key increments (Weyl sequence)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
_USED = np.uint32(4)
_F32_ULP = np.float32(2.0**-24)
_F64_ULP = 2.0**-53
_TWO_PI = 2.0 * math.pi


@device_function
def init(e, seed, subsequence):
    e[0] = 0
    e[1] = 0
    e[2] = np.uint32(subsequence & _LO)
    e[3] = np.uint32(subsequence >> _S32)
    e[4] = np.uint32(seed & _LO)
    e[5] = np.uint32(seed >> _S32)
    e[10] = _USED


@device_function
def _block(e):
    """Ten rounds over the counter; the four outputs go to words 6-9."""
    c0 = np.uint64(e[0])
    c1 = np.uint64(e[1])
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
    e[6] = np.uint32(c0)
    e[7] = np.uint32(c1)
    e[8] = np.uint32(c2)
    e[9] = np.uint32(c3)


@device_function
def next_u32(e):
    """The engine's next uint32 (a new block of four every fourth draw)."""
    used = e[10]
    if used >= _USED:
        _block(e)
        lo = np.uint64(e[0]) + _ONE
        e[0] = np.uint32(lo & _LO)
        if lo > _LO:
            e[1] = np.uint32((np.uint64(e[1]) + _ONE) & _LO)
        used = np.uint32(0)
    e[10] = np.uint32(used + _ONE)
    return e[6 + used]


@device_function
def uniform_f32(e):
    """[0, 1) on the float32 grid of 2**-24: the draw's top 24 bits."""
    return np.float32(next_u32(e) >> 8) * _F32_ULP


@device_function
def uniform_f64(e):
    """[0, 1) on the float64 grid of 2**-53: 27 bits of one draw, 26 of the next."""
    a = np.float64(next_u32(e) >> 5)
    b = np.float64(next_u32(e) >> 6)
    return (a * 67108864.0 + b) * _F64_ULP


@device_function
def normal_f32(e):
    """A standard normal draw (Box-Muller's cosine branch of two uniforms; 1 - u keeps log finite)."""
    u1 = np.float32(1.0) - uniform_f32(e)
    u2 = uniform_f32(e)
    return np.float32(math.sqrt(np.float32(-2.0) * math.log(u1)) * math.cos(np.float32(_TWO_PI) * u2))


@device_function
def normal_f64(e):
    u1 = 1.0 - uniform_f64(e)
    u2 = uniform_f64(e)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)
