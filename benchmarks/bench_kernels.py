"""Kernel benchmarks: alpyka's CPU backends beside hand-written numba, numba prange, Warp CPU and
raw pyopencl (PoCL), measured side by side in one run.

    PYTHONPATH=. python benchmarks/bench_kernels.py [--quick | --smoke] [--out DIR]

Writes benchmarks/results/kernels.json and kernels.png. Sections: a streaming SoA kernel
(memory-bound; alpyka with a few big blocks and with ``valid_workdiv``'s one-element blocks), a
compute-bound kernel, the launch overhead of a tiny kernel, the launch cost against n (axpy,
1e2..1e7 elements: cpu_serial and cpu_threads on blocking and non-blocking queues, opencl, numba
njit and prange, Warp CPU; :mod:`_launch_vs_n`), per-event kernels (Philox draws vs numpy, a
shared-atomics kernel vs numba njit: :mod:`_per_event_kernels`) and the first compile / warm
start from the disk cache (fresh subprocesses). The contenders of a section run on the same arrays, are
timed the same way and interleaved round-robin (other load hits them alike); figures are medians
(``*_min_*`` keys: the fastest sample), ``targets`` checks the goals
(streaming at >= 0.9x njit on both CPU backends, cpu_threads' compute >= 1.7x cpu_serial's, a
blocking cpu_serial launch < 5 us, a warm first launch < 50 ms).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported as benchmarks.bench_kernels
import _common as common
import _per_event_kernels as per_event
from _kernel_peers import (
    interleaved,
    medians,
    nb_heavy,
    nb_heavy_prange,
    nb_saxpy,
    nb_saxpy_prange,
    nb_tiny,
    pyopencl_launch,
    warp_peer,
)
from _launch_vs_n import LAUNCH_SIZES, launch_vs_n

ROOT = common.REPO_ROOT

import numba  # noqa: E402

import portable as pk  # noqa: E402
import soa  # noqa: E402


class Stream(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)


@pk.kernel
def saxpy_soa(acc, out, inp, a, n):
    for i in acc.uniform_elements(n):
        out.x[i] = a * inp.x[i] + inp.y[i]


@pk.kernel
def compute_heavy(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        v = inp.x[i]
        for k in range(12):  # noqa: B007 - a kernel body: the loop only repeats the work
            v = math.sin(v) * np.float32(0.9) + math.cos(v) * np.float32(0.3) + math.sqrt(abs(v) + np.float32(1))
        out.x[i] = v


@pk.kernel
def tiny(acc, out, v):
    if acc.once_per_grid():
        out[0] = v


# ----------------------------------------------------------------------------- cold/warm start
_START = textwrap.dedent("""
    import sys, time
    t0 = time.perf_counter()
    sys.path.insert(0, {root!r})
    import numpy as np
    import portable as pk
    {prewarm}
    t1 = time.perf_counter()
    from benchmarks.bench_kernels import tiny
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    out = np.zeros(1, np.float32)
    t2 = time.perf_counter()
    pk.exec(q, pk.WorkDiv(1, 1, 1), tiny, out, np.float32(1.5))
    t3 = time.perf_counter()
    assert out[0] == 1.5
    print(t1 - t0, t3 - t2)
""")
_PREWARM = (
    "from numba import njit; "
    "njit(lambda: 0)()  # numba's one-time initialisation, paid by any process's first jitted call"
)


def start_times(cache: str, labels: tuple[str, ...] = ("plain", "prewarmed")) -> dict[str, tuple[float, float]]:
    """{label: (import seconds, first launch seconds)} of a fresh process per label: ``plain``,
    and ``prewarmed`` (numba initialised before the first launch)."""
    env = dict(os.environ, ALPYKA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    res = {}
    for label, pre in (("plain", ""), ("prewarmed", _PREWARM)):
        if label not in labels:
            continue
        src = _START.format(root=str(ROOT), prewarm=pre)
        out = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True, check=True)
        imp, first = map(float, out.stdout.split())
        res[label] = (imp, first)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = common.make_parser(__doc__)
    args = common.parse_args(ap, argv)
    n = 1 << 16 if args.smoke else 1 << 20 if args.quick else 1 << 24
    n_heavy = 1 << 12 if args.smoke else 1 << 16 if args.quick else 1 << 20
    reps = 3 if args.quick else 7
    launches = (200, 3) if args.smoke else (2000, 9)  # a peer's tiny-kernel launches per sample, samples
    results: dict = {
        "n_stream": n,
        "n_compute": n_heavy,
        "cores": os.cpu_count(),
        "numba": numba.__version__,
        "quick": args.quick,
    }
    steps = tqdm(total=8, desc="bench_kernels", unit="section", disable=args.no_progress)

    # ---------------------------------------------------------------- streaming
    # Every contender runs on the same SoA columns (the numba loops get the views' arrays), is
    # timed the same way (one blocking call per sample) and interleaved with the others.
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = np.float32(2)
    host = pk.host()
    inp = pk.PortableCollection(Stream, n, host)
    out = pk.PortableCollection(Stream, n, host)
    inp.view().x[:], inp.view().y[:] = x, y
    v_out, v_in = out.view(), inp.const_view()
    o, xs, ys = v_out.x, v_in.x, v_in.y
    fns = {}
    for be in ("cpu_serial", "cpu_threads"):
        dev = pk.device(be)
        q = pk.Queue(dev, blocking=True)
        blocks = 4 * (os.cpu_count() or 1)
        for label, wd in (
            ("", pk.make_workdiv(dev, blocks, -(-n // blocks))),  # a few big blocks
            ("_valid_workdiv", pk.valid_workdiv(dev, n)),
        ):  # n one-element blocks
            fns[be + label] = lambda q=q, wd=wd: pk.exec(q, wd, saxpy_soa, v_out, v_in, a, n)
    fns["numba_njit"] = lambda: nb_saxpy(o, xs, ys, a)
    fns["numba_prange"] = lambda: nb_saxpy_prange(o, xs, ys, a)
    for name, fn in fns.items():  # each one computes the right thing
        v_out.x[:] = 0
        fn()
        assert np.allclose(v_out.x, a * x + y), name
    stream_t = interleaved(fns, reps)
    stream = medians(stream_t)
    steps.update()
    w = warp_peer(n, reps, x, y, *launches)
    if "saxpy_s" in w:
        stream["warp_cpu"] = w["saxpy_s"]
    results["stream_seconds"] = stream
    results["stream_min_seconds"] = {k: v["min"] for k, v in stream_t.items()}
    results["stream_GBps"] = {k: 3 * 4 * n / t / 1e9 for k, t in stream.items()}
    results["stream_ratio_vs_njit"] = {k: stream["numba_njit"] / t for k, t in stream.items()}
    steps.update()

    # ---------------------------------------------------------------- compute-bound
    xh = rng.standard_normal(n_heavy).astype(np.float32)
    inp_h = pk.PortableCollection(Stream, n_heavy, host)
    out_h = pk.PortableCollection(Stream, n_heavy, host)
    inp_h.view().x[:] = xh
    vh_out, vh_in = out_h.view(), inp_h.const_view()
    oh, xhs = vh_out.x, vh_in.x
    fns = {}
    for be in ("cpu_serial", "cpu_threads"):
        dev = pk.device(be)
        q = pk.Queue(dev, blocking=True)
        wd = pk.make_workdiv(dev, 64, -(-n_heavy // 64))
        fns[be] = lambda q=q, wd=wd: pk.exec(q, wd, compute_heavy, vh_out, vh_in, n_heavy)
    fns["numba_njit"] = lambda: nb_heavy(oh, xhs)
    fns["numba_prange"] = lambda: nb_heavy_prange(oh, xhs)
    ref = None
    diff = 0.0
    for fn in fns.values():
        vh_out.x[:] = 0
        fn()
        got = np.array(vh_out.x)
        ref = got if ref is None else ref
        diff = max(diff, float(np.max(np.abs(got - ref))))
    comp_t = interleaved(fns, reps)
    comp = medians(comp_t)
    results["compute_check_max_abs_diff"] = diff
    results["compute_seconds"] = comp
    results["compute_min_seconds"] = {k: v["min"] for k, v in comp_t.items()}
    results["compute_threads_over_serial"] = comp["cpu_serial"] / comp["cpu_threads"]
    results["compute_prange_over_njit"] = comp["numba_njit"] / comp["numba_prange"]
    steps.update()

    # ---------------------------------------------------------------- launch overhead
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    small = np.zeros(1, np.float32)
    wd1 = pk.WorkDiv(1, 1, 1)
    v = np.float32(1.5)
    launch_t = interleaved(
        {
            "alpyka_cpu_serial_blocking": lambda: pk.exec(q, wd1, tiny, small, v),
            "numba_direct_call": lambda: nb_tiny(small, v),
        },
        3 if args.smoke else 15 if args.quick else 41,
        launches[0],
    )
    launch = medians(launch_t)
    if "launch_s" in w:
        launch["warp_cpu"] = w["launch_s"]
    ocl = pyopencl_launch(*launches)
    if "launch_s" in ocl:
        launch["pyopencl_pocl"] = ocl["launch_s"]
    results["launch_us"] = {k: t * 1e6 for k, t in launch.items()}
    results["launch_min_us"] = {k: v["min"] * 1e6 for k, v in launch_t.items()}
    results["launch_ratio_vs_numba"] = {k: t / launch["numba_direct_call"] for k, t in launch.items()}
    results["peer_errors"] = {k: d["error"] for k, d in (("warp", w), ("pyopencl", ocl)) if "error" in d}
    steps.update()

    # ---------------------------------------------------------------- launch cost against n
    sizes = LAUNCH_SIZES[:3] if args.smoke else LAUNCH_SIZES[:5] if args.quick else LAUNCH_SIZES
    lvn = launch_vs_n(sizes, 3 if args.smoke else reps, 2e-3 if args.smoke else 20e-3)
    results["launch_vs_n"] = lvn
    if "warp_cpu" in lvn["errors"]:
        results["peer_errors"]["warp_launch_vs_n"] = lvn["errors"]["warp_cpu"]
    steps.update()

    # ----------------------------------------------------------------------------- per-event kernels
    results["per_event"] = per_event.measure(quick=args.quick, smoke=args.smoke)
    steps.update()

    # ---------------------------------------------------------------- first compile / warm start
    with tempfile.TemporaryDirectory() as cache:
        cold = start_times(cache, ("plain",))  # compiles; a prewarmed run after it would hit the cache
        warms = [start_times(cache) for _ in range(1 if args.quick else 3)]
    warm = {
        label: tuple(statistics.median(wr[label][i] for wr in warms) for i in range(2))
        for label in ("plain", "prewarmed")
    }
    results["start"] = {
        "cold_first_launch_s": cold["plain"][1],
        "warm_first_launch_s": warm["plain"][1],
        "warm_first_launch_after_numba_init_s": warm["prewarmed"][1],
        "import_portable_s": warm["plain"][0],
        "numba_init_s": warm["plain"][1] - warm["prewarmed"][1],
    }
    ratio = results["stream_ratio_vs_njit"]
    results["targets"] = {  # the goals, from the medians above
        "stream_cpu_serial_vs_njit>=0.9": ratio["cpu_serial"] >= 0.9,
        "stream_cpu_threads_vs_njit>=0.9": ratio["cpu_threads"] >= 0.9,
        "compute_threads_over_serial>=1.7": results["compute_threads_over_serial"] >= 1.7,
        "launch_cpu_serial_blocking<5us": results["launch_us"]["alpyka_cpu_serial_blocking"] < 5,
        "warm_first_launch_after_numba_init<50ms": results["start"]["warm_first_launch_after_numba_init_s"] < 0.05,
    }
    steps.update()

    rows = [
        {"section": section, "contender": name, "ratio": value}
        for section, key in (
            ("streaming vs numba njit", "stream_ratio_vs_njit"),
            ("launch time vs a direct numba call", "launch_ratio_vs_numba"),
        )
        for name, value in results[key].items()
    ]
    rows.append(
        {
            "section": "compute-bound",
            "contender": "cpu_threads over cpu_serial",
            "ratio": results["compute_threads_over_serial"],
        }
    )
    rows.append(
        {
            "section": "compute-bound",
            "contender": "numba prange over njit",
            "ratio": results["compute_prange_over_njit"],
        }
    )
    summary = {
        "streaming GB/s": results["stream_GBps"],
        "streaming vs njit": results["stream_ratio_vs_njit"],
        "launch us": results["launch_us"],
        "compute-bound speed-up": {
            "cpu_threads/cpu_serial": results["compute_threads_over_serial"],
            "prange/njit": results["compute_prange_over_njit"],
        },
        "start s": results["start"],
        "per-event kernels": {  # peer time / alpyka time
            "philox numpy/cpu_serial": results["per_event"]["philox"]["numpy_over_alpyka"],
            "philox inline/via device function": 1 / results["per_event"]["philox"]["device_function_over_inline"],
            **{
                f"shared atomics njit/{k[7:]}": v
                for k, v in results["per_event"]["shared_atomics"]["njit_over_alpyka"].items()
            },
        },
    }
    # one row per size (the summary is {row: {column: value}}): contenders as columns
    by_n = results["launch_vs_n"]["us"]
    sizes = sorted({n for per in by_n.values() for n in per}, key=int)
    for n in sizes:
        summary[f"launch us, n={int(n):.0e}"] = {c: per[n] for c, per in by_n.items() if n in per}
        summary[f"non-blocking adds us, n={int(n):.0e}"] = {
            c: per[n] for c, per in results["launch_vs_n"]["nonblocking_added_us"].items() if n in per
        }
    doc = common.result_document(
        "kernels",
        f"cpu ({os.cpu_count()} cores)",
        args.quick,
        rows,
        summary,
        **{k: v for k, v in results.items() if k != "quick"},
    )
    out_path = common.write_json(args.out, "kernels", doc)
    plot(results, out_path.with_suffix(".png"))
    steps.update()
    steps.close()
    print(json.dumps(results, indent=2))


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(24, 4.5))
    panels = [
        ("stream_GBps", "streaming SoA saxpy (GB/s)"),
        ("compute_seconds", "compute-bound (s)"),
        ("launch_us", "tiny kernel launch (us)"),
        ("start", "start-up (s)"),
    ]
    lvn = r.get("launch_vs_n")
    if lvn:
        ax = axes[4]
        for name, by_n in lvn["us"].items():
            ns = [int(k) for k in by_n]
            style = "--" if "nonblocking" in name else ":" if "pipelined" in name else "-"
            ax.plot(ns, list(by_n.values()), style, marker="o", markersize=3, label=name.replace("alpyka_", ""))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (float32 axpy)")
        ax.set_title("launch cost against n (us per launch)", fontsize=10)
        ax.legend(fontsize=6)
    for ax, (key, title) in zip(axes, panels):
        d = r[key]
        ax.bar(range(len(d)), list(d.values()), color="tab:blue")
        ax.set_xticks(range(len(d)))
        ax.set_xticklabels(list(d.keys()), rotation=35, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        if key in ("launch_us",):
            ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
