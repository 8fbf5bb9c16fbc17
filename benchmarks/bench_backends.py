"""Device-backend benchmarks, side by side in one run:

- launch overhead: alpyka on opencl vs the same generated kernel launched with raw pyopencl
  (``set_args`` + ``enqueue_nd_range_kernel``); on cuda vs a raw cupy ``RawKernel`` (skipped with
  the reason when no CUDA device is here);
- streaming kernel bandwidth (``out = a * x``, 8 bytes moved per element) on every backend that
  launches kernels, against a device-to-device copy of the same bytes on that backend;
- host <-> device copy bandwidth from pageable and pinned host memory (pinned needs cuda/rocm).

    PYTHONPATH=. python benchmarks/bench_backends.py [--quick] [--smoke] [--out benchmarks/results]

Writes ``<out>/backends.json`` and ``<out>/backends.png``. Timings never decide a test.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import portable as pk
from benchmarks._common import backends as selected_backends
from benchmarks._common import (
    make_parser,
    measure,
    parse_args,
    progress,
    pyplot,
    ratio,
    result_document,
    save_figure,
    write_json,
)
from portable.spi import Backend


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
    plan = next(p for k, p in tiny.plans.items() if k[0] == dev.memory_space)
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
            with impl.stream:
                fn((1,), (1,), vals)

        rows.append(
            {
                "section": "launch",
                "backend": backend,
                "variant": "raw cupy RawKernel",
                "us_per_launch": 1e6 * _per_call(raw_cupy, impl.stream.synchronize, calls, repeats),
            }
        )
    return rows


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
    args = parse_args(make_parser(__doc__.split("\n")[0]), argv)
    quick, smoke = args.quick, args.smoke
    calls = 50 if smoke else (300 if quick else 3000)
    repeats = 2 if smoke else (5 if quick else 15)
    n_stream = 1 << (16 if smoke else (22 if quick else 24))
    n_copy = 1 << (16 if smoke else (24 if quick else 26))
    backends = _launchable()
    devices = [b for b in backends if pk.device(b).kind == "gpu"]
    reasons = pk.unavailable_backends()
    rows: list[dict[str, Any]] = []
    for name in ("cuda", "rocm"):
        if name in reasons:
            rows.append({"section": "launch", "backend": name, "status": "skipped", "reason": reasons[name]})
    work = [("launch", b) for b in devices] + [("stream", b) for b in backends] + [("transfer", b) for b in devices]
    bar = progress(work, total=len(work), desc="backends", disable=args.no_progress)
    for section, b in bar:
        bar.set_postfix_str(f"{section} {b}")
        try:
            if section == "launch":
                rows += launch_overhead(b, calls, repeats)
            elif section == "stream":
                rows += streaming(b, n_stream, repeats)
            else:
                rows += transfers(b, n_copy, repeats)
        except Exception as exc:
            rows.append({"section": section, "backend": b, "status": "failed", "reason": repr(exc)})
    summary: dict[str, Any] = {}
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
    doc = result_document("backends", names, quick, rows, summary, unavailable={k: v for k, v in reasons.items()})
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
