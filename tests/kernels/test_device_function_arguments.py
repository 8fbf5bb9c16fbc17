"""Device functions passed to device functions (the C++ lambda of CMSSW's ``forEachInBins``):
specialised per function at compile time, ``*args`` passed on, one compiled artifact per
function passed (never shared between kernels that pass different ones), the errors of
passing something else; and ``pk.tools.for_each_in_bins`` against numpy on every backend."""

import math

import numpy as np
import pytest

import portable as pk
from alpyka_testing import device_calls as dc
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError


def test_each_function_passed_is_its_own_specialisation(device, queue):
    rng = np.random.default_rng(11)
    n = 61
    x = rng.integers(0, 9, n).astype(np.int64)
    sums, counts = upload(queue, np.zeros(n, np.int64)), upload(queue, np.zeros(n, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 2, 8), dc.sums_and_counts, sums, counts, upload(queue, x), n)
    np.testing.assert_array_equal(download(queue, sums), x * (x - 1) // 2)
    np.testing.assert_array_equal(download(queue, counts), 2 * x)
    kir = dc.sums_and_counts.ir(dc.sums_and_counts.signature((sums, counts, upload(queue, x), n)), 1, False)
    walks = sorted(f.name for f in kir.functions.values() if f.source_name == "walk")
    assert len(walks) == 2, walks  # walk with add_to, walk with count_to (its *args the same types)


def test_kernels_passing_different_functions_never_share_an_artifact(device, queue):
    """Same kernel source and name, same device function name and source: only the function
    passed (and the constant it captured) differs. Each gets its own compiled code, in this
    process and in the disk cache (keyed by the generated source, which holds each function's
    body), so each result is its own."""
    n = 16
    i = np.arange(n)
    want = {"add": i * (i - 1) // 2, "count": i, "times3": 3 * (i * (i - 1) // 2), "times5": 5 * (i * (i - 1) // 2)}
    fns = {"add": dc.add_to, "count": dc.count_to, "times3": dc.scaled_visitor(3), "times5": dc.scaled_visitor(5)}
    kernels = {name: dc.walker_kernel(fn) for name, fn in fns.items()}
    assert len({k.__qualname__ for k in kernels.values()}) == 1
    for name, k in kernels.items():
        out = upload(queue, np.zeros(n, np.int64))
        pk.exec(queue, pk.make_workdiv(device, 2, 4), k, out, n)
        np.testing.assert_array_equal(download(queue, out), want[name], err_msg=name)


def test_the_generated_sources_differ_per_function():
    """What the caches are keyed by (portable/compiler/_cache.py: the generated source) differs
    for every function passed, on the numba and the C emitters."""
    from backends._c_emit import emit
    from backends._numba_emit import emit_numba
    from portable.compiler._cache import module_name

    out = pk.Buffer(pk.host(), 8, np.int64)
    fns = [dc.add_to, dc.count_to, dc.scaled_visitor(3), dc.scaled_visitor(5)]
    irs = []
    for fn in fns:
        k = dc.walker_kernel(fn)
        irs.append(k.ir(k.signature((out, 8)), 1, False))
    numba = {module_name(emit_numba(kir, True).source, "cpu") for kir in irs}
    cuda = {module_name(emit(kir, "cuda").text, "cuda") for kir in irs}
    assert len(numba) == len(cuda) == len(fns)


def _neighbours(izt, z, zmax, window, nbins):
    want = np.zeros(len(z), np.int32)
    for i in range(len(z)):
        for j in range(len(z)):
            if j != i and abs(int(izt[j]) - int(izt[i])) <= window and 0 <= izt[j] < nbins:
                want[i] += abs(z[j] - z[i]) <= zmax
    return want


@pytest.mark.parametrize("window", [0, 1, 3])
def test_for_each_in_bins_matches_numpy(device, queue, window):
    """CMSSW's vertex-finder pattern: tracks binned by z (one_to_many), each counts its close
    neighbours among the tracks of its bin and the ``window`` bins beside it (clamped at the ends)."""
    rng = np.random.default_rng(window)
    n, nbins = 300, 32
    z = rng.uniform(-10, 10, n).astype(np.float32)
    izt = np.clip(((z + 10) * nbins / 20).astype(np.int32), 0, nbins - 1)
    izt[:3] = [0, nbins - 1, nbins + 4]  # the first and last bins, and a track outside every bin
    offsets, content = pk.tools.one_to_many(queue, upload(queue, izt), nbins)
    out = upload(queue, np.zeros(n, np.int32))
    zmax = np.float32(0.4)
    args = (out, offsets, content, upload(queue, izt), upload(queue, z), zmax, window, n)
    pk.exec(queue, pk.make_workdiv(device, 4, 16), dc.count_neighbours, *args)
    want = _neighbours(izt, z, zmax, window, nbins)
    np.testing.assert_array_equal(download(queue, out), want)


# ----------------------------------------------------------------------------- errors
def plain(acc, j, out, i):
    out[i] += j


@pk.kernel
def passes_a_number(acc, out):
    dc.walk(acc, 0, 3, 5, out, 0)


@pk.kernel
def passes_a_plain_function(acc, out):
    dc.walk(acc, 0, 3, plain, out, 0)


@pk.kernel
def passes_a_math_function(acc, out):
    dc.walk(acc, 0, 3, math.sin, out, 0)


@pk.kernel
def stars_a_number(acc, out):
    dc.walk_twice(acc, 3, dc.add_to, *out[0])


ERRORS = [
    (passes_a_number, r"parameter 'fn' is called, but the caller passed a int64 number there; pass a @pk.device"),
    (passes_a_plain_function, r"'plain' is a plain Python function"),
    (passes_a_math_function, r"cannot take a builtin or math function \(wrap it in a @pk.device_function\)"),
    (stars_a_number, r"\*out\[0\] must be a tuple"),
]


@pytest.mark.parametrize("kern,text", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_passing_something_else_is_a_clear_error(kern, text):
    out = pk.Buffer(pk.host(), 4, np.int64)
    with pytest.raises(KernelSyntaxError, match=text):
        kern.ir(kern.signature((out,)), 1, False)
