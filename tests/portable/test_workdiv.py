"""Work divisions: WorkDiv, make_workdiv (CMSSW) and valid_workdiv (alpaka subDivideGridElems)."""

import importlib.util
import math

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from backends.emulator import fake_cupy_kernels
from portable import DeviceLimits


def gpu_like(max_threads=1024, dims=(64, 1024, 1024)):
    lim = DeviceLimits(max_threads, dims, (65535, 65535, 2**31 - 1), warp_size=32, multiprocessors=132)
    return pk.Device("cuda", 0, "model GPU", "gpu", "cuda:0", lim)


def test_workdiv_forms():
    wd = pk.WorkDiv(4, 32, 2)
    assert (wd.blocks, wd.threads, wd.elements, wd.dim) == ((4,), (32,), (2,), 1)
    assert wd.grid_threads == (128,) and wd.grid_elements == (256,)
    wd2 = pk.WorkDiv((2, 3), (4, 8), 1)
    assert wd2.elements == (1, 1) and wd2.dim == 2
    assert pk.WorkDiv((2, 3, 4), 1, 5).elements == (1, 1, 5)
    with pytest.raises(pk.WorkDivError, match="2 dimension"):
        pk.WorkDiv((2, 3), (1, 1, 1))
    with pytest.raises(pk.WorkDivError, match="integers >= 1"):
        pk.WorkDiv(0, 1)
    with pytest.raises(pk.WorkDivError, match="1 to 3"):
        pk.WorkDiv((1, 1, 1, 1))


def test_make_workdiv_cmssw_semantics(device):
    wd = pk.make_workdiv(device, 10, 256)
    if device.kind == "gpu" and device.capabilities.hardware != "cpu":
        assert (wd.blocks, wd.threads, wd.elements) == ((10,), (256,), (1,))
    else:  # CPU backends, and OpenCL on a CPU (its runtime loops over a block's threads)
        assert (wd.blocks, wd.threads, wd.elements) == ((10,), (1,), (256,))
    g = pk.make_workdiv(gpu_like(), 10, 256)
    assert g.threads == (256,)


def test_a_gpu_model_device_on_cpu_hardware_gets_cpu_shaped_blocks():
    """OpenCL on a CPU (kind "gpu", hardware "cpu") gets CMSSW's CPU shape: a GPU-shaped block of
    256 work-items made ClusterChargeCut 3.5x (Intel) to 10x (PoCL) slower there."""
    lim = DeviceLimits(8192, (8192, 8192, 8192), (2**31 - 1,) * 3)
    on_cpu = pk.DeviceCapabilities("gpu", False, "opencl", hardware="cpu")
    dev = pk.Device("opencl", 0, "a CPU", "gpu", "opencl:0", lim, capabilities=on_cpu)
    assert dev.capabilities.cpu_shaped and not pk.DeviceCapabilities("gpu", False).cpu_shaped
    wd = pk.make_workdiv(dev, 10, 256)
    assert (wd.blocks, wd.threads, wd.elements) == ((10,), (1,), (256,))
    assert pk.DeviceCapabilities("gpu", False).hardware == "gpu"  # the default: what kind names
    assert pk.DeviceCapabilities.host().hardware == "cpu"
    with pytest.raises(ValueError, match="hardware"):
        pk.DeviceCapabilities("gpu", False, hardware="")


@pytest.mark.alpyka_backends("opencl")
def test_opencl_declares_the_cl_device_type_as_its_hardware(device):
    assert device.capabilities.hardware == device.properties["type"]  # CL_DEVICE_TYPE
    if device.properties["type"] == "cpu":
        assert pk.make_workdiv(device, 3, 256).threads == (1,)


def test_cpu_refuses_threads_per_block():
    cpu = pk.device("cpu_serial")
    with pytest.raises(pk.WorkDivError, match="at most 1.*one thread per block"):
        pk.WorkDiv(4, 2).check(cpu)
    pk.WorkDiv(4, 1, 64).check(cpu)


def test_gpu_limits_checked():
    g = gpu_like()
    with pytest.raises(pk.WorkDivError, match="at most 1024"):
        pk.WorkDiv(1, 2048).check(g)
    with pytest.raises(pk.WorkDivError, match="threads\\[0\\]=128 exceeds"):
        pk.WorkDiv((1, 1, 1), (128, 2, 2)).check(g)  # slowest dim limited to 64
    with pytest.raises(pk.WorkDivError, match="blocks\\[0\\]=70000"):
        pk.WorkDiv((70000, 1), (1, 1)).check(g)


@pytest.mark.parametrize(
    "n, elements, expected",
    [
        (1000, 1, ((1,), (1000,), (1,))),  # fits one block
        (5000, 1, ((5,), (1024,), (1,))),  # the last block partial (904 of 1024 threads)
        (4096, 1, ((4,), (1024,), (1,))),
        (4096, 4, ((1,), (1024,), (4,))),
        (3, 8, ((1,), (1,), (3,))),  # elements clipped to the extent
        (0, 1, ((1,), (1,), (1,))),
        (1031, 1, ((2,), (1024,), (1,))),  # a prime: full blocks and a partial last one
    ],
)
def test_valid_workdiv_gpu(n, elements, expected):
    wd = pk.valid_workdiv(gpu_like(), n, elements)
    assert (wd.blocks, wd.threads, wd.elements) == expected


def test_valid_workdiv_halves_over_the_limit():
    g = gpu_like(max_threads=256, dims=(1024, 1024, 1024))
    wd = pk.valid_workdiv(g, 1024, block_threads_must_divide=False)
    assert wd.threads == (256,) and wd.blocks == (4,)
    wd2 = pk.valid_workdiv(g, (64, 64))
    assert wd2.threads[0] * wd2.threads[1] <= 256 and wd2.grid_threads == (64, 64)


def test_valid_workdiv_cpu(device):
    if device.kind != "cpu":
        pytest.skip("CPU semantics")
    wd = pk.valid_workdiv(device, 1000, 16)
    assert wd.threads == (1,) and wd.elements == (16,) and wd.blocks == (63,)
    wd.check(device)


@pytest.mark.parametrize(
    "bad, why",
    [
        (1.5, r"got 1.5 \(float\)"),
        ("4", r"got '4' \(str\)"),
        (True, r"got True \(bool\)"),
        (None, r"got None \(NoneType\)"),
        ((2, 2.0), r"got \(2, 2.0\) \(an entry is float\)"),
        ((1, 1, 1, 1), r"got \(1, 1, 1, 1\) \(4 entries\)"),
        (-3, r"got -3 \(entries must be integers >= 1\)"),
    ],
)
def test_bad_extents_say_what_is_expected(bad, why):
    rule = r"must be a positive int or a tuple of 1 to 3 positive ints"
    for args, what in (((bad, 1, 1), "blocks"), ((1, bad, 1), "threads"), ((1, 1, bad), "elements")):
        with pytest.raises(pk.WorkDivError, match=f"WorkDiv {what} {rule}, {why}"):
            pk.WorkDiv(*args)


def test_valid_workdiv_bad_arguments(device):
    with pytest.raises(
        pk.WorkDivError,
        match=r"valid_workdiv n_elements must be a non-negative int or a "
        r"tuple of 1 to 3 non-negative ints, got 1.5 \(float\)",
    ):
        pk.valid_workdiv(device, 1.5)
    with pytest.raises(pk.WorkDivError, match=r"n_elements .* got -1 \(entries must be integers >= 0\)"):
        pk.valid_workdiv(device, -1)
    with pytest.raises(pk.WorkDivError, match=r"valid_workdiv elements must be a positive int .* got 2.0"):
        pk.valid_workdiv(device, 100, 2.0)
    assert pk.valid_workdiv(device, [10, 10]).dim == 2  # a list works like a tuple
    with pytest.raises(pk.WorkDivError, match=r"WorkDiv blocks must be a positive int .* got 1.5 \(float\)"):
        pk.make_workdiv(device, 1.5, 4)


# ---------------------------------------------------------------- a prime n (issue 32 item 6)
PRIME = 10007


@pytest.mark.parametrize(
    "dev, n, threads",
    [
        (gpu_like(), 319_037, 1024),  # the H100 clustering run's digis: 312 blocks, not 319,037 of one thread
        (gpu_like(), 1031, 1024),
        (gpu_like(max_threads=256, dims=(1024, 1024, 1024)), PRIME, 256),
    ],
)
def test_valid_workdiv_covers_a_prime_n_with_full_blocks_and_a_partial_last_one(dev, n, threads):
    wd = pk.valid_workdiv(dev, n)
    assert wd.threads == (threads,) and wd.elements == (1,)
    assert wd.blocks == (math.ceil(n / threads),)
    assert wd.grid_threads[0] - n < threads  # n covered; only the last block is partial


def test_valid_workdiv_of_a_prime_n_on_the_device(device):
    if device.kind == "gpu":
        wd = pk.valid_workdiv(device, PRIME)
        threads = wd.threads[0]
        assert threads == min(PRIME, device.limits.max_threads_per_block, device.limits.max_block_dims[2])
        assert threads > 1 and wd.blocks == (math.ceil(PRIME / threads),)
    else:  # (blocks, 1, elements): alpaka's CPU division
        wd = pk.valid_workdiv(device, PRIME, 64)
        assert (wd.blocks, wd.threads, wd.elements) == ((math.ceil(PRIME / 64),), (1,), (64,))
    wd.check(device)


def test_block_threads_must_divide_keeps_alpakas_exact_division():
    g = gpu_like()
    wd = pk.valid_workdiv(g, 5000, block_threads_must_divide=True)
    assert (wd.blocks, wd.threads) == ((5,), (1000,))  # the largest divisor of 5000 under 1024
    wd = pk.valid_workdiv(g, 1031, block_threads_must_divide=True)
    assert (wd.blocks, wd.threads) == ((1031,), (1,))  # a prime: one-thread blocks
    wd = pk.valid_workdiv(g, (30, 7), block_threads_must_divide=True)
    assert all(gt % t == 0 for gt, t in zip(wd.grid_threads, wd.threads)) and wd.grid_threads == (30, 7)


@pk.kernel
def _affine(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = 2.0 * x[i] + i


@pytest.mark.parametrize("elements", [1, 7])
def test_a_kernel_over_a_prime_n_is_right(device, queue, elements):
    """The default division's last block is partial: the element loop leaves its extra threads idle."""
    x = np.random.default_rng(5).standard_normal(PRIME)
    out = upload(queue, np.full(PRIME, np.nan))
    wd = pk.valid_workdiv(device, PRIME, elements)
    assert wd.grid_elements[0] >= PRIME
    pk.exec(queue, wd, _affine, out, upload(queue, x), PRIME)
    assert np.array_equal(download(queue, out), 2.0 * x + np.arange(PRIME))


# ---------------------------------------------------------------- a kernel's own thread limit
def _many_live_values_kernel(tmp_path, count=40):
    """A kernel whose ``count`` float64 values are all live at its last line (a real GPU needs
    over 64 registers a thread for it); written to a file, as kernels are compiled from source."""
    lines = [
        "import portable as pk",
        "",
        "",
        "@pk.kernel",
        "def many_live_values(acc, out, x, n):",
        "    for i in acc.uniform_elements(n):",
        "        v0 = x[i]",
    ]
    lines += [f"        v{k} = v{k - 1} * 0.5 + x[i] * {k}.0" for k in range(1, count)]
    lines.append("        out[i] = " + " + ".join(f"v{k}" for k in range(count)))
    path = tmp_path / "many_live_values_kernel.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location("many_live_values_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.many_live_values, count


def _many_live_values_expected(x, count):
    v, total = x.copy(), x.copy()
    for k in range(1, count):
        v = v * 0.5 + x * float(k)
        total = total + v
    return total


@pytest.mark.hip_differs  # the rocm emulator's answer is 1024 (AMD's compiler spills instead)
def test_valid_workdiv_keeps_within_the_kernels_own_thread_limit(device, queue, tmp_path):
    heavy, count = _many_live_values_kernel(tmp_path)
    n = 5000
    x = np.linspace(-1.0, 1.0, n)
    bx, out = upload(queue, x), upload(queue, np.zeros(n))
    wd = pk.valid_workdiv(device, n, kernel=heavy, args=(out, bx, n))
    limit = device.backend.kernel_thread_limit(device, wd, heavy, (out, bx, n))
    assert math.prod(wd.threads) <= limit <= device.limits.max_threads_per_block
    emulated = device.backend_name in fake_cupy_kernels.served_here()
    if emulated and device.backend_name == "cuda":
        assert 32 <= limit < 1024 and limit % 32 == 0  # the emulator's register estimate
        assert wd.threads == (1 << (limit.bit_length() - 1),)  # 1024 halved until it fits
        light = pk.valid_workdiv(device, n, kernel=_affine, args=(out, bx, n))
        assert light.threads == (1024,)  # a kernel of few values keeps the device's limit
    elif emulated:
        assert limit == 1024
    if device.kind == "cpu":
        assert wd.threads == (1,)
    pk.exec(queue, wd, heavy, out, bx, n)
    np.testing.assert_allclose(download(queue, out), _many_live_values_expected(x, count), rtol=1e-12)
    if limit < device.limits.max_threads_per_block:  # above the kernel's limit: refused before launch
        before = len(device.backend.cupy.rt.launches) if emulated else None
        over = pk.WorkDiv(1, limit + 32, 1)
        with pytest.raises(pk.WorkDivError, match=rf"kernel 'many_live_values' can run at most {limit} threads"):
            pk.exec(queue, over, heavy, out, bx, n)
        if emulated:
            assert len(device.backend.cupy.rt.launches) == before


def test_valid_workdiv_kernel_needs_a_kernel_and_its_arguments(device):
    with pytest.raises(pk.WorkDivError, match="needs the launch's arguments too"):
        pk.valid_workdiv(device, 100, kernel=_affine)
    with pytest.raises(pk.WorkDivError, match="is not a kernel; pass a @pk.kernel function"):
        pk.valid_workdiv(device, 100, kernel=print, args=())
