"""Block shapes and element strides against hand-computed values (CMSSW PyTorchAlpaka rules)."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.inference import Particles
from inference import SoAMetadata
from inference._block import make_block

# (n, float32 elements per padded column, float64 elements per padded column), alignment 128:
# float32: round_up(n, 32); float64: round_up(n, 16)
PADDED = [(1, 32, 16), (10, 32, 16), (32, 32, 32), (33, 64, 48), (100, 128, 112), (1000, 1024, 1008)]


@pytest.mark.parametrize("n,p32,p64", PADDED)
def test_plain_columns(n, p32, p64):
    b = make_block(Particles, n, 0, "f", ["x", "y", "z"])
    assert (b.shape, b.strides) == ((n, 3), (1, p32))
    b = make_block(Particles, n, 0, "f", ["y"])
    assert (b.shape, b.strides) == ((n, 1), (1, p32))
    b = make_block(Particles, n, 0, "w", ["w"])
    assert (b.shape, b.strides, b.dtype) == ((n, 1), (1, p64), np.dtype(np.float64))


@pytest.mark.parametrize("n,p32,p64", PADDED)
def test_vector_columns(n, p32, p64):
    b = make_block(Particles, n, 0, "p", ["p"])
    assert (b.shape, b.strides) == ((n, 3), (1, p32))
    b = make_block(Particles, n, 0, "pq", ["p", "q"])
    assert (b.shape, b.strides) == ((n, 2, 3), (1, 3 * p32, p32))


@pytest.mark.parametrize("n,p32,p64", PADDED)
def test_matrix_columns(n, p32, p64):
    # 2 x 3 matrices, column-major components: (r, c) is component c*2 + r
    b = make_block(Particles, n, 0, "cov", ["cov"])
    assert (b.shape, b.strides) == ((n, 2, 3), (1, p32, 2 * p32))
    b = make_block(Particles, n, 0, "covs", ["cov", "cov2"])
    assert (b.shape, b.strides) == ((n, 2, 2, 3), (1, 6 * p32, p32, 2 * p32))


@pytest.mark.parametrize("n", [1, 10, 33, 100])
def test_scalars_broadcast(n):
    b = make_block(Particles, n, 0, "s", ["n_valid"])
    assert (b.shape, b.strides) == ((n, 1), (0, 32))  # one 128-byte slot = 32 int32
    b = make_block(Particles, n, 0, "ss", ["scale", "shift"])
    assert (b.shape, b.strides) == ((n, 2), (0, 32))


def test_other_alignment_and_offsets():
    class A(soa.Layout, alignment=64):
        a = soa.column(np.float32)
        b = soa.column(np.float32)
        d = soa.column(np.float64)

    # n = 10: float32 columns round up to 16 elements (64 bytes), float64 to 16 elements (128 bytes)
    b = make_block(A, 10, 256, "ab", ["a", "b"])
    assert (b.shape, b.strides, b.offset, b.span) == ((10, 2), (1, 16), 256, (256, 256 + 128))
    d = make_block(A, 10, 256, "d", ["d"])
    assert (d.shape, d.strides, d.offset) == ((10, 1), (1, 16), 256 + 128)
    assert b.batch_multiple == 16 and d.batch_multiple == 8


def test_offsets_follow_the_layout():
    n = 100  # float32 pitch 512 bytes, float64 pitch 896 bytes
    b = make_block(Particles, n, 0, "yz", ["y", "z"])
    assert b.offset == 512 and b.span == (512, 3 * 512)
    c = make_block(Particles, n, 0, "cov2", ["cov2"])
    assert c.offset == 3 * 512 + 6 * 512 + 6 * 512


def test_metadata_blocks_of_a_multi_layout_collection():
    class H(soa.Layout):
        e = soa.column(np.float32)

    coll = pk.PortableCollection({"hits": H, "parts": Particles}, {"hits": 50, "parts": 20}, pk.host())
    meta = SoAMetadata(coll, "parts").append_block("f", "x", "y", "z").append_block("s", "scale")
    assert meta.size == 20 and meta.block_names == ["f", "s"]
    f = meta.block("f")
    assert f.offset == coll.block_offset("parts") and f.shape == (20, 3) and f.strides == (1, 32)
    meta.change_order(["s", "f"])
    assert meta.block_names == ["s", "f"]
    assert f.columns == ("x", "y", "z") and f.dtype == np.float32
