"""The hand-written peers bench_kernels times beside alpyka (numba njit and prange, Warp CPU, raw
pyopencl) and the timing helpers every section of it shares."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported as benchmarks._kernel_peers
import _common as common
from numba import njit, prange


# ----------------------------------------------------------------------------- timing
def interleaved(fns: dict, reps: int, calls: int = 1) -> dict[str, dict[str, float]]:
    """Time every function of ``fns`` ``reps`` times, round-robin (``common.interleaved``), after
    one warm-up call each (compilation, caches, first touch of the pages); ``calls`` calls per
    sample. Gives {name: {"median": s, "min": s}} per call; a contender that raises fails the run."""
    timings, errors = common.interleaved(fns, reps, calls=calls)
    if errors:
        raise RuntimeError(f"benchmark contenders failed: {errors}")
    return {k: {"median": t.median, "min": t.min} for k, t in timings.items()}


def per_call(fn, calls: int, rounds: int = 9) -> float:
    """Median time of one call of ``fn`` (``rounds`` rounds of ``calls`` calls)."""
    return interleaved({"f": fn}, rounds, calls)["f"]["median"]


def medians(timings: dict) -> dict[str, float]:
    return {k: v["median"] for k, v in timings.items()}


# ----------------------------------------------------------------------------- numba
@njit(nogil=True, cache=True)
def nb_saxpy(out, x, y, a):
    for i in range(x.shape[0]):
        out[i] = a * x[i] + y[i]


@njit(nogil=True, cache=True, parallel=True)
def nb_saxpy_prange(out, x, y, a):
    for i in prange(x.shape[0]):
        out[i] = a * x[i] + y[i]


def _heavy_body(v):
    for _ in range(12):
        v = math.sin(v) * np.float32(0.9) + math.cos(v) * np.float32(0.3) + math.sqrt(abs(v) + np.float32(1))
    return v


nb_heavy_body = njit(inline="always")(_heavy_body)


@njit(nogil=True, cache=True)
def nb_heavy(out, x):
    for i in range(x.shape[0]):
        out[i] = nb_heavy_body(x[i])


@njit(nogil=True, cache=True, parallel=True)
def nb_heavy_prange(out, x):
    for i in prange(x.shape[0]):
        out[i] = nb_heavy_body(x[i])


@njit(nogil=True, cache=True)
def nb_tiny(out, v):
    out[0] = v


# ----------------------------------------------------------------------------- peers
def warp_kernels(wp):
    @wp.kernel
    def warp_saxpy(
        out: wp.array(dtype=wp.float32), x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), a: wp.float32
    ):
        i = wp.tid()
        out[i] = a * x[i] + y[i]

    @wp.kernel
    def warp_tiny(out: wp.array(dtype=wp.float32), v: wp.float32):
        if wp.tid() == 0:
            out[0] = v

    return warp_saxpy, warp_tiny


def warp_peer(n: int, reps: int, x: np.ndarray, y: np.ndarray, calls: int = 2000, rounds: int = 9) -> dict:
    try:
        import warp as wp
    except ImportError as exc:
        return {"error": f"warp unavailable: {exc}"}
    try:
        wp.config.quiet = True
        wp.init()
        k_saxpy, k_tiny = warp_kernels(wp)
        wx, wy = wp.array(x, dtype=wp.float32, device="cpu"), wp.array(y, dtype=wp.float32, device="cpu")
        wo = wp.zeros(n, dtype=wp.float32, device="cpu")

        def run():
            wp.launch(k_saxpy, dim=n, inputs=[wo, wx, wy, 2.0], device="cpu")
            wp.synchronize_device("cpu")

        t = interleaved({"run": run}, reps)["run"]["median"]
        small = wp.zeros(1, dtype=wp.float32, device="cpu")

        def launch_tiny():
            wp.launch(k_tiny, dim=1, inputs=[small, 1.5], device="cpu")

        lt = per_call(launch_tiny, calls, rounds)
        ok = np.allclose(wo.numpy(), 2.0 * x + y)
        return {"saxpy_s": t, "launch_s": lt, "correct": bool(ok)}
    except Exception as exc:  # a peer failing must not stop the benchmark
        return {"error": f"{type(exc).__name__}: {exc}"}


def pyopencl_launch(calls: int = 2000, rounds: int = 9) -> dict:
    try:
        import pyopencl as cl
    except ImportError as exc:
        return {"error": f"pyopencl unavailable: {exc}"}
    try:
        plat = [p for p in cl.get_platforms() if p.get_devices()]
        ctx = cl.Context([plat[0].get_devices()[0]])
        q = cl.CommandQueue(ctx)
        prg = cl.Program(
            ctx, "__kernel void tiny(__global float* o, float v) { if (get_global_id(0) == 0) o[0] = v; }"
        ).build()
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
        knl = prg.tiny
        v = np.float32(1.5)

        def launch():
            knl(q, (1,), None, buf, v)
            q.finish()

        return {"launch_s": per_call(launch, calls, rounds), "device": ctx.devices[0].name}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
