"""OpenCL waits on free and busy cores, side by side in one run:

for every CPU OpenCL device (Intel's runtime, PoCL), with 0 and then ``n`` processes spinning on
the cores (started and killed here, ``n`` = the core count; the full run adds twice that):

- a blocking tiny launch: alpyka's ``pk.exec`` on a blocking queue against raw pyopencl with the
  arguments set once (``enqueue_nd_range_kernel`` + ``finish``: what a user writing pyopencl by
  hand gets), alpyka with its interruptible wait only (every wait handed or polled, as before the
  joined wait), alpyka with its joined wait only (its busy-core choice, whatever the cores) and
  alpyka with its Python launcher only (as where no C compiler builds the native launch), alpyka
  and raw pyopencl (``knl(queue, ...)`` with its scalar dtypes set) with a scalar that changes at
  each launch (two values in turn: each joined once its time is learned) and alpyka with a scalar
  its launcher has no time for at each launch (waited for interruptibly), and the raw peer with
  1 us of Python before each enqueue (what any launcher's own work costs there),
  interleaved round by round (paired ratios): wall time and CPU time (``time.process_time``:
  every thread of the process, the runtime's included) per launch, and how often alpyka's own
  choice (backends/_other_load.py) took the joined wait;
- a chain of 20 tiny kernels + ``q.wait()`` replayed as a graph vs launched one by one
  (bench_graph's contenders), interleaved.

    PYTHONPATH=. python benchmarks/bench_waits.py [--quick] [--smoke] [--out benchmarks/results]

Writes ``<out>/waits.json`` and ``<out>/waits.png``. Timings never decide a test.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import portable as pk
from backends._other_load import FixedLoad
from benchmarks._common import (
    BusyCores,
    interleaved,
    make_parser,
    mode,
    paired_ratio,
    parse_args,
    progress,
    pyplot,
    ratio,
    result_document,
    save_figure,
    write_json,
)
from benchmarks.bench_graph import _alpyka_contenders as graph_contenders
from portable.spi import queue_impl

OURS, RAW = "alpyka pk.exec, blocking queue", "raw pyopencl, args set once + finish"
#: raw pyopencl as written where an argument changes between launches: ``knl(queue, ...)`` sets
#: them each time (pyopencl's ``Kernel.__call__``, its fast form: ``set_scalar_arg_dtypes`` and
#: Python scalars; numpy scalars without it take 17 us each)
RAW_EACH = "raw pyopencl, a scalar changed each launch (scalar dtypes set) + finish"
OURS_EACH = "alpyka pk.exec, a scalar changed each launch"
#: a scalar its launcher has no time for at each launch (128 values in turn; a launcher keeps 64):
#: its run's time unknown, so waited for interruptibly (handed on busy cores)
OURS_NEW = "alpyka pk.exec, a scalar never seen each launch"
#: the peer with 1 us of Python before each enqueue (any launcher's own work): on PoCL with busy
#: cores that alone costs what alpyka's launch costs over the peer (docs/backends.md)
RAW_GAP = "raw pyopencl, args set once, 1 us of Python first + finish"
#: every wait the free-core interruptible one (handed after polling, or polled), on busy cores too:
#: the old way, before the joined wait and the busy-core hand-over
BEFORE = "alpyka, free-core interruptible wait only"
JOINED = "alpyka, joined wait only"
PYTHON = "alpyka, Python launcher only (no native call)"


_ALWAYS_BUSY = FixedLoad(busy=True)


@pk.kernel
def tiny(acc, out, v):
    for i in acc.uniform_elements(1):
        out[i] = v


def _devices() -> list[Any]:
    """The CPU OpenCL devices that run kernels natively (not a simulator)."""
    if "opencl" not in pk.available_backends():
        return []
    return [d for d in pk.devices("opencl") if d.properties.get("type") == "cpu" and not d.properties.get("simulator")]


def _contenders(dev: Any) -> dict[str, Callable[[], None]]:
    """The contenders on one native queue (a blocking ``pk.Queue`` and its ``native_handle``: the
    runtime's state per queue then favours none of them); the Python launcher's on a queue of
    its own (its fast launcher made without the native call)."""
    import pyopencl as cl

    from backends import _opencl_launch
    from backends._opencl_native import native_problem

    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 1, np.float32, queue=q)
    wd, v = pk.WorkDiv(1, 1, 1), np.float32(1.5)
    for _ in range(3):  # the third launch takes the fast path
        pk.exec(q, wd, tiny, out, v)
    q_py, wd_py = pk.Queue(dev, blocking=True), pk.WorkDiv(1, 1, 1)
    out_py = pk.Buffer(dev, 1, np.float32, queue=q_py)
    native, _opencl_launch.blocking_launch = _opencl_launch.blocking_launch, lambda *a: None
    try:
        for _ in range(3):
            pk.exec(q_py, wd_py, tiny, out_py, v)
    finally:
        _opencl_launch.blocking_launch = native
    if _native(q_py, wd_py) or _native(q, wd) != (native_problem() is None):
        raise RuntimeError("the Python launcher's contender runs natively, or alpyka's does not where it could")
    plan = next(p for k, p in pk.get_backend("opencl").plans(tiny).items() if k[0] == dev.memory_space)
    cq = q.native_handle
    program = cl.Program(dev.native.context, plan.src.text).build()
    knl = cl.Kernel(program, plan.src.entry)
    raw_out = pk.Buffer(dev, 1, np.float32)
    knl.set_args(*plan.pack((raw_out, v), wd, 0))
    waits = queue_impl(q).waits

    def ours() -> None:
        pk.exec(q, wd, tiny, out, v)

    def raw() -> None:
        cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,))
        cq.finish()

    packed = plan.pack((raw_out, v), wd, 0)
    knl_each = cl.Kernel(program, plan.src.entry)
    knl_each.set_scalar_arg_dtypes([type(a) if isinstance(a, np.generic) else None for a in packed])
    at = next(i for i, a in enumerate(packed) if isinstance(a, np.float32))  # v's place
    each_args = [
        tuple(v2 if i == at else a.item() if isinstance(a, np.generic) else a for i, a in enumerate(packed))
        for v2 in (1.5, 2.5)
    ]
    values, turn = (np.float32(1.5), np.float32(2.5)), itertools.count()

    def ours_each() -> None:
        pk.exec(q, wd, tiny, out, values[next(turn) & 1])

    unseen = [np.float32(1.5 * 2.0**k) for k in range(-64, 64)]

    def ours_new() -> None:
        pk.exec(q, wd, tiny, out, unseen[next(turn) & 127])

    def raw_each() -> None:
        knl_each(cq, (1,), (1,), *each_args[next(turn) & 1])
        cq.finish()

    def raw_gap(clock: Callable[[], float] = time.perf_counter) -> None:
        end = clock() + 1e-6
        while clock() < end:
            pass
        cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,))
        cq.finish()

    def interruptible_only() -> None:  # every wait handed (Intel) or polled (others): the old way
        waits.joins = False
        try:
            pk.exec(q, wd, tiny, out, v)
        finally:
            waits.joins = True

    def joined_only() -> None:  # a known-short wait always joined, as if the cores were busy
        load, waits.load = waits.load, _ALWAYS_BUSY
        try:
            pk.exec(q, wd, tiny, out, v)
        finally:
            waits.load = load

    def python_only() -> None:
        pk.exec(q_py, wd_py, tiny, out_py, v)

    return {
        OURS: ours,
        RAW: raw,
        OURS_EACH: ours_each,
        OURS_NEW: ours_new,
        RAW_EACH: raw_each,
        RAW_GAP: raw_gap,
        BEFORE: interruptible_only,
        JOINED: joined_only,
        PYTHON: python_only,
    }


def _native(q: pk.Queue, wd: pk.WorkDiv) -> bool:
    """Whether ``tiny``'s fast launcher over ``wd`` on ``q`` is the native launch."""
    fast = q.launch_sites[tiny].peek(id(wd)).fast[0]
    run = fast.__closure__[fast.__code__.co_freevars.index("_run")].cell_contents
    return type(getattr(run, "__self__", None)).__name__ == "BlockingLaunch"


def _batched(fn: Callable[[], None], calls: int, cpu: list[float]) -> Callable[[], None]:
    """``calls`` calls of ``fn`` as one, appending their CPU seconds per call to ``cpu``."""

    def batch() -> None:
        c0 = time.process_time()
        for _ in range(calls):
            fn()
        cpu.append((time.process_time() - c0) / calls)

    return batch


def _settle(fn: Callable[[], None], load: Any, seconds: float = 0.3, samples: int = 2) -> None:
    """Launch ``fn`` for ``seconds`` and until alpyka's reading of the cores (``load``) was taken
    ``samples`` times: the choice made under this load, not the last one (a user's loop of
    launches settles as fast: within ~0.02 s of waits, 0.1 s apart)."""
    start, sampled, due = time.perf_counter(), 0, load.due
    while time.perf_counter() - start < 30:
        fn()
        if load.due != due:
            sampled, due = sampled + 1, load.due
        if sampled >= samples and time.perf_counter() - start >= seconds:
            return


def launches(dev: Any, busy: BusyCores, rounds: int, calls: int) -> tuple[list[dict], dict]:
    """The blocking tiny launch of ``dev`` under ``busy``: rows and the summary entry."""
    fns = _contenders(dev)
    per = {name: calls for name in fns} | {BEFORE: max(1, calls // 10)}  # (BEFORE: up to ms a launch)
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    batches = {name: _batched(fn, per[name], cpu[name]) for name, fn in fns.items()}
    from backends import _opencl_waits  # (pyopencl is importable here)
    from backends._opencl_native import native_problem

    seen: list[tuple[bool, float | None]] = []  # alpyka's choice after each of its batches
    ours, load = batches[OURS], _opencl_waits.other_load
    batches[OURS] = lambda: (ours(), seen.append((load.busy, load.others)))
    _settle(fns[OURS], load)
    timings, errors = interleaved(batches, rounds, warmup=1, min_rounds=3)
    for name, t in timings.items():  # seconds per launch
        t.times = [x / per[name] for x in t.times]
    load = busy.load()
    rows = []
    for name in fns:
        row: dict[str, Any] = {"section": "blocking launch", "device": dev.name, "runtime": _runtime(dev)}
        row.update(variant=name, **load)
        if name in timings:
            t, c = timings[name], cpu[name][1:]  # (the warm-up's batch first)
            row.update(
                us_per_launch=1e6 * t.median,
                min_us_per_launch=1e6 * t.min,
                cpu_us_per_launch=1e6 * statistics.median(c),
                rounds=len(t.times),
            )
        else:
            row.update(status="failed", reason=errors.get(name, "not measured"))
        rows.append(row)
    if OURS not in timings or RAW not in timings:
        return rows, {}
    cpu_pairs = [a / b for a, b in zip(cpu[OURS][1:], cpu[RAW][1:]) if b > 0]
    entry = {
        "alpyka_over_raw": paired_ratio(timings[OURS], timings[RAW]),
        "alpyka_over_raw_best": ratio(timings[OURS].min, timings[RAW].min),
        "cpu_alpyka_over_raw": statistics.median(cpu_pairs) if cpu_pairs else None,
        "alpyka_us": 1e6 * timings[OURS].median,
        "raw_us": 1e6 * timings[RAW].median,
    }
    if BEFORE in timings:
        entry["interruptible_only_over_raw"] = paired_ratio(timings[BEFORE], timings[RAW])
    if RAW_EACH in timings and OURS_EACH in timings:
        entry["scalar_changed_alpyka_over_raw"] = paired_ratio(timings[OURS_EACH], timings[RAW_EACH])
    if RAW_EACH in timings and OURS_NEW in timings:
        entry["scalar_unseen_alpyka_over_raw"] = paired_ratio(timings[OURS_NEW], timings[RAW_EACH])
    if RAW_GAP in timings:
        entry["raw_1us_first_over_raw"] = paired_ratio(timings[RAW_GAP], timings[RAW])
    entry["native_launch"] = native_problem() is None  # (else ours is the Python launcher too)
    if PYTHON in timings:
        entry["python_launcher_over_raw"] = paired_ratio(timings[PYTHON], timings[RAW])
    if JOINED in timings:
        entry["joined_only_over_raw"] = paired_ratio(timings[JOINED], timings[RAW])
        entry["alpyka_over_joined_only"] = paired_ratio(timings[OURS], timings[JOINED])
    others = [o for _, o in seen if o is not None]
    entry["joined_share"] = sum(b for b, _ in seen) / len(seen) if seen else None  # busy-core choice
    entry["others_seen_by_alpyka"] = statistics.median(others) if others else None
    return rows, {**entry, **load}


def graph_replay(dev: Any, busy: BusyCores, rounds: int) -> tuple[list[dict], dict]:
    """20 tiny kernels + ``q.wait()``: one by one vs a replayed graph, on ``dev`` under ``busy``."""
    fns, _ = graph_contenders(dev)
    timings, errors = interleaved(fns, rounds, warmup=2, min_rounds=3)
    load = busy.load()
    rows = [
        {"section": "graph", "device": dev.name, "runtime": _runtime(dev), "variant": name, **load}
        | (
            {"us_per_chain": 1e6 * timings[name].median, "min_us_per_chain": 1e6 * timings[name].min}
            if name in timings
            else {"status": "failed", "reason": errors.get(name, "not measured")}
        )
        for name in fns
    ]
    speedup = paired_ratio(timings["one_by_one"], timings["graph"]) if len(timings) == 2 else None
    return rows, {"graph_speedup": speedup}


def plot(rows: list[dict], out: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    launch = [r for r in rows if r["section"] == "blocking launch" and "us_per_launch" in r]
    labels = [f"{r['runtime']}, {r['busy_processes']} busy: {r['variant']}" for r in launch]
    palette = {
        OURS: "tab:blue",
        OURS_EACH: "tab:cyan",
        RAW: "tab:gray",
        RAW_EACH: "silver",
        RAW_GAP: "dimgray",
        BEFORE: "tab:red",
    }
    palette |= {JOINED: "tab:orange", PYTHON: "tab:purple"}
    colors = [palette.get(r["variant"], "tab:red") for r in launch]
    axes[0].barh(labels, [r["us_per_launch"] for r in launch], color=colors)
    axes[0].barh(labels, [r["cpu_us_per_launch"] for r in launch], color="none", edgecolor="black", hatch="//")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("us per blocking tiny launch: wall (bar), CPU (hatched)")
    axes[0].tick_params(axis="y", labelsize=6)
    axes[0].set_title(
        "alpyka (blue) vs raw pyopencl + finish (gray); interruptible (red) / joined (orange) / Python launcher "
        "(purple) only",
        fontsize=8,
    )
    graph = [r for r in rows if r["section"] == "graph" and "us_per_chain" in r]
    axes[1].barh(
        [f"{r['runtime']}, {r['busy_processes']} busy: {r['variant'].replace('_', ' ')}" for r in graph],
        [r["us_per_chain"] for r in graph],
        color=["tab:green" if r["variant"] == "graph" else "tab:gray" for r in graph],
    )
    axes[1].set_xscale("log")
    axes[1].tick_params(axis="y", labelsize=6)
    axes[1].set_xlabel("us per chain of 20 tiny kernels + q.wait()")
    axes[1].set_title("graph replay (green) vs one by one")
    return save_figure(fig, out, "waits")


def _runtime(dev: Any) -> str:
    """The OpenCL runtime of ``dev`` in a word ("Intel", "PoCL")."""
    platform = dev.properties["platform"]
    return "Intel" if platform.startswith("Intel") else "PoCL" if platform.startswith("Portable") else platform


def _label(dev: Any, n: int, cores: int) -> str:
    """The summary's key: the runtime and the load ("Intel, busy cores": one spinner per core)."""
    spinners = f"{n} busy process" + ("es" if n > 1 else "")
    return f"{_runtime(dev)}, " + ("free cores" if n == 0 else "busy cores" if n == cores else spinners)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(make_parser(__doc__), argv)
    cores = os.cpu_count() or 1
    busy_counts = [0, cores] if args.quick else sorted({0, max(1, cores // 2), cores, 2 * cores})
    rounds, calls, graph_rounds = (3, 20, 3) if args.smoke else ((41, 40, 15) if args.quick else (161, 50, 61))
    devices = _devices()
    work = [(dev, n) for n in busy_counts for dev in devices]
    rows: list[dict] = []
    summary: dict[str, Any] = {}
    bar = progress(work, total=len(work), desc="waits", disable=args.no_progress)
    for dev, n in bar:
        bar.set_postfix_str(f"{dev.properties['platform'][:12]}, {n} busy")
        label = _label(dev, n, cores)
        with BusyCores(n) as busy:
            try:
                r, s = launches(dev, busy, rounds, calls)
                rg, sg = graph_replay(dev, busy, graph_rounds)
            except Exception as exc:  # one device failing must not lose the others
                r, s, rg, sg = [{"section": "blocking launch", "device": dev.name, "status": "failed"}], {}, [], {}
                r[0]["reason"] = f"{type(exc).__name__}: {exc}"[:500]
        rows += r + rg
        if s or sg:
            summary[label] = {**s, **sg}
    if not devices:
        rows.append({"section": "blocking launch", "device": "opencl", "status": "skipped", "reason": "no CPU OpenCL"})
    names = ", ".join(f"{d.properties['platform']} ({d.name})" for d in devices) or "no CPU OpenCL device"
    doc = result_document("waits", names, args.quick, rows, summary, mode=mode(args), busy_counts=busy_counts)
    write_json(args.out, "waits", doc)
    plot(rows, args.out)
    for label, entry in summary.items():
        print(f"{label:48s} " + "  ".join(f"{k}={v:.3g}" for k, v in entry.items() if isinstance(v, float)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
