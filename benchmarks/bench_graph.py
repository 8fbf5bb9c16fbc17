"""Captured graphs (``pk.capture``) against launching one by one, side by side in one run:

a chain of 20 tiny kernels (16 elements each) followed by ``q.wait()``, launched one by one with
``pk.exec`` and replayed by ``graph.launch()``, interleaved round by round on every backend
(cpu_serial, cpu_threads, opencl, cuda). Where cuda runs on the emulator (``ALPYKA_EMULATE``, or
turned on here when there is no GPU) kernel bodies do not run (a null executor) and the emulator's
checks are off, so the figures are alpyka's own CPU cost of a launch; there the peers are raw
cupy calls on the stand-in (20 ``RawKernel`` calls; the same 20 captured into a cupy graph). On a
GPU the same script compares with raw cupy on the device.

    PYTHONPATH=. python benchmarks/bench_graph.py [--quick] [--smoke] [--out benchmarks/results]

Writes ``<out>/graph.json`` and ``<out>/graph.png``. Timings never decide a test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("ALPYKA_EMULATE_CHECKS", "0")  # an emulated GPU's launches as on a GPU: no range checks
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import portable as pk
from benchmarks._common import backends as selected_backends
from benchmarks._common import (
    interleaved,
    make_parser,
    mode,
    paired_ratio,
    parse_args,
    progress,
    pyplot,
    result_document,
    save_figure,
    write_json,
)
from portable._registry import emulate, emulated

KERNELS = 20
N = 16
CANDIDATES = ("cpu_serial", "cpu_threads", "opencl", "cuda")
RAW_CUDA = """extern "C" __global__ void tiny(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}"""


@pk.kernel
def tiny(acc, y, n):
    for i in acc.uniform_elements(n):
        y[i] += 1.0


def _alpyka_contenders(device: Any) -> tuple[dict[str, Callable[[], None]], Callable[[], float]]:
    """One by one and the captured graph on one queue, and a reader of the buffer's value."""
    q = pk.Queue(device)
    y = pk.Buffer(device, N, np.float32)
    pk.memset(q, y, 0)
    wd = pk.valid_workdiv(device, N)
    n = np.int32(N)

    def one_by_one() -> None:
        for _ in range(KERNELS):
            pk.exec(q, wd, tiny, y, n)
        q.wait()

    one_by_one()  # compiled before the capture
    with pk.capture(q) as graph:
        for _ in range(KERNELS):
            pk.exec(q, wd, tiny, y, n)

    def replay() -> None:
        graph.launch()
        q.wait()

    def value() -> float:
        out = np.zeros(N, np.float32)
        pk.memcpy(q, out, y)
        q.wait()
        return float(out[0])

    return {"one_by_one": one_by_one, "graph": replay}, value


def _cupy_contenders(device: Any) -> dict[str, Callable[[], None]]:
    """The same 20 tiny kernels with raw cupy: one by one, and captured into a cupy graph."""
    cp = device.native
    stream = cp.cuda.Stream(non_blocking=True)
    y = cp.zeros(N, np.float32)
    fn = cp.RawModule(code=RAW_CUDA).get_function("tiny")
    args = (np.uint64(y.data.ptr), np.int32(N))

    def launches(s: Any) -> None:
        with s:
            for _ in range(KERNELS):
                fn((1,), (32,), args)

    def one_by_one() -> None:
        launches(stream)
        stream.synchronize()

    side = cp.cuda.Stream(non_blocking=True)
    side.begin_capture()
    launches(side)
    graph = side.end_capture()

    def replay() -> None:
        graph.launch(stream)
        stream.synchronize()

    return {"cupy_one_by_one": one_by_one, "cupy_graph": replay}


def measure_backend(name: str, rounds: int, budget_s: float) -> tuple[list[dict], dict]:
    """Rows and the summary entry of one backend."""
    device = pk.device(name)
    note = ""
    rt = getattr(device.native, "rt", None) if name == "cuda" else None
    if rt is not None:  # the emulator: a null executor (before any kernel loads), alpyka's CPU cost alone
        rt.executor = None
        note = "emulated: kernel bodies do not run (null executor); CPU cost of launching"
    fns, value = _alpyka_contenders(device)
    if name == "cuda":
        fns.update(_cupy_contenders(device))
    before = value()
    fns["one_by_one"]()
    fns["graph"]()
    counted = value() - before  # the buffer counts the kernels that ran: 20 a chain, either way
    timings, errors = interleaved(fns, rounds, warmup=2, min_rounds=3, budget_s=budget_s)
    rows = []
    for contender in fns:
        row: dict[str, Any] = {"backend": name, "contender": contender, "kernels": KERNELS, "elements": N}
        if contender in timings:
            t = timings[contender]
            row.update(
                status="ok",
                median_us=t.median * 1e6,
                min_us=t.min * 1e6,
                per_kernel_us=t.median * 1e6 / KERNELS,
                repeats=len(t.times),
            )
        else:
            row.update(status="failed", reason=errors.get(contender, "not measured"))
        if note:
            row["note"] = note
        rows.append(row)
    summary: dict[str, Any] = {}
    if "one_by_one" in timings and "graph" in timings:
        summary["graph speedup (one by one / graph)"] = paired_ratio(timings["one_by_one"], timings["graph"])
    if not note:  # (the emulator's null executor runs no kernel bodies)
        summary["replay ran every kernel"] = counted == 2 * KERNELS
    for ours, theirs in (("one_by_one", "cupy_one_by_one"), ("graph", "cupy_graph")):
        if ours in timings and theirs in timings:
            summary[f"alpyka {ours} / cupy {theirs[5:]}"] = paired_ratio(timings[ours], timings[theirs])
    return rows, summary


def plot(rows: list[dict], out: Path) -> Path:
    plt = pyplot()
    ok = [r for r in rows if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r['backend']}\n{r['contender'].replace('_', ' ')}" for r in ok]
    colors = ["tab:green" if "graph" in r["contender"] else "tab:gray" for r in ok]
    ax.bar(range(len(ok)), [r["median_us"] for r in ok], color=colors)
    ax.set_xticks(range(len(ok)), labels, fontsize=7, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel(f"us per chain of {KERNELS} kernels + wait")
    ax.set_title("pk.capture: replayed graph (green) vs launches one by one")
    return save_figure(fig, out, "graph")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(make_parser(__doc__), argv)
    if "cuda" not in pk.available_backends() and not emulated():
        emulate(["cuda"])  # no GPU: the emulator measures alpyka's CPU cost of a cuda launch
    names = selected_backends(CANDIDATES)
    rounds, budget = (5, 0.05) if args.smoke else ((40, 0.5) if args.quick else (200, 3.0))
    rows: list[dict] = []
    summary: dict[str, Any] = {}
    bar = progress(names, total=len(names), desc="graph", disable=args.no_progress)
    for name in bar:
        bar.set_postfix_str(name)
        try:
            r, s = measure_backend(name, rounds, budget)
        except Exception as exc:  # one backend failing must not lose the others
            r, s = [{"backend": name, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:500]}], {}
        rows += r
        if s:
            summary[name] = s
    cuda = next((r for r in rows if r["backend"] == "cuda" and r.get("note")), None)
    device = "host CPU" + (" (cuda emulated)" if cuda else "")
    doc = result_document("graph", device, args.quick, rows, summary, mode=mode(args), kernels=KERNELS, elements=N)
    write_json(args.out, "graph", doc)
    plot(rows, args.out)
    for name, entry in summary.items():
        print(name, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in entry.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
