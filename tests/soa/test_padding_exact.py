"""SoA padding at sizes that fill the alignment exactly (no padding) and one element either side:
a padding formula that pads a full column by a whole extra alignment unit fails here."""

import numpy as np
import pytest

import soa


@pytest.mark.parametrize("align", [16, 64, 128, 256])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("units", [1, 2, 7])
def test_padding_at_exact_multiples_of_the_alignment(align, dtype, units):
    class L(soa.Layout, alignment=align):
        a = soa.column(dtype)
        v = soa.vector(dtype, 3)
        s = soa.scalar(dtype)

    item = np.dtype(dtype).itemsize
    per_unit = align // item  # elements that fill one alignment unit exactly
    n = units * per_unit
    ps = L.placements(n)
    assert ps["a"].size == n * item == units * align
    assert ps["a"].padding == 0 and ps["a"].pitch == units * align
    assert ps["v"].padding == 0 and ps["v"].pitch == units * align and ps["v"].nbytes == 3 * units * align
    assert ps["s"].padding == align - item and ps["s"].pitch == align
    assert L.byte_size(n) == 4 * units * align + align
    assert L.padded_size(n, dtype) == n
    # one element fewer: padding is exactly one element; one more: a whole unit less one element
    assert L.placements(n - 1)["a"].padding == item and L.placements(n - 1)["a"].pitch == units * align
    assert L.placements(n + 1)["a"].padding == align - item
    assert L.placements(n + 1)["a"].pitch == (units + 1) * align
    assert L.padded_size(n + 1, dtype) == n + per_unit
