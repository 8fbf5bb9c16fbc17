"""The same float bits on every backend by default: no compiler fuses ``a*b - c*d`` or ``x*y + z``
into an FMA (OpenCL's compilers and NVRTC do unless told not to), so a kernel's results equal
numpy's bit for bit on every backend; ``@pk.kernel(fast_math=True)`` opts a kernel in to its
backend's fast math, which still runs and stays close."""

import math

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

N = 100_000
FLOATS = [np.float32, np.float64]
BITS = {np.float32: np.int32, np.float64: np.int64}


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


def _case(name, dtype, rng):
    """The inputs of kernel ``name`` and numpy's answer for them, in ``dtype``."""
    if name == "dimuon_mass":
        mu1, mu2 = _muons(rng, N, dtype), _muons(rng, N, dtype)
        e, px, py, pz = (mu1[:, k] + mu2[:, k] for k in range(4))
        m2 = e * e - px * px - py * py - pz * pz
        with np.errstate(invalid="ignore"):
            want = np.where(m2 > 0, np.sqrt(m2), dtype(0))
        return [mu1, mu2], want
    xs = [(rng.standard_normal(N) * 10.0).astype(dtype) for _ in range(4 if name == "diff_of_products" else 3)]
    if name == "diff_of_products":
        return xs, xs[0] * xs[1] - xs[2] * xs[3]
    if name == "hypot_ratio":
        return xs, np.sqrt(xs[0] * xs[0] + xs[1] * xs[1]) / xs[2]
    return xs, xs[0] * xs[1] + xs[2]


def _run(queue, device, knl, inputs, dtype):
    out = upload(queue, np.zeros(N, dtype))
    pk.exec(queue, pk.make_workdiv(device, (N + 127) // 128, 128), knl, *[upload(queue, x) for x in inputs], out, N)
    return download(queue, out)


@pytest.mark.parametrize("dtype", FLOATS, ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(EXACT))
def test_default_gives_numpys_bits(device, queue, name, dtype):
    """Bit for bit numpy's answer (contraction would differ in about a quarter of the results)."""
    inputs, want = _case(name, dtype, np.random.default_rng(7))
    got = _run(queue, device, EXACT[name], inputs, dtype)
    assert got.dtype == want.dtype
    differ = int((got.view(BITS[dtype]) != want.view(BITS[dtype])).sum())
    assert differ == 0, f"{differ} of {N} results differ from numpy's bits (largest {np.abs(got - want).max()})"


@pytest.mark.parametrize("dtype", FLOATS, ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(FAST))
def test_fast_math_runs_and_stays_close(device, queue, name, dtype):
    """fast_math=True may fuse and reorder (on the CPU it may still give numpy's bits): close."""
    inputs, want = _case(name, dtype, np.random.default_rng(7))
    _assert_close(_run(queue, device, FAST[name], inputs, dtype), want, name, inputs, dtype)


def _assert_close(got, want, name, inputs, dtype):
    """Within a few roundings of the terms' size (products of inputs; energies for the masses)."""
    scale = np.abs(inputs[0]).max() * (np.abs(inputs[0]).max() if name in ("diff_of_products", "mul_add") else 1.0)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    assert np.allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype", FLOATS, ids=["float32", "float64"])
def test_fast_and_default_builds_stay_apart(device, queue, dtype):
    """Two new kernels of one function, the fast one built first: the default one is not handed
    the fast build by any cache (in memory, numba's, pyopencl's, cupy's, the emulator's)."""
    fast, exact = pk.kernel(fast_math=True)(diff_of_products), pk.kernel(diff_of_products)
    inputs, want = _case("diff_of_products", dtype, np.random.default_rng(3))
    _assert_close(_run(queue, device, fast, inputs, dtype), want, "diff_of_products", inputs, dtype)
    got = _run(queue, device, exact, inputs, dtype)
    assert np.array_equal(got.view(BITS[dtype]), want.view(BITS[dtype]))


def test_fast_math_is_a_flag_of_the_kernel():
    """fast_math is the kernel's own (its plans and IR are apart from the default kernel's) and
    takes True or False only."""
    assert FAST["mul_add"].fast_math is True and EXACT["mul_add"].fast_math is False
    serial = pk.get_backend("cpu_serial")
    assert serial.plans(FAST["mul_add"]) is not serial.plans(EXACT["mul_add"])
    with pytest.raises(TypeError, match="fast_math"):
        pk.kernel(fast_math="yes")(mul_add)


@pytest.mark.alpyka_backends("opencl")
@pytest.mark.parametrize("dtype", FLOATS, ids=["float32", "float64"])
def test_every_opencl_runtime_gives_numpys_bits(device, dtype):
    """Each OpenCL runtime here (Intel's and PoCL compile with their own compilers, both
    contracting unless told not to), not only the backend's default device."""
    for dev in pk.devices("opencl"):
        q = pk.Queue(dev)
        for name, knl in EXACT.items():
            inputs, want = _case(name, dtype, np.random.default_rng(11))
            got = _run(q, dev, knl, inputs, dtype)
            differ = int((got.view(BITS[dtype]) != want.view(BITS[dtype])).sum())
            assert differ == 0, f"{dev}: {name}: {differ} of {N} results differ from numpy's bits"


def _hip_assembly(src, arch, options):
    """AMDGPU assembly of a HIP-dialect source, compiled as backends/_hip_check.py compiles it."""
    import subprocess
    import tempfile
    from pathlib import Path

    from backends import _hip_check

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.hip"
        path.write_text("#include <hip/hip_runtime.h>\n" + src.text)  # what hiprtc puts first
        cmd = _hip_check.toolchain().command(arch, options) + ["-S", str(path), "-o", str(path.with_suffix(".s"))]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return path.with_suffix(".s").read_text()


def test_hip_code_for_amd_gpus_fuses_no_fma_unless_fast_math():
    """The rocm backend's options (what cupy.RawModule hands hiprtc) reach clang: ``x*y + z`` is
    a multiply and an add rounded apart (``v_mac_f32``/``v_mul``+``v_add``) for gfx90a by
    default, where clang's own default for HIP fuses it (``v_fmac_f32``); ``fast_math=True``
    fuses it. Needs the HIP toolchain of backends/_hip_check.py (no AMD GPU)."""
    from backends import _hip_check
    from backends._c_emit import emit
    from backends._cupy_launch import compile_options

    reason = _hip_check.unavailable()
    if reason is not None:
        pytest.skip(f"no HIP toolchain: {reason}")
    args = tuple(pk.Buffer(pk.host(), 16, np.float32) for _ in range(4)) + (16,)
    fused = {}
    for fast in (False, True):
        knl = pk.kernel(fast_math=fast)(mul_add)
        src = emit(knl.ir(knl.signature(args), 1, False), "hip")
        asm = _hip_assembly(src, "gfx90a", compile_options(True, fast))
        ops = {ln.split()[0] for ln in asm.splitlines() if ln.strip().startswith("v_") and "f32" in ln.split()[0]}
        fused[fast] = {op for op in ops if "fma" in op}
        assert ops, asm
    assert not fused[False] and fused[True], fused
