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


def _relaxed_math_fails(monkeypatch, also_parts=False):
    """The OpenCL build as on a runtime whose fast math fails to link (Intel's CPU runtime on a CPU
    without AVX-512 and a float64 ``sqrt``): a build with ``-cl-fast-relaxed-math`` (and with its
    parts too, where ``also_parts``) gets a real build error of the runtime here (an ``#error``
    line added to the source). Returns the options of every build tried, in order."""
    from backends import _opencl_launch

    real, tried = _opencl_launch.build, []

    def build(cl, context, source, devices, options=None):
        tried.append(list(options or ()))
        fast = "-cl-fast-relaxed-math" in tried[-1] or (also_parts and "-cl-finite-math-only" in tried[-1])
        return real(
            cl, context, source + ("\n#error fast math fails on this runtime\n" if fast else ""), devices, options
        )

    monkeypatch.setattr(_opencl_launch, "build", build)
    return tried


@pytest.mark.alpyka_backends("opencl")
@for_float_dtypes()
def test_a_device_whose_relaxed_math_fails_builds_fast_math_from_its_parts(device, queue, monkeypatch, dtype):
    """Where ``-cl-fast-relaxed-math`` fails to build and its parts build, a fast_math kernel
    builds with the parts (still fast math: contraction and the rest); each kernel tries the
    option first (its options do not depend on what was built before)."""
    import pyopencl as cl

    from backends._c_build import OPENCL_FAST_MATH_PARTS

    tried = _relaxed_math_fails(monkeypatch)
    first, second = pk.kernel(fast_math=True)(hypot_ratio), pk.kernel(fast_math=True)(mul_add)
    _check(queue, first, "hypot_ratio", dtype, 5, op="fast_math")
    _check(queue, second, "mul_add", dtype, 5, op="fast_math")
    assert sum("-cl-fast-relaxed-math" in t for t in tried) == 2, tried
    for knl in (first, second):
        (plan,) = device.backend.plans(knl).values()
        options = plan.program.get_build_info(device.native.device, cl.program_build_info.OPTIONS)
        assert all(o in options for o in OPENCL_FAST_MATH_PARTS) and "-cl-fast-relaxed-math" not in options
    exact = pk.kernel(mul_add)  # the default kernels are left alone: numpy's bits
    _check(queue, exact, "mul_add", dtype, 5)
    assert not any(o in t for t in tried[-1:] for o in OPENCL_FAST_MATH_PARTS), tried


@pytest.mark.alpyka_backends("opencl")
def test_a_fast_kernel_whose_parts_fail_too_raises_its_first_error(device, queue, monkeypatch):
    """A fast_math kernel that fails with the parts as well fails for a reason of its own: the
    error is the first build's (its options: ``-cl-fast-relaxed-math``), and the device keeps it."""
    tried = _relaxed_math_fails(monkeypatch, also_parts=True)
    with pytest.raises(pk.KernelBuildError, match="-cl-fast-relaxed-math") as err:
        _check(queue, pk.kernel(fast_math=True)(mul_add), "mul_add", np.float32, 5, op="fast_math")
    assert "fast math fails on this runtime" in str(err.value)
    assert len(tried) == 2, tried
