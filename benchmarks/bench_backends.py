"""Device-backend benchmarks, side by side in one run:

- launch overhead: alpyka on opencl vs the same generated kernel launched with raw pyopencl
  (``set_args`` + ``enqueue_nd_range_kernel``); on cuda vs a raw cupy ``RawKernel`` called with
  ``stream=`` (skipped with
  the reason when no CUDA device is here);
- blocking launches, interleaved round by round with their peer (paired ratios): a tiny kernel on
  a blocking opencl queue vs raw pyopencl with the arguments set once (``enqueue_nd_range_kernel``
  + ``finish``); and, where no CUDA device is here, alpyka's own CPU cost of a cuda launch on the
  GPU emulator with a null executor (kernel bodies do not run, its checks off) vs raw cupy calls
  of the same ``RawKernel`` on the same stand-in: the launching thread's CPU time for 20 launches
  (then one wait), and blocking launches;
- streaming kernel bandwidth (``out = a * x``, 8 bytes moved per element) on every backend that
  launches kernels, against a device-to-device copy of the same bytes on that backend;
- host <-> device copy bandwidth from pageable and pinned host memory (pinned needs cuda/rocm).

    PYTHONPATH=. python benchmarks/bench_backends.py [--quick] [--smoke] [--out benchmarks/results]

Writes ``<out>/backends.json`` and ``<out>/backends.png``. Timings never decide a test.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("ALPYKA_EMULATE_CHECKS", "0")  # an emulated GPU's launches as on a GPU: no range checks
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import portable as pk
from benchmarks._common import (
    BACKENDS_ENV,
    Timing,
    interleaved,
    make_parser,
    measure,
    paired_ratio,
    parse_args,
    progress,
    pyplot,
    ratio,
    result_document,
    save_figure,
    write_json,
)
from benchmarks._common import backends as selected_backends
from portable._registry import emulate, emulated
from portable.spi import Backend

#: launches per sample of the emulated cuda comparison (then one wait)
CHAIN = 20


@pk.kernel
def tiny(acc, out, v):
    if acc.once_per_grid():
        out[0] = v


@pk.kernel
def scale(acc, out, x, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i]


def _launchable() -> list[str]:
    return [b for b in selected_backends() if type(pk.get_backend(b)).launch is not Backend.launch]


def _plan_of(dev: Any) -> Any:
    """The plan alpyka compiled for ``tiny`` on ``dev`` (the backend's plan cache, portable.spi)."""
    return next(p for k, p in pk.get_backend(dev.backend_name).plans(tiny).items() if k[0] == dev.memory_space)


def _per_call(fn: Callable[[], Any], sync: Callable[[], Any], calls: int, repeats: int) -> float:
    """Median seconds per call of ``calls`` back-to-back calls followed by one sync."""

    def batch() -> None:
        for _ in range(calls):
            fn()

    t = measure(batch, warmup=1, repeats=repeats, sync=sync)
    return t.median / calls


# ----------------------------------------------------------------------------- launch overhead
def launch_overhead(backend: str, calls: int, repeats: int) -> list[dict[str, Any]]:
    dev = pk.device(backend)
    q = pk.Queue(dev)
    out = pk.Buffer(dev, 1, np.float32, queue=q)
    wd = pk.WorkDiv(1, 1, 1)
    v = np.float32(1.5)
    rows = [
        {
            "section": "launch",
            "backend": backend,
            "variant": "alpyka pk.exec",
            "us_per_launch": 1e6 * _per_call(lambda: pk.exec(q, wd, tiny, out, v), q.wait, calls, repeats),
        }
    ]
    plan = _plan_of(dev)
    if backend == "opencl":
        import pyopencl as cl

        cq = q.native_handle
        ctx = dev.native.context
        prg = cl.Program(ctx, plan.src.text).build()
        knl = cl.Kernel(prg, plan.src.entry)
        vals = plan.pack((out, v), wd, 0)

        def raw() -> None:
            knl.set_args(*vals)
            cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,))

        rows.append(
            {
                "section": "launch",
                "backend": backend,
                "variant": "raw pyopencl",
                "us_per_launch": 1e6 * _per_call(raw, cq.finish, calls, repeats),
            }
        )
        knl.set_args(*vals)
        rows.append(
            {
                "section": "launch",
                "backend": backend,
                "variant": "raw pyopencl, args set once",
                "us_per_launch": 1e6
                * _per_call(lambda: cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,)), cq.finish, calls, repeats),
            }
        )
    elif backend in ("cuda", "rocm"):
        impl = q._impl
        fn = plan.function
        vals = tuple(plan.pack((out, v), wd, 0))

        def raw_cupy() -> None:
            fn((1,), (1,), vals, stream=impl.stream)

        rows.append(
            {
                "section": "launch",
                "backend": backend,
                "variant": "raw cupy RawKernel",
                "us_per_launch": 1e6 * _per_call(raw_cupy, impl.stream.synchronize, calls, repeats),
            }
        )
    return rows


# ----------------------------------------------------------------------------- blocking launches
def _paired_rows(
    backend: str, fns: dict[str, Callable[[], Any]], per: int, timing: tuple[int, int, float], note: str = ""
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time ``fns`` interleaved (each call ``per`` launches; ``timing``: rounds, calls per sample,
    budget in seconds): one launch row each (median, min), and the timings by name."""
    rounds, calls, budget_s = timing
    timings, errors = interleaved(fns, rounds, calls=calls, warmup=2, min_rounds=3, budget_s=budget_s)
    rows = []
    for name in fns:
        row: dict[str, Any] = {"section": "launch", "backend": backend, "variant": name}
        if name in timings:
            t = timings[name]
            row.update(us_per_launch=1e6 * t.median / per, min_us_per_launch=1e6 * t.min / per, repeats=len(t.times))
        else:
            row.update(status="failed", reason=errors.get(name, "not measured"))
        if note:
            row["note"] = note
        rows.append(row)
    return rows, timings


def _pair_summary(timings: dict[str, Any], ours: str, theirs: str, per: int) -> dict[str, Any]:
    """alpyka's and the peer's microseconds per launch and their paired ratio (median and best)."""
    if ours not in timings or theirs not in timings:
        return {}
    a, b = timings[ours], timings[theirs]
    return {
        "alpyka_us": 1e6 * a.median / per,
        "raw_us": 1e6 * b.median / per,
        "alpyka_over_raw": paired_ratio(a, b),
        "alpyka_over_raw_best": ratio(a.min, b.min),
    }


def opencl_blocking_launch(timing: tuple[int, int, float]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A tiny kernel on a blocking opencl queue vs raw pyopencl with its arguments set once
    (``enqueue_nd_range_kernel`` + ``finish`` on a queue of its own), interleaved; and the raw
    launch waited for as alpyka waits (polled: ``backends._opencl_waits.wait_event``), which
    splits alpyka's ratio into the wait's share and the rest."""
    import pyopencl as cl

    from backends._opencl_waits import wait_event  # (pyopencl is importable only here)

    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 1, np.float32, queue=q)
    wd, v = pk.WorkDiv(1, 1, 1), np.float32(1.5)
    for _ in range(3):  # the third launch takes the fast path
        pk.exec(q, wd, tiny, out, v)
    plan = _plan_of(dev)
    ctx = dev.native.context
    cq = cl.CommandQueue(ctx, dev.native.device)
    knl = cl.Kernel(cl.Program(ctx, plan.src.text).build(), plan.src.entry)
    knl.set_args(*plan.pack((out, v), wd, 0))

    def raw() -> None:
        cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,))
        cq.finish()

    def raw_polled() -> None:  # what bounds alpyka's launch: a wait that a Ctrl-C can interrupt
        ev = cl.enqueue_nd_range_kernel(cq, knl, (1,), (1,))
        cq.flush()
        wait_event(ev)

    ours, theirs = "alpyka pk.exec, blocking queue", "raw pyopencl, args set once, enqueue + finish"
    polled = "raw pyopencl, args set once, enqueue + alpyka's polled wait"
    fns = {ours: lambda: pk.exec(q, wd, tiny, out, v), theirs: raw, polled: raw_polled}
    rows, timings = _paired_rows("opencl", fns, 1, timing)
    pair = _pair_summary(timings, ours, theirs, 1)
    if pair and polled in timings:
        pair["polled_wait_over_finish"] = paired_ratio(timings[polled], timings[theirs])
        pair["alpyka_over_polled_wait"] = paired_ratio(timings[ours], timings[polled])
    return rows, {"opencl blocking launch": pair} if pair else {}


def _cuda_emulable() -> bool:
    """Whether the cuda launch's CPU cost can be measured on the emulator here: no CUDA device,
    cuda not left out by ``$ALPYKA_BACKENDS``."""
    chosen = {n.strip() for n in os.environ.get(BACKENDS_ENV, "").split(",") if n.strip()}
    if chosen and "cuda" not in chosen:
        return False
    return "cuda" in emulated() or "cuda" not in pk.available_backends()


def _cpu_rounds(
    fns: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], rounds: int, per: int
) -> dict[str, tuple[Timing, Timing]]:
    """``{name: (launch, wait)}`` timed round by round in a shuffled order: per round and name
    the launching thread's CPU time (``time.thread_time``: its own work, not the emulator's
    stream thread nor other processes) of ``launch()`` per launch (``per`` launches), and the
    wall time of ``launch()`` + ``wait()`` per launch. Returns ``{name: (cpu, wall)}``."""
    out = {name: (Timing(), Timing()) for name in fns}
    order = random.Random(0x5EED)
    for launch, wait in fns.values():  # warm-up
        launch()
        wait()
    for _ in range(rounds):
        names = list(fns)
        order.shuffle(names)
        for name in names:
            launch, wait = fns[name]
            w0, c0 = time.perf_counter(), time.thread_time()
            launch()
            c1 = time.thread_time()
            wait()
            w1 = time.perf_counter()
            out[name][0].times.append((c1 - c0) / per)
            out[name][1].times.append((w1 - w0) / per)
    return out


def emulated_cuda_launch(timing: tuple[int, int, float]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """alpyka's own CPU cost of a cuda launch: the emulator with a null executor (set before any
    kernel loads: bodies do not run), against raw cupy calls of the same ``RawKernel`` and packed
    values on a stream of the same stand-in (each call given the stream, ``stream=``, as alpyka
    gives its queue's; and the stream made current once around all), rounds
    interleaved: :data:`CHAIN` launches then one wait (the launching thread's CPU time, and the
    wall time with the wait), and blocking launches (wall time: launch + synchronize)."""
    if "cuda" not in emulated():
        emulate(["cuda"])
    dev = pk.device("cuda")
    dev.native.rt.executor = None
    q, qb = pk.Queue(dev), pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 1, np.float32, queue=q)
    wd, v = pk.WorkDiv(1, 1, 1), np.float32(1.5)
    for _ in range(3):  # the third launch takes the fast path
        pk.exec(q, wd, tiny, out, v)
        pk.exec(qb, wd, tiny, out, v)
    q.wait()
    plan = _plan_of(dev)
    stream = dev.native.cuda.Stream(non_blocking=True)
    fn, vals = plan.function, tuple(plan.pack((out, v), wd, 0))

    def ours() -> None:
        for _ in range(CHAIN):
            pk.exec(q, wd, tiny, out, v)

    def raw() -> None:
        for _ in range(CHAIN):
            fn((1,), (1,), vals, stream=stream)

    def raw_once() -> None:
        with stream:
            for _ in range(CHAIN):
                fn((1,), (1,), vals)

    def raw_blocking() -> None:
        fn((1,), (1,), vals, stream=stream)
        stream.synchronize()

    names = ("alpyka pk.exec", "raw cupy RawKernel", "raw cupy RawKernel, stream entered once")
    timed = _cpu_rounds(
        dict(zip(names, ((ours, q.wait), (raw, stream.synchronize), (raw_once, stream.synchronize)))),
        max(3, timing[0]),
        CHAIN,
    )
    note = "emulated: kernel bodies do not run (null executor); CPU cost of launching"
    rows = [
        {
            "section": "launch",
            "backend": "cuda",
            "variant": f"{name} x{CHAIN} + wait",
            "cpu_us_per_launch": 1e6 * cpu.median,
            "min_cpu_us_per_launch": 1e6 * cpu.min,
            "us_per_launch": 1e6 * wall.median,
            "min_us_per_launch": 1e6 * wall.min,
            "repeats": len(cpu.times),
            "note": note,
        }
        for name, (cpu, wall) in timed.items()
    ]
    blocking = ("alpyka pk.exec, blocking queue", "raw cupy RawKernel + synchronize")
    more, tb = _paired_rows(
        "cuda", dict(zip(blocking, (lambda: pk.exec(qb, wd, tiny, out, v), raw_blocking))), 1, timing, note
    )
    summary: dict[str, Any] = {}
    (ac, aw), (rc, rw), (oc, _) = (timed[n] for n in names)
    summary["cuda launch, emulated (CPU cost)"] = {  # the launching thread's CPU time per launch
        "alpyka_us": 1e6 * ac.median,
        "raw_us": 1e6 * rc.median,
        "alpyka_over_raw": paired_ratio(ac, rc),
        "alpyka_over_raw_best": ratio(ac.min, rc.min),
        "alpyka_over_raw_stream_once": paired_ratio(ac, oc),
        "alpyka_over_raw_wall_with_wait": paired_ratio(aw, rw),
    }
    pair = _pair_summary(tb, *blocking, 1)
    if pair:
        summary["cuda blocking launch, emulated (CPU cost)"] = pair
    return rows + more, summary


# ----------------------------------------------------------------------------- streaming
def _stream_divisions(dev: Any, n: int) -> list[tuple[str, Any]]:
    """Work divisions to stream ``n`` elements: GPU style (one element per thread) on devices
    with many threads per block, plus a chunked one (few work-items, many elements each) on
    OpenCL CPU devices, where PoCL runs work-items as loops; CPU style on the CPU backends."""
    if dev.kind != "gpu":
        return [
            ("chunked", pk.make_workdiv(dev, dev.limits.multiprocessors, math.ceil(n / dev.limits.multiprocessors)))
        ]
    threads = min(256, dev.limits.max_threads_per_block)
    out = [("1 elem/thread", pk.WorkDiv(math.ceil(n / threads), threads, 1))]
    if dev.properties.get("type") == "cpu":
        blocks, threads = 16 * dev.limits.multiprocessors, 64
        out.append(("chunked", pk.WorkDiv(blocks, threads, math.ceil(n / (blocks * threads)))))
    return out


def streaming(backend: str, n: int, repeats: int) -> list[dict[str, Any]]:
    dev = pk.device(backend)
    q = pk.Queue(dev)
    x = pk.Buffer(dev, n, np.float32, queue=q)
    out = pk.Buffer(dev, n, np.float32, queue=q)
    pk.memcpy(q, x, np.ones(n, np.float32))
    a = np.float32(2)
    nbytes = 2 * n * 4
    tc = measure(lambda: pk.memcpy(q, out, x), warmup=2, repeats=repeats, sync=q.wait)
    rows = []
    for label, wd in _stream_divisions(dev, n):
        tk = measure(lambda: pk.exec(q, wd, scale, out, x, a, n), warmup=2, repeats=repeats, sync=q.wait)
        check = np.empty(n, np.float32)
        pk.memset(q, out, 0)
        pk.exec(q, wd, scale, out, x, a, n)
        pk.memcpy(q, check, out)
        q.wait()
        assert (check == 2).all(), "the streaming kernel computed something wrong"
        rows.append(
            {
                "section": "stream",
                "backend": backend,
                "division": label,
                "n": n,
                "workdiv": str(wd),
                "kernel_GBps": nbytes / tk.median / 1e9,
                "copy_GBps": nbytes / tc.median / 1e9,
                "kernel_vs_copy": ratio(tc.median, tk.median),
            }
        )
    return rows


# ----------------------------------------------------------------------------- host <-> device
def transfers(backend: str, n: int, repeats: int) -> list[dict[str, Any]]:
    dev = pk.device(backend)
    q = pk.Queue(dev)
    d = pk.Buffer(dev, n, np.uint8, queue=q)
    rows = []
    for pinned in (False, True):
        h = pk.Buffer(pk.host(), n, np.uint8, pinned=pinned)
        really_pinned = pinned and getattr(pk.get_backend(backend), "pinned_allocator", None) is not None
        if pinned and not really_pinned:
            rows.append(
                {
                    "section": "transfer",
                    "backend": backend,
                    "host": "pinned",
                    "status": "skipped",
                    "reason": f"{backend} has no page-locked host allocator (pinned memory needs cuda/rocm)",
                }
            )
            continue
        h.array[:] = 7
        up = measure(lambda: pk.memcpy(q, d, h), warmup=1, repeats=repeats, sync=q.wait)
        down = measure(lambda: pk.memcpy(q, h, d), warmup=1, repeats=repeats, sync=q.wait)
        rows.append(
            {
                "section": "transfer",
                "backend": backend,
                "host": "pinned" if pinned else "pageable",
                "bytes": n,
                "h2d_GBps": n / up.median / 1e9,
                "d2h_GBps": n / down.median / 1e9,
            }
        )
    return rows


def _plot(rows: list[dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    launch = [r for r in rows if r["section"] == "launch" and "us_per_launch" in r]
    axes[0].barh(
        [f"{r['backend']}: {r['variant']}" for r in launch], [r["us_per_launch"] for r in launch], color="tab:blue"
    )
    axes[0].set_xlabel("microseconds per launch (lower is better)")
    axes[0].set_title("launch overhead")
    stream = [r for r in rows if r["section"] == "stream"]
    idx = np.arange(len(stream))
    axes[1].bar(idx - 0.2, [r["kernel_GBps"] for r in stream], 0.4, label="streaming kernel")
    axes[1].bar(idx + 0.2, [r["copy_GBps"] for r in stream], 0.4, label="device copy")
    axes[1].set_xticks(idx, [f"{r['backend']}\n{r['division']}" for r in stream], fontsize=8)
    axes[1].set_ylabel("GB/s (read + write)")
    axes[1].set_title("streaming kernel vs copy")
    axes[1].legend()
    tr = [r for r in rows if r["section"] == "transfer" and "h2d_GBps" in r]
    idx = np.arange(len(tr))
    axes[2].bar(idx - 0.2, [r["h2d_GBps"] for r in tr], 0.4, label="host to device")
    axes[2].bar(idx + 0.2, [r["d2h_GBps"] for r in tr], 0.4, label="device to host")
    axes[2].set_xticks(idx, [f"{r['backend']}\n{r['host']}" for r in tr])
    axes[2].set_ylabel("GB/s")
    axes[2].set_title("host <-> device copies")
    axes[2].legend()
    save_figure(fig, out, "backends")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(make_parser(__doc__), argv)
    quick, smoke = args.quick, args.smoke
    calls = 50 if smoke else (300 if quick else 3000)
    repeats = 2 if smoke else (5 if quick else 15)
    n_stream = 1 << (16 if smoke else (22 if quick else 24))
    n_copy = 1 << (16 if smoke else (24 if quick else 26))
    backends = _launchable()
    devices = [b for b in backends if pk.device(b).kind == "gpu"]
    reasons = pk.unavailable_backends()
    rows: list[dict[str, Any]] = []
    paired_summary: dict[str, Any] = {}
    for name in ("cuda", "rocm"):
        if name in reasons:
            rows.append({"section": "launch", "backend": name, "status": "skipped", "reason": reasons[name]})
    work = [("launch", b) for b in devices] + [("blocking", b) for b in backends if b == "opencl"]
    work += [("stream", b) for b in backends] + [("transfer", b) for b in devices]
    if _cuda_emulable():  # last: the emulator's stream threads are idle meanwhile
        work.append(("emulated", "cuda"))
    paired = (3, 20, 0.05) if smoke else ((15, 100, 0.5) if quick else (41, 200, 2.0))
    bar = progress(work, total=len(work), desc="backends", disable=args.no_progress)
    for section, b in bar:
        bar.set_postfix_str(f"{section} {b}")
        try:
            if section == "launch":
                rows += launch_overhead(b, calls, repeats)
            elif section in ("blocking", "emulated"):
                more, pairs = (opencl_blocking_launch if section == "blocking" else emulated_cuda_launch)(paired)
                rows += more
                paired_summary.update(pairs)
            elif section == "stream":
                rows += streaming(b, n_stream, repeats)
            else:
                rows += transfers(b, n_copy, repeats)
        except Exception as exc:
            rows.append({"section": section, "backend": b, "status": "failed", "reason": repr(exc)})
    summary: dict[str, Any] = dict(paired_summary)
    for b in devices:
        lr = {r["variant"]: r["us_per_launch"] for r in rows if r.get("backend") == b and "us_per_launch" in r}
        raw = lr.get("raw pyopencl") or lr.get("raw cupy RawKernel")
        summary[f"{b} launch"] = {
            "alpyka_us": lr.get("alpyka pk.exec"),
            "raw_us": raw,
            "alpyka_over_raw": ratio(lr.get("alpyka pk.exec"), raw),
        }
        once = lr.get("raw pyopencl, args set once")
        if once is not None:
            summary[f"{b} launch"].update(
                raw_args_once_us=once, alpyka_over_raw_args_once=ratio(lr.get("alpyka pk.exec"), once)
            )
    for r in rows:
        if r["section"] == "stream" and "kernel_GBps" in r:
            summary[f"{r['backend']} stream ({r['division']})"] = {
                "kernel_GBps": r["kernel_GBps"],
                "copy_GBps": r["copy_GBps"],
                "kernel_vs_copy": r["kernel_vs_copy"],
            }
        if r["section"] == "transfer" and "h2d_GBps" in r:
            summary[f"{r['backend']} {r['host']} copies"] = {"h2d_GBps": r["h2d_GBps"], "d2h_GBps": r["d2h_GBps"]}
    names = ", ".join(f"{b}: {pk.device(b).name}" for b in backends)
    doc = result_document(
        "backends",
        names,
        quick,
        rows,
        summary,
        unavailable={k: v for k, v in reasons.items()},
        load_average=list(os.getloadavg()),  # other processes' load: the paired ratios are interleaved against it
    )
    write_json(args.out, "backends", doc)
    _plot(rows, args.out)
    for label, vals in summary.items():
        print(
            f"{label:40s} " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in vals.items())
        )
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"done in {time.perf_counter() - t0:.1f} s")
    raise SystemExit(rc)
