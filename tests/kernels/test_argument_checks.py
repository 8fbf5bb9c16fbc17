"""Host-side argument checks with clear errors: a Python int seed in [2**63, 2**64) passes as
uint64 on every backend (numpy's rule; the docs take seeds as uint64), a larger one is a
KernelArgumentError naming the argument; pk.rand's counts are non-negative integers."""

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.kernels import download


@pk.kernel
def first_draws(acc, out, seed):
    eng = acc.rand_engine(seed, 3)
    out[0] = acc.rand_u32(eng)
    out[1] = acc.rand_u32(eng)
    out[2] = seed >> np.uint64(32)


@pytest.mark.parametrize("seed", [2**63, 2**63 + 12345, 2**64 - 1, 42])
def test_a_64_bit_python_int_seed(queue, seed):
    out = pk.Buffer(queue.device, 3, np.uint64)
    pk.exec(queue, pk.WorkDiv(1, 1, 1), first_draws, out, seed)
    got = download(queue, out)
    np.testing.assert_array_equal(got[:2], pk.rand.stream(seed, 3, 2))
    assert got[2] == seed >> 32


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_an_int_beyond_64_bits_is_refused_naming_the_argument(queue, seed):
    out = pk.Buffer(queue.device, 3, np.uint64)
    with pytest.raises(
        pk.KernelArgumentError,
        match=rf"kernel 'first_draws': argument 'seed' \(#1 after acc\): the integer "
        rf"{seed} fits neither int64 nor uint64",
    ):
        pk.exec(queue, pk.WorkDiv(1, 1, 1), first_draws, out, seed)


@pytest.mark.parametrize("call", [pk.rand.stream, pk.rand.uniform, pk.rand.normal])
def test_rand_counts_must_be_non_negative(call):
    with pytest.raises(ValueError, match=rf"{call.__name__}: n must be >= 0, got -1$"):
        call(1, 2, -1)


@pytest.mark.parametrize("call", [pk.rand.stream, pk.rand.uniform, pk.rand.normal])
@pytest.mark.parametrize("n", [2.7, 3.0, "3", True])
def test_rand_counts_must_be_integers(call, n):
    """2.7 was truncated to 2 draws; a count is an integer, as numpy's ``size``."""
    with pytest.raises(TypeError, match=rf"{call.__name__}: n is a count of draws, an integer"):
        call(1, 2, n)


def test_rand_counts_take_numpy_integers():
    np.testing.assert_array_equal(pk.rand.stream(1, 2, np.int32(5)), pk.rand.stream(1, 2, 5))
    assert pk.rand.uniform(1, 2, np.uint8(0)).shape == (0,)


@pk.kernel
def set_ones(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = 1


class HalfHits(soa.Layout):
    x = soa.column(np.float32)
    e = soa.column(np.float16)


@pk.kernel
def set_x(acc, hits, n):
    for i in acc.uniform_elements(n):
        hits.x[i] = 1


@pytest.mark.parametrize("dtype", [np.float16, np.complex64, "U3", "datetime64[s]"])
def test_a_buffer_of_a_dtype_kernels_lack_is_refused_naming_the_argument(queue, dtype):
    """was a bare TypeError from the compiler's type table, naming neither kernel nor argument"""
    out = pk.Buffer(queue.device, 4, dtype)
    with pytest.raises(pk.KernelArgumentError, match=r"kernel 'set_ones': argument 'out': dtype .* convert the data"):
        pk.exec(queue, pk.valid_workdiv(queue.device, 4), set_ones, out, 4)
    if queue.device.is_host_memory:  # numpy arrays: the CPU backends
        with pytest.raises(pk.KernelArgumentError, match=r"kernel 'set_ones': argument 'out': dtype"):
            pk.exec(queue, pk.valid_workdiv(queue.device, 4), set_ones, np.zeros(4, dtype), 4)


def test_a_view_with_a_float16_column_is_refused_naming_the_field(queue):
    hits = pk.PortableCollection(HalfHits, 4, queue)
    with pytest.raises(pk.KernelArgumentError, match=r"kernel 'set_x': argument 'hits', field 'e': dtype float16"):
        pk.exec(queue, pk.valid_workdiv(queue.device, 4), set_x, hits.view(), 4)
