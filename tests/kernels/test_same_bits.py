"""The same float bits on every backend by default: no compiler fuses ``a*b - c*d`` or ``x*y + z``
into an FMA (OpenCL's compilers and NVRTC do unless told not to), so a kernel's results equal
numpy's bit for bit on every backend; ``@pk.kernel(fast_math=True)`` opts a kernel in to its
backend's fast math, which still runs and stays close."""

import math

import numpy as np
import pytest

import portable as pk
from alpyka_testing.numpy_compare import assert_kernel_matches_numpy, for_float_dtypes

N = 100_000


def diff_of_products(acc, a, b, c, d, out, n):
    for i in acc.uniform_elements(n):
        out[i] = a[i] * b[i] - c[i] * d[i]


def mul_add(acc, x, y, z, out, n):
    for i in acc.uniform_elements(n):
        out[i] = x[i] * y[i] + z[i]


def hypot_ratio(acc, x, y, z, out, n):
    """Correctly rounded sqrt and division (OpenCL allows 3 and 2.5 ulp for float32)."""
    for i in acc.uniform_elements(n):
        out[i] = math.sqrt(x[i] * x[i] + y[i] * y[i]) / z[i]


def dimuon_mass(acc, mu1, mu2, out, n):
    """examples/dimuon_mass.py's invariant mass of two (E, px, py, pz) four-vectors."""
    for i in acc.uniform_elements(n):
        e = mu1[i, 0] + mu2[i, 0]
        px = mu1[i, 1] + mu2[i, 1]
        py = mu1[i, 2] + mu2[i, 2]
        pz = mu1[i, 3] + mu2[i, 3]
        m2 = e * e - px * px - py * py - pz * pz
        out[i] = math.sqrt(m2) if m2 > 0 else 0.0


EXACT = {f.__name__: pk.kernel(f) for f in (diff_of_products, mul_add, hypot_ratio, dimuon_mass)}
FAST = {f.__name__: pk.kernel(fast_math=True)(f) for f in (diff_of_products, mul_add, hypot_ratio, dimuon_mass)}


def _muons(rng, n, dtype):
    """``n`` muons (E, px, py, pz) of random momentum (GeV) and direction, on the mass shell."""
    p = rng.standard_normal((n, 3)) * 30.0
    e = np.sqrt((p * p).sum(axis=1) + 0.1057**2)
    return np.column_stack([e, p]).astype(dtype)


def _dimuon_mass(mu1, mu2):
    e, px, py, pz = (mu1[:, k] + mu2[:, k] for k in range(4))
    m2 = e * e - px * px - py * py - pz * pz
    return np.where(m2 > 0, np.sqrt(m2), m2.dtype.type(0))


#: numpy's answer per kernel
NUMPY = {
    "diff_of_products": lambda a, b, c, d: a * b - c * d,
    "mul_add": lambda x, y, z: x * y + z,
    "hypot_ratio": lambda x, y, z: np.sqrt(x * x + y * y) / z,
    "dimuon_mass": _dimuon_mass,
}


def _inputs(name, dtype, rng):
    """The inputs of kernel ``name`` in ``dtype``."""
    if name == "dimuon_mass":
        return [_muons(rng, N, dtype), _muons(rng, N, dtype)]
    return [(rng.standard_normal(N) * 10.0).astype(dtype) for _ in range(4 if name == "diff_of_products" else 3)]


def _scale(name, inputs):
    """The size of the terms (products of inputs; energies for the masses): fast math's error
    is a few roundings of it, whatever the result's size after cancellation."""
    top = float(np.abs(inputs[0]).max())
    return top * top if name in ("diff_of_products", "mul_add") else top


def _check(queue, knl, name, dtype, seed, op="exact"):
    """Bit for bit numpy's answer (``op="exact"``; contraction would differ in about a quarter
    of the results), or within fast math's tolerance of it."""
    inputs = _inputs(name, dtype, np.random.default_rng(seed))
    workdiv = pk.make_workdiv(queue.device, (N + 127) // 128, 128)
    scale = _scale(name, inputs) if op == "fast_math" else None
    assert_kernel_matches_numpy(queue, knl, NUMPY[name], *inputs, op=op, scale=scale, workdiv=workdiv)


@for_float_dtypes()
@pytest.mark.parametrize("name", list(EXACT))
def test_default_gives_numpys_bits(queue, name, dtype):
    _check(queue, EXACT[name], name, dtype, 7)


@for_float_dtypes()
@pytest.mark.parametrize("name", list(FAST))
def test_fast_math_runs_and_stays_close(queue, name, dtype):
    """fast_math=True may fuse and reorder (on the CPU it may still give numpy's bits): close."""
    _check(queue, FAST[name], name, dtype, 7, op="fast_math")


@for_float_dtypes()
def test_fast_and_default_builds_stay_apart(queue, dtype):
    """Two new kernels of one function, the fast one built first: the default one is not handed
    the fast build by any cache (in memory, numba's, pyopencl's, cupy's, the emulator's)."""
    fast, exact = pk.kernel(fast_math=True)(diff_of_products), pk.kernel(diff_of_products)
    _check(queue, fast, "diff_of_products", dtype, 3, op="fast_math")
    _check(queue, exact, "diff_of_products", dtype, 3)


def test_fast_math_is_a_flag_of_the_kernel():
    """fast_math is the kernel's own (its plans and IR are apart from the default kernel's) and
    takes True or False only."""
    assert FAST["mul_add"].fast_math is True and EXACT["mul_add"].fast_math is False
    serial = pk.get_backend("cpu_serial")
    assert serial.plans(FAST["mul_add"]) is not serial.plans(EXACT["mul_add"])
    with pytest.raises(TypeError, match="fast_math"):
        pk.kernel(fast_math="yes")(mul_add)


@pytest.mark.alpyka_backends("opencl")
@for_float_dtypes()
def test_every_opencl_runtime_gives_numpys_bits(device, dtype):
    """Each OpenCL runtime here (Intel's and PoCL compile with their own compilers, both
    contracting unless told not to), not only the backend's default device."""
    for dev in pk.devices("opencl"):
        q = pk.Queue(dev)
        for name, knl in EXACT.items():
            _check(q, knl, name, dtype, 11)
