"""The port of CMSSW's Broken Line fit (examples/broken_line_fit.py) on every backend against the
numpy reference of examples/broken_line_reference.py, the reference and its generator against
the generated truth (pulls), and the example as a newcomer runs it (its ``main`` on every backend,
then as a script).

The example's runs live here, not in test_examples.py, so that they find the three fit kernels
this file's first test compiled on each backend (in this process, and numba's disk cache for the
script's process) instead of compiling them again in another worker: about 20 s of CPU on
cpu_serial alone. The benchmark's numba twin is checked against the same reference, at the same
tolerance, by benchmarks/bench_broken_line.py before it times anything (its smoke run,
tests/benchmarks/test_bench_broken_line_smoke.py, fails on a difference)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.bench import run_script

#: numba compiles the three fit kernels (every pk.linalg call inlined) in about 20 s of CPU: minutes
#: of wall time on a loaded 2-core machine, past the suite's default 240 s per test
pytestmark = pytest.mark.timeout(900)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: how far the port and the twin may be from the reference (which inverts by LAPACK): the state
#: in units of its fitted error, the covariance of sqrt(c_ii c_jj), pt, eta and chi2 relative. The
#: systems' condition numbers (up to ~1e8) amplify float64 rounding to ~1e-10 at most.
TOLERANCE = 1e-8


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bl = _module("broken_line_fit")
ref = bl.reference


@functools.cache
def _tracks(n: int, seed: int):
    generated = ref.generate_tracks(n, seed)
    return generated, ref.reference_fit_all(generated)


def _fit(queue, generated):
    n_hits, hits = bl.upload_tracks(queue, generated)
    tracks = pk.PortableCollection(bl.Tracks, len(n_hits), queue)
    bl.fit_tracks(queue, n_hits, hits, tracks)
    return bl.download_tracks(queue, tracks)


def _check(got, want):
    worst = bl.compare(got, want)
    assert worst["charge"] == 0, worst
    assert max(worst.values()) < TOLERANCE, worst
    return worst


def test_fit_matches_the_reference(queue):
    generated, want = _tracks(600, 5)
    _check(_fit(queue, generated), want)


@functools.cache
def _on_cpu_serial():
    return _fit(pk.Queue(pk.device("cpu_serial")), _tracks(600, 5)[0])


@pytest.mark.alpyka_backends("cpu_threads")
def test_same_bits_as_cpu_serial_on_cpu_threads(queue):
    """cpu_threads compiles the same numba code: the same bits. (The GPU-like backends take
    atan2, sin, cos, log and asinh from their own libraries: within rounding, above.)"""
    got = _fit(queue, _tracks(600, 5)[0])
    for key, value in _on_cpu_serial().items():
        assert np.array_equal(got[key], value), key


def test_each_hit_count_and_work_division(queue):
    """Tracks of one hit count only, and of none: the kernels of the others find empty groups."""
    generated, _ = _tracks(90, 8)
    for count in (3, 5):
        only = {k: (v[:40] if np.ndim(v) else v) for k, v in generated.items()}
        only["n_hits"] = np.full(40, count, np.int32)
        _check(_fit(queue, only), ref.reference_fit_all(only))


def test_reference_pulls():
    """The generator and the reference together: the fitted parameters scatter about the truth by
    their fitted errors (pull means near 0, rms near 1: the generator's scattering model is not
    the fit's)."""
    generated, fit = _tracks(6000, 2)
    for n, cols in ref.pulls(generated, fit).items():
        for name, (mean, rms) in zip(("phi", "tip", "q/pt", "cot", "zip"), cols):
            assert abs(mean) < 0.1 and 0.8 < rms < 1.4, (n, name, mean, rms)


def test_main_on_every_backend(backend, capsys):
    """The example's ``main`` (argument parsing, upload, fit, check, timing) in this process."""
    capsys.readouterr()
    assert bl.main([backend, "--tracks", "300", "--repeats", "1"]) in (None, 0)
    assert "OK" in capsys.readouterr().out


def test_runs_as_a_script():
    """``python examples/broken_line_fit.py cpu_serial ...``: its ``__main__`` and default output
    (numba's disk cache holds the kernels the tests above compiled)."""
    r = run_script(["examples/broken_line_fit.py", "cpu_serial", "--tracks", "300", "--repeats", "1"], timeout=840)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Broken Line fit of 300 tracks" in r.stdout and "OK" in r.stdout


@pytest.mark.parametrize("n_hits", [3, 4, 5])
def test_ptx_keeps_the_per_thread_arrays_out_of_local_memory(n_hits):
    """NVRTC's PTX of each fit kernel has no local memory in the kernel itself: its per-thread
    arrays are indexed by constants after unrolling, so they live in registers (a run-time index,
    ``hits[0, mid]``, made a 120-byte local depot in the 5-hit kernel). libdevice's slow path of
    sin/cos, a function of its own, keeps its 40 bytes."""
    from backends._c_build import CUPY_NVRTC_APPENDED, float_options, nvrtc_available, nvrtc_compile
    from backends._c_emit import emit

    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")
    h = pk.host()
    args = (pk.PortableCollection(bl.Hits, 8, h).const_view(), pk.PortableCollection(bl.Tracks, 8, h).view(),
            pk.Buffer(h, 7, np.int32), pk.Buffer(h, 8, np.int32), ref.B_FIELD)  # fmt: skip
    kernel = bl.bl_fit_kernel(n_hits)
    src = emit(kernel.ir(kernel.signature(args), 1, False), "cuda")
    ptx = nvrtc_compile(src, "compute_90", CUPY_NVRTC_APPENDED + float_options("cuda", False))
    entry = ptx[ptx.index(".entry") :]
    entry = entry[: entry.index("\n}\n")]
    assert ".local" not in entry and "ld.local" not in entry, "a per-thread array went to local memory"
