"""Loop benchmark: a sum over n float64 written with each alpaka loop kind, beside a plain
``range`` loop in a kernel and a numba ``@njit`` loop, on the numba backends, in one run.

    PYTHONPATH=. python benchmarks/bench_loops.py [--quick | --smoke] [--out DIR]

One block of one thread walks all n elements (``WorkDiv(1, 1, e)``, e the elements per thread:
1, the finest chunk, and n, one chunk; the group loops use groups of one element). The kernels of
a backend run interleaved round-robin (``_common.interleaved``); each kernel must give the plain
loop's bits (same order). Writes benchmarks/results/loops.json and loops.png; the summary is each
kind's time over the plain ``range`` kernel's (1: as fast as a plain loop).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

import portable as pk


@pk.kernel
def sum_range(acc, out, x, n):
    s = 0.0
    for i in range(n):
        s += x[i]
    out[0] = s


@pk.kernel
def sum_uniform_elements(acc, out, x, n):
    s = 0.0
    for i in acc.uniform_elements(n):
        s += x[i]
    out[0] = s


@pk.kernel
def sum_uniform_groups(acc, out, x, n):
    s = 0.0
    for g in acc.uniform_groups(n):
        s += x[g]
    out[0] = s


@pk.kernel
def sum_uniform_group_elements(acc, out, x, n):
    s = 0.0
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, n):
            s += x[i]
    out[0] = s


@pk.kernel
def sum_independent_groups(acc, out, x, n):
    s = 0.0
    for g in acc.independent_groups(n):
        s += x[g]
    out[0] = s


@pk.kernel
def sum_independent_group_elements(acc, out, x, n):
    s = 0.0
    for i in acc.independent_group_elements(0, n):
        s += x[i]
    out[0] = s


@njit(cache=False)
def nb_sum(out, x, n):
    s = 0.0
    for i in range(n):
        s += x[i]
    out[0] = s


KERNELS = {
    "range": sum_range,
    "uniform_elements": sum_uniform_elements,
    "uniform_groups": sum_uniform_groups,
    "uniform_group_elements": sum_uniform_group_elements,
    "independent_groups": sum_independent_groups,
    "independent_group_elements": sum_independent_group_elements,
}


def contenders(backend: str, n: int, elements: int) -> dict:
    """One call per loop kind (and numba njit), each summing n float64 on one block of one thread."""
    q = pk.Queue(pk.device(backend))
    x = np.random.default_rng(1).random(n)
    out = np.zeros(1)
    runs, want = {}, None
    for name, k in KERNELS.items():
        wd = pk.WorkDiv(1, 1, 1 if name.endswith("groups") else elements)  # groups of one element

        def run(k=k, wd=wd):
            pk.exec(q, wd, k, out, x, n)
            q.wait()

        run()
        want = out[0] if want is None else want
        if out[0] != want:
            raise AssertionError(f"{name} summed {out[0]!r}, the range loop {want!r}: the order changed")
        runs[name] = run
    runs["numba_njit"] = lambda: nb_sum(out, x, n)
    return runs


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__.splitlines()[0]), argv)
    n = 10_000 if args.smoke else 1_000_000
    rounds = 3 if args.smoke else 15 if args.quick else 41
    names = common.backends(["cpu_serial", "cpu_threads"])
    names = names[:1] if args.smoke else names
    rows, summary = [], {}
    for b in common.progress(names, desc="bench_loops", disable=args.no_progress):
        for e in (1, n):
            section = f"{b}, e={e}"
            timings, errors = common.interleaved(contenders(b, n, e), rounds, warmup=1, min_rounds=3)
            if errors:
                raise RuntimeError(f"{section}: {errors}")
            for name, t in timings.items():
                rows.append({"contender": name, "section": section, "n": n, **t.as_dict("time", scale=1e3, unit="ms")})
            base = timings["range"]
            summary[section] = {k: common.paired_ratio(t, base) for k, t in timings.items() if k != "range"}
    doc = common.result_document(
        "loops",
        ", ".join(str(pk.device(b)) for b in names) + "; numba njit on the host CPU",
        args.quick,
        rows,
        summary,
        ratios="loop kind time / plain range kernel time, median over interleaved rounds (1: a plain loop)",
        load=Path("/proc/loadavg").read_text().split()[:3],
    )
    out = common.write_json(args.out, "loops", doc)
    plot(summary, args.out)
    common.print_summary(summary, 28)
    print(f"wrote {out}")
    return 0


def plot(summary: dict, out_dir: Path) -> None:
    plt = common.pyplot()
    labels = list(summary)
    kinds = list(next(iter(summary.values())))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) + 2), 3.8))
    width = 0.8 / len(kinds)
    for j, kind in enumerate(kinds):
        ys = [summary[k].get(kind) or 0.0 for k in labels]
        ax.bar([i + j * width for i in range(len(labels))], ys, width, label=kind)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=7)
    ax.set_ylabel("time / plain range loop")
    ax.legend(fontsize=7)
    common.save_figure(fig, out_dir, "loops")


if __name__ == "__main__":
    raise SystemExit(main())
