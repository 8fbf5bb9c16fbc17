"""Loop benchmark: a sum over n float64 written with each alpaka loop kind, beside a plain
``range`` loop in a kernel and a numba ``@njit`` loop, on the numba backends, in one run.

    PYTHONPATH=. python benchmarks/bench_loops.py [--quick | --smoke] [--out DIR]

One block of one thread walks all n elements (``WorkDiv(1, 1, e)``, e the elements per thread:
1, the finest chunk, and n, one chunk; the group loops use groups of one element). Then the
nested group shape, ``uniform_group_elements`` inside ``uniform_groups``, with groups of k = 1, 4
and 32 elements (``WorkDiv(1, 1, k)``): as written (the CPU backends run it as one element loop)
and with a count per group (work per group: the nest stays two loops), beside numba's flat loop
and numba's nested twin (``for g in range(groups): for i in range(g*k, min(g*k + k, n))``, what
a numba user writes, counting its groups as the kernel with work per group does). The
contenders of a section run interleaved in shuffled rounds (``_common.interleaved``); each must
give the plain loop's bits (same order). Writes
benchmarks/results/loops.json and loops.png with the load and the cores other processes kept
busy; the summary is each contender's time over the plain ``range`` kernel's, paired per round
(1: as fast as a plain loop).
"""

from __future__ import annotations

import os
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
def sum_groups_counted(acc, out, x, n):
    s = 0.0
    c = 0
    for g in acc.uniform_groups(n):
        c += 1  # work per group: the nest stays a loop of groups around a loop of elements
        for i in acc.uniform_group_elements(g, n):
            s += x[i]
    out[0] = s
    out[1] = c


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


@njit(cache=False)
def nb_nested(out, x, n, k):
    s = 0.0
    c = 0
    for g in range((n + k - 1) // k):
        c += 1  # the work per group of sum_groups_counted
        for i in range(g * k, min(g * k + k, n)):
            s += x[i]
    out[0] = s
    out[1] = c


KERNELS = {
    "range": sum_range,
    "uniform_elements": sum_uniform_elements,
    "uniform_groups": sum_uniform_groups,
    "uniform_group_elements": sum_uniform_group_elements,
    "independent_groups": sum_independent_groups,
    "independent_group_elements": sum_independent_group_elements,
}


def _checked(runs: dict, name: str, k, wd, q, out, x, n, want):
    """``runs[name]``: one launch of ``k`` (waited for), after a first call checked against ``want``."""

    def run():
        pk.exec(q, wd, k, out, x, n)
        q.wait()

    run()
    if want is not None and out[0] != want:
        raise AssertionError(f"{name} summed {out[0]!r}, the range loop {want!r}: the order changed")
    runs[name] = run
    return out[0]


def contenders(backend: str, n: int, elements: int) -> dict:
    """One call per loop kind (and numba njit), each summing n float64 on one block of one thread."""
    q = pk.Queue(pk.device(backend))
    x = np.random.default_rng(1).random(n)
    out = np.zeros(2)
    runs, want = {}, None
    for name, k in KERNELS.items():
        wd = pk.WorkDiv(1, 1, 1 if name.endswith("groups") else elements)  # groups of one element
        got = _checked(runs, name, k, wd, q, out, x, n, want)
        want = got if want is None else want
    runs["numba_njit"] = lambda: nb_sum(out, x, n)
    return runs


def group_contenders(backend: str, n: int, k: int) -> dict:
    """The nested group shape with groups of ``k`` elements, the plain range kernel and numba's
    flat and nested loops, each summing n float64 on one block of one thread."""
    q = pk.Queue(pk.device(backend))
    x = np.random.default_rng(1).random(n)
    out = np.zeros(2)
    wd = pk.WorkDiv(1, 1, k)
    runs: dict = {}
    want = _checked(runs, "range", sum_range, wd, q, out, x, n, None)
    _checked(runs, "uniform_group_elements", sum_uniform_group_elements, wd, q, out, x, n, want)
    _checked(runs, "uniform_group_elements, work per group", sum_groups_counted, wd, q, out, x, n, want)
    if out[1] != (n + k - 1) // k:
        raise AssertionError(f"{out[1]} groups counted, want {(n + k - 1) // k}")
    nb_nested(out, x, n, k)
    if out[0] != want:
        raise AssertionError(f"numba's nested loop summed {out[0]!r}, the range loop {want!r}")
    runs["numba_njit"] = lambda: nb_sum(out, x, n)
    runs["numba_njit nested"] = lambda: nb_nested(out, x, n, k)
    return runs


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__), argv)
    n = 10_000 if args.smoke else 1_000_000
    rounds = 3 if args.smoke else 15 if args.quick else 41
    names = common.backends(["cpu_serial", "cpu_threads"])
    names = names[:1] if args.smoke else names
    group_sizes = (1, 4) if args.smoke else (1, 4, 32)
    work = [(b, f"e={e}", contenders, e) for b in names for e in (1, n)]
    work += [(b, f"groups of {k}", group_contenders, k) for b in names for k in group_sizes]
    rows, summary = [], {}
    for b, what, make, size in common.progress(work, desc="bench_loops", disable=args.no_progress):
        section = f"{b}, {what}"
        ticks = common.cpu_ticks()
        timings, errors = common.interleaved(make(b, n, size), rounds, warmup=1, min_rounds=3)
        busy = common.others_cores(ticks, common.cpu_ticks())
        if errors:
            raise RuntimeError(f"{section}: {errors}")
        for name, t in timings.items():
            rows.append(
                {
                    "contender": name,
                    "section": section,
                    "n": n,
                    "cores_busy_elsewhere": busy,
                    "load_average": common.load_average(),
                    **t.as_dict("time", scale=1e3, unit="ms"),
                }
            )
        base = timings["range"]
        summary[section] = {k: common.paired_ratio(t, base) for k, t in timings.items() if k != "range"}
        summary[section]["best-of, uniform_group_elements"] = common.ratio(
            timings["uniform_group_elements"].min, base.min
        )
    doc = common.result_document(
        "loops",
        ", ".join(str(pk.device(b)) for b in names) + "; numba njit on the host CPU",
        args.quick,
        rows,
        summary,
        ratios="contender time / plain range kernel time, median over interleaved rounds (1: a plain loop)",
        load_average=common.load_average(),
        cores=os.cpu_count(),
    )
    out = common.write_json(args.out, "loops", doc)
    plot(summary, args.out)
    common.print_summary(summary, 28)
    print(f"wrote {out}")
    return 0


def plot(summary: dict, out_dir: Path) -> None:
    plt = common.pyplot()
    labels = list(summary)
    kinds = [k for k in dict.fromkeys(k for row in summary.values() for k in row) if not k.startswith("best-of")]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels) + 2), 3.8))
    width = 0.8 / len(kinds)
    for j, kind in enumerate(kinds):
        ys = [summary[k].get(kind) or 0.0 for k in labels]
        ax.bar([i + j * width for i in range(len(labels))], ys, width, label=kind)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=6, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("time / plain range loop (log)")
    ax.legend(fontsize=6, ncol=2)
    common.save_figure(fig, out_dir, "loops")


if __name__ == "__main__":
    raise SystemExit(main())
