"""The launch-cost section of bench_kernels: the time of one axpy launch against n on alpyka's
CPU backends (blocking, non-blocking and pipelined queues), opencl, numba and Warp CPU."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported as benchmarks._launch_vs_n
import _common as common
from _kernel_peers import interleaved, nb_saxpy, nb_saxpy_prange, warp_kernels

import portable as pk


@pk.kernel
def axpy(acc, out, x, y, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i] + y[i]


# ----------------------------------------------------------------------------- launch cost vs n
#: sizes of the launch-cost section (per-event kernels are 1e3..1e5 elements)
LAUNCH_SIZES = (100, 1000, 10_000, 100_000, 1_000_000, 10_000_000)


def _warp_axpy(n: int, x: np.ndarray, y: np.ndarray, a: np.float32):
    """``launch + synchronize`` of a Warp CPU axpy over ``n`` elements, or (None, reason)."""
    try:
        import warp as wp

        wp.config.quiet = True
        wp.init()
        k_saxpy, _ = warp_kernels(wp)
        wx, wy = wp.array(x, dtype=wp.float32, device="cpu"), wp.array(y, dtype=wp.float32, device="cpu")
        wo = wp.zeros(n, dtype=wp.float32, device="cpu")
        fa = float(a)

        def run():
            wp.launch(k_saxpy, dim=n, inputs=[wo, wx, wy, fa], device="cpu")
            wp.synchronize_device("cpu")

        run()
        if not np.allclose(wo.numpy(), a * x + y):
            return None, None, "warp: wrong result"
        return run, wo.numpy, None
    except Exception as exc:  # a peer failing must not stop the benchmark
        return None, None, f"warp: {type(exc).__name__}: {exc}"


def launch_vs_n(sizes: tuple[int, ...], reps: int, budget_s: float) -> dict:
    """Per-launch time of an axpy over float32 arrays (``pk.valid_workdiv``) against n:
    alpyka cpu_serial / cpu_threads on a blocking queue (``exec``) and a non-blocking one
    (``exec`` + ``wait``, and 50 pipelined launches + one ``wait``, per launch), alpyka opencl
    (blocking), numba ``njit`` and ``prange`` called directly, Warp CPU (``launch`` +
    ``synchronize``). Contenders of one size run on the same arrays, interleaved; each sample
    is about ``budget_s`` long."""
    rng = np.random.default_rng(1)
    a = np.float32(2)
    out: dict = {"sizes": list(sizes), "us": {}, "min_us": {}, "errors": {}}
    pipe = 50
    queues = {}
    for be in common.backends(("cpu_serial", "cpu_threads", "opencl")):
        dev = pk.device(be)
        queues[be] = (dev, pk.Queue(dev, blocking=True), pk.Queue(dev))
    for n in sizes:
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        o = np.zeros(n, np.float32)
        ref = a * x + y
        fns: dict = {}
        checks: dict = {}
        for be, (dev, qb, qn) in queues.items():
            wd = pk.valid_workdiv(dev, n)
            if be == "opencl":
                bufs = [pk.Buffer(dev, (n,), np.float32) for _ in range(3)]
                pk.memcpy(qb, bufs[1], x)
                pk.memcpy(qb, bufs[2], y)
                fns["alpyka_opencl_blocking"] = lambda qb=qb, wd=wd, b=bufs: pk.exec(
                    qb, wd, axpy, b[0], b[1], b[2], a, n
                )

                def got(b=bufs, qb=qb):
                    h = np.zeros(n, np.float32)
                    pk.memcpy(qb, h, b[0])
                    return h

                checks["alpyka_opencl_blocking"] = got
                continue
            fns[f"alpyka_{be}_blocking"] = lambda qb=qb, wd=wd: pk.exec(qb, wd, axpy, o, x, y, a, n)

            def nonblocking(qn=qn, wd=wd):
                pk.exec(qn, wd, axpy, o, x, y, a, n)
                qn.wait()

            def pipelined(qn=qn, wd=wd):
                for _ in range(pipe):
                    pk.exec(qn, wd, axpy, o, x, y, a, n)
                qn.wait()

            fns[f"alpyka_{be}_nonblocking"] = nonblocking
            fns[f"alpyka_{be}_pipelined{pipe}"] = pipelined
        fns["numba_njit"] = lambda: nb_saxpy(o, x, y, a)
        fns["numba_prange"] = lambda: nb_saxpy_prange(o, x, y, a)
        warp_run, warp_got, why = _warp_axpy(n, x, y, a)
        if warp_run is not None:
            fns["warp_cpu"] = warp_run
            checks["warp_cpu"] = warp_got
        else:
            out["errors"]["warp_cpu"] = why
        for name, fn in fns.items():  # each one computes the right thing
            o[:] = 0
            fn()
            res = checks[name]() if name in checks else o
            assert np.allclose(res, ref), (name, n)
        t0 = time.perf_counter()
        for fn in fns.values():
            fn()
        one = (time.perf_counter() - t0) / len(fns)  # a rough call time, for the calls per sample
        calls = max(1, int(budget_s / max(one, 1e-7)))
        per = {k: (pipe if "pipelined" in k else 1) for k in fns}
        t = interleaved(fns, reps, calls)
        for k, v in t.items():
            out["us"].setdefault(k, {})[str(n)] = v["median"] / per[k] * 1e6
            out["min_us"].setdefault(k, {})[str(n)] = v["min"] / per[k] * 1e6
    # the non-blocking queue's extra cost over a blocking launch (medians, same run)
    out["nonblocking_added_us"] = {
        be: {
            str(n): out["us"][f"alpyka_{be}_nonblocking"][str(n)] - out["us"][f"alpyka_{be}_blocking"][str(n)]
            for n in sizes
        }
        for be in ("cpu_serial", "cpu_threads")
        if f"alpyka_{be}_nonblocking" in out["us"]
    }
    out["pipelined_added_us"] = {
        be: {
            str(n): out["us"][f"alpyka_{be}_pipelined{pipe}"][str(n)] - out["us"][f"alpyka_{be}_blocking"][str(n)]
            for n in sizes
        }
        for be in ("cpu_serial", "cpu_threads")
        if f"alpyka_{be}_pipelined{pipe}" in out["us"]
    }
    return out
