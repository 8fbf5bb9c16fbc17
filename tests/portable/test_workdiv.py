"""Work divisions: WorkDiv, make_workdiv (CMSSW) and valid_workdiv (alpaka subDivideGridElems)."""


import pytest

import portable as pk
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
    if device.kind == "gpu":
        assert (wd.blocks, wd.threads, wd.elements) == ((10,), (256,), (1,))
    else:
        assert (wd.blocks, wd.threads, wd.elements) == ((10,), (1,), (256,))
    g = pk.make_workdiv(gpu_like(), 10, 256)
    assert g.threads == (256,)


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
        (5000, 1, ((5,), (1000,), (1,))),  # 1024 does not divide 5000: largest divisor 1000
        (4096, 1, ((4,), (1024,), (1,))),
        (4096, 4, ((1,), (1024,), (4,))),
        (3, 8, ((1,), (1,), (3,))),  # elements clipped to the extent
        (0, 1, ((1,), (1,), (1,))),
        (1031, 1, ((1031,), (1,), (1,))),  # a prime: one thread per block to divide exactly
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


@pytest.mark.parametrize("bad, why", [
    (1.5, r"got 1.5 \(float\)"),
    ("4", r"got '4' \(str\)"),
    (True, r"got True \(bool\)"),
    (None, r"got None \(NoneType\)"),
    ((2, 2.0), r"got \(2, 2.0\) \(an entry is float\)"),
    ((1, 1, 1, 1), r"got \(1, 1, 1, 1\) \(4 entries\)"),
    (-3, r"got -3 \(entries must be integers >= 1\)"),
])
def test_bad_extents_say_what_is_expected(bad, why):
    rule = r"must be a positive int or a tuple of 1 to 3 positive ints"
    for args, what in (((bad, 1, 1), "blocks"), ((1, bad, 1), "threads"), ((1, 1, bad), "elements")):
        with pytest.raises(pk.WorkDivError, match=f"WorkDiv {what} {rule}, {why}"):
            pk.WorkDiv(*args)


def test_valid_workdiv_bad_arguments(device):
    with pytest.raises(pk.WorkDivError, match=r"valid_workdiv n_elements must be a non-negative int or a "
                                               r"tuple of 1 to 3 non-negative ints, got 1.5 \(float\)"):
        pk.valid_workdiv(device, 1.5)
    with pytest.raises(pk.WorkDivError, match=r"n_elements .* got -1 \(entries must be integers >= 0\)"):
        pk.valid_workdiv(device, -1)
    with pytest.raises(pk.WorkDivError, match=r"valid_workdiv elements must be a positive int .* got 2.0"):
        pk.valid_workdiv(device, 100, 2.0)
    assert pk.valid_workdiv(device, [10, 10]).dim == 2  # a list works like a tuple
    with pytest.raises(pk.WorkDivError, match=r"WorkDiv blocks must be a positive int .* got 1.5 \(float\)"):
        pk.make_workdiv(device, 1.5, 4)
