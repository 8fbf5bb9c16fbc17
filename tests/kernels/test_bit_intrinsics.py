"""The bit intrinsics ``acc.popcount``, ``acc.clz``, ``acc.ffs`` and ``acc.brev`` (declared in
portable/compiler/operations.py) give numpy's bits of the same answers on every backend, for every
32- and 64-bit integer type and the edge values (0, -1, MIN, MAX, every single bit), folded
constants included; narrower types, bools and floats are refused with the fix."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError

TYPES = [np.int32, np.uint32, np.int64, np.uint64]


@pk.kernel
def bit_intrinsics(acc, counts, rev, x, n):
    for i in acc.uniform_elements(n):
        v = x[i]
        counts[i, 0] = acc.popcount(v)
        counts[i, 1] = acc.clz(v)
        counts[i, 2] = acc.ffs(v)
        rev[i] = acc.brev(v)


@pk.kernel
def folded_intrinsics(acc, out):
    if acc.once_per_grid():
        out[0] = acc.popcount(np.uint32(0xF0F0))
        out[1] = acc.clz(np.int64(1))
        out[2] = acc.ffs(np.int32(-(2**31)))
        out[3] = acc.brev(np.uint32(1))
        out[4] = acc.popcount(-1)  # an int literal is int64: 64 bits
        out[5] = acc.clz(np.uint32(0))


def reference(x):
    """popcount, clz, ffs (int32 each) and brev (x's type) of ``x``, from its bits in numpy."""
    width = x.dtype.itemsize * 8
    big = x.astype(x.dtype.newbyteorder(">"))  # most significant byte first
    bits = np.unpackbits(big.view(np.uint8)).reshape(len(x), width)  # most significant bit first
    lsb = bits[:, ::-1]
    nonzero = bits.any(axis=1)
    popcount = bits.sum(axis=1)
    clz = np.where(nonzero, bits.argmax(axis=1), width)
    ffs = np.where(nonzero, lsb.argmax(axis=1) + 1, 0)
    brev = np.packbits(lsb, axis=1).reshape(-1).view(big.dtype).astype(x.dtype)
    return np.stack([popcount, clz, ffs], axis=1).astype(np.int32), brev


def edge_values(dtype, rng):
    info = np.iinfo(dtype)
    width = info.bits
    singles = [np.array(1 << k, np.uint64).astype(dtype) for k in range(width)]  # wraps at the sign bit
    fixed = np.array([0, info.max, info.min, info.min + 1, info.max - 1], dtype=object)
    fixed = np.array([int(v) for v in fixed] + ([-1, -2] if info.min < 0 else []), dtype=dtype)
    random = rng.integers(0, 2**63, 200, dtype=np.uint64).astype(dtype) * dtype(3)  # wraps: every bit
    return np.concatenate([fixed, np.array(singles, dtype), random])


@pytest.mark.parametrize("dtype", TYPES, ids=lambda t: np.dtype(t).name)
def test_bit_intrinsics_match_numpy(device, queue, dtype):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    x = edge_values(dtype, np.random.default_rng(seed))
    n = len(x)
    counts, rev = upload(queue, np.zeros((n, 3), np.int32)), upload(queue, np.zeros(n, dtype))
    pk.exec(queue, pk.make_workdiv(device, 4, 32), bit_intrinsics, counts, rev, upload(queue, x), n)
    want_counts, want_rev = reference(x)
    np.testing.assert_array_equal(download(queue, counts), want_counts, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(download(queue, rev), want_rev, err_msg=f"seed={seed}")


def test_bit_intrinsics_of_constants_fold_to_the_same_bits(device, queue):
    out = upload(queue, np.zeros(6, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 1, 1), folded_intrinsics, out)
    assert download(queue, out).tolist() == [8, 63, 32, 2**31, 64, 32]


@pk.kernel
def narrow_popcount(acc, out, x):
    out[0] = acc.popcount(x[0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.bool_, np.float32], ids=lambda t: np.dtype(t).name)
def test_narrow_types_bools_and_floats_are_refused_with_the_fix(device, queue, dtype):
    out, x = upload(queue, np.zeros(1, np.int32)), upload(queue, np.zeros(1, dtype))
    with pytest.raises(KernelSyntaxError, match="takes a 32- or 64-bit integer") as err:
        pk.exec(queue, pk.make_workdiv(device, 1, 1), narrow_popcount, out, x)
    if np.dtype(dtype).kind in "iu":
        bits = np.dtype(dtype).itemsize * 8
        assert f"acc.popcount(np.uint32(np.uint{bits}(x)))" in str(err.value) or "np.uint32(x)" in str(err.value)
