"""alpyka_testing.numpy_compare, the cupy.testing-like comparison of a kernel with numpy (issue
42 item 5): it passes numpy's answer, and it fails a kernel that differs by one rounding, a sign
of zero, a NaN or an integer, naming the entry and its inputs."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.numpy_compare import (
    ALL_DTYPES,
    TOLERANCES,
    assert_kernel_matches_numpy,
    assert_matches_numpy,
    for_all_dtypes,
)


@pk.kernel
def twice_plus_one(acc, x, out, n):
    for i in acc.uniform_elements(n):
        out[i] = x[i] * 2 + 1


@for_all_dtypes()
def test_a_kernel_matches_numpy_on_every_dtype(queue, dtype):
    x = np.arange(-5, 40).astype(dtype) if np.dtype(dtype).kind != "u" else np.arange(45).astype(dtype)
    got = assert_kernel_matches_numpy(queue, twice_plus_one, lambda x: x * dtype(2) + dtype(1), x)
    assert got.dtype == np.dtype(dtype)


def test_for_all_dtypes_names_every_group():
    mark = for_all_dtypes(no_unsigned=True).mark
    assert mark.args[0] == "dtype"
    assert [np.dtype(d).name for d in mark.args[1]] == ["float32", "float64", "int8", "int16", "int32", "int64"]
    assert len(ALL_DTYPES) == 10


def test_a_kernel_off_by_one_rounding_fails_exact_and_passes_math():
    want = np.array([1.0, 2.0, 3.0], np.float32)
    got = want.copy()
    got[1] = np.nextafter(got[1], np.float32(3))
    with pytest.raises(AssertionError, match=r"1 of 3 differ from numpy \(exact\).*\(1,\), 7, 2.0000002"):
        assert_matches_numpy(got, want, "exact", inputs=[np.array([5, 7, 9])])
    assert_matches_numpy(got, want, "math")


@pytest.mark.parametrize(
    "got, want",
    [([-0.0], [0.0]), ([np.nan], [1.0]), ([1.0], [np.nan])],
    ids=["sign_of_zero", "nan_where_numpy_has_none", "no_nan_where_numpy_has_one"],
)
def test_signs_of_zero_and_nans_count(got, want):
    with pytest.raises(AssertionError):
        assert_matches_numpy(np.array(got), np.array(want))
    assert_matches_numpy(np.array(want), np.array(want))


def test_integers_are_exact_whatever_the_class_and_classes_are_checked():
    with pytest.raises(AssertionError):
        assert_matches_numpy(np.array([2**62 + 1]), np.array([2**62]), "fast_math")
    with pytest.raises(ValueError, match="op must be one of"):
        assert_matches_numpy(np.zeros(1), np.zeros(1), "approximate")
    assert TOLERANCES["exact"].rtol(np.float64) == 0.0
