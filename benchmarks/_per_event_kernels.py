"""Per-event kernel figures for bench_kernels (device functions inlined, atomics at their cost):
Philox uniforms drawn in a cpu_serial kernel against numpy's ``Generator(Philox).random(float32)``
(and the same draws made by a device function the kernel passes its engine to),
and a user kernel that sums charges per cluster with shared-memory atomics against its numba njit twin. Each pair runs
on the same sizes, interleaved round-robin in one process.

    PYTHONPATH=. python benchmarks/_per_event_kernels.py [--quick]   # the figures alone, as JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
from numba import njit

import portable as pk

MAX_CLUSTERS = 64  #: clusters per module (the shared array's size)


@pk.kernel
def philox_fill(acc, out, per, seed):
    """Thread t fills ``out[t*per : (t+1)*per]`` with uniforms of its own Philox subsequence."""
    for t in acc.uniform_elements(out.shape[0] // per):
        eng = acc.rand_engine(seed, t)
        for k in range(per):
            out[t * per + k] = acc.rand_uniform(eng, np.float32)


@pk.device_function
def draw_f32(acc, eng):
    """One float32 uniform from the caller's engine (passed by reference)."""
    return acc.rand_uniform(eng, np.float32)


@pk.kernel
def philox_fill_via_function(acc, out, per, seed):
    """:func:`philox_fill` with each draw made by a device function."""
    for t in acc.uniform_elements(out.shape[0] // per):
        eng = acc.rand_engine(seed, t)
        for k in range(per):
            out[t * per + k] = draw_f32(acc, eng)


@pk.kernel
def charge_per_cluster(acc, out, charge, cluster, module_start, n_modules):
    """Per module (one block each): the charge of each of its clusters, summed in shared memory
    with atomics (CMSSW's ClusterChargeCut's first step)."""
    sh = acc.shared_array(MAX_CLUSTERS, np.float32)
    for m in acc.independent_groups(n_modules):
        for c in acc.independent_group_elements(MAX_CLUSTERS):
            sh[c] = 0.0
        acc.sync_block_threads()
        for i in acc.independent_group_elements(module_start[m], module_start[m + 1]):
            acc.atomic_add(sh, cluster[i], charge[i], hierarchy="threads")
        acc.sync_block_threads()
        for c in acc.independent_group_elements(MAX_CLUSTERS):
            out[m * MAX_CLUSTERS + c] = sh[c]
        acc.sync_block_threads()


@njit(nogil=True, cache=True)  # compiled once per machine, as the other twins: ~2 s a run
def nb_charge_per_cluster(out, charge, cluster, module_start, n_modules):
    """The njit twin of :func:`charge_per_cluster`: one module after another."""
    sh = np.empty(MAX_CLUSTERS, np.float32)
    for m in range(n_modules):
        sh[:] = 0.0
        for i in range(module_start[m], module_start[m + 1]):
            sh[cluster[i]] += charge[i]
        out[m * MAX_CLUSTERS : (m + 1) * MAX_CLUSTERS] = sh


def _timed(fns: dict, reps: int, calls: int = 1) -> dict[str, float]:
    timings, errors = common.interleaved(fns, reps, calls=calls)
    if errors:
        raise RuntimeError(f"per-event contenders failed: {errors}")
    return {k: t.median for k, t in timings.items()}


def philox(n_draws: int, reps: int) -> dict:
    """ns per float32 uniform: a cpu_serial kernel (64 threads, one engine each) vs numpy, and
    the kernel whose draws a device function makes (``device_function_over_inline``: its time
    over the inline kernel's)."""
    per = n_draws // 64
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    out = np.empty(64 * per, np.float32)
    wd = pk.WorkDiv(64, 1, 1)
    gen = np.random.Generator(np.random.Philox(7))
    ref = np.empty_like(out)
    via = np.empty_like(out)
    pk.exec(q, wd, philox_fill, out, per, 7)
    pk.exec(q, wd, philox_fill_via_function, via, per, 7)
    np.testing.assert_array_equal(out[:per], pk.rand.uniform(7, 0, per, np.float32))
    np.testing.assert_array_equal(via, out)
    t = _timed(
        {
            "alpyka_cpu_serial": lambda: pk.exec(q, wd, philox_fill, out, per, 7),
            "alpyka_cpu_serial_device_function": lambda: pk.exec(q, wd, philox_fill_via_function, via, per, 7),
            "numpy_Generator_Philox": lambda: gen.random(out=ref, dtype=np.float32),
        },
        reps,
    )
    ns = {k: v / out.size * 1e9 for k, v in t.items()}
    return {
        "draws": int(out.size),
        "ns_per_draw": ns,
        "numpy_over_alpyka": ns["numpy_Generator_Philox"] / ns["alpyka_cpu_serial"],
        "device_function_over_inline": ns["alpyka_cpu_serial_device_function"] / ns["alpyka_cpu_serial"],
    }


def shared_atomics(n_modules: int, reps: int) -> dict:
    """Seconds per call: :func:`charge_per_cluster` on cpu_serial and cpu_threads vs njit."""
    rng = np.random.default_rng(3)
    digis = rng.integers(20, 400, n_modules)
    module_start = np.zeros(n_modules + 1, np.int64)
    module_start[1:] = np.cumsum(digis)
    n = int(module_start[-1])
    charge = rng.uniform(0, 100, n).astype(np.float32)
    cluster = rng.integers(0, MAX_CLUSTERS, n).astype(np.int32)
    ref = np.zeros(n_modules * MAX_CLUSTERS, np.float32)
    nb_charge_per_cluster(ref, charge, cluster, module_start, n_modules)
    fns = {"numba_njit": lambda: nb_charge_per_cluster(ref, charge, cluster, module_start, n_modules)}
    for be in ("cpu_serial", "cpu_threads"):
        q = pk.Queue(pk.device(be), blocking=True)
        out = np.zeros_like(ref)
        wd = pk.WorkDiv(n_modules, 1, 64)  # 64 elements per thread, as alpaka's CPU work divisions
        pk.exec(q, wd, charge_per_cluster, out, charge, cluster, module_start, n_modules)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-3)
        fns[f"alpyka_{be}"] = lambda q=q, wd=wd, out=out: pk.exec(
            q, wd, charge_per_cluster, out, charge, cluster, module_start, n_modules
        )
    t = _timed(fns, reps)
    return {
        "modules": n_modules,
        "digis": n,
        "seconds": t,
        "njit_over_alpyka": {k: t["numba_njit"] / v for k, v in t.items() if k != "numba_njit"},
    }


def measure(quick: bool = False, smoke: bool = False) -> dict:
    """Both figures: ``{"philox": ..., "shared_atomics": ...}``."""
    reps = 5 if smoke else 9 if quick else 21
    draws = 1 << 18 if smoke else 1 << 21 if quick else 1 << 23
    modules = 200 if smoke else 2000
    return {"philox": philox(draws, reps), "shared_atomics": shared_atomics(modules, reps)}


if __name__ == "__main__":
    print(json.dumps(measure(quick="--quick" in sys.argv, smoke="--smoke" in sys.argv), indent=2))
