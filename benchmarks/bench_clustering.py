"""Pixel clustering digis/s: the port of CMSSW's clusterizer (examples/pixel_clustering.py) on each
backend against the strongest simple peer, a one-thread numba union-find per module, and a
one-thread numba flood fill.

Digis of CMS-sized modules (416 x 160 pixels), clusters of 1-9 pixels, 2% invalid, shuffled. Every
contender produces the same ids (checked). ``find_clusters`` runs the algorithm its device picks
(a union-find per module where blocks are one thread or the hardware is a CPU, CMSSW's label
propagation on GPUs; each row names it), and CMSSW's propagation is also timed forced on
cpu_serial ("cpu_serial, propagation"). alpyka's digis are on the device before timing and its
clock stops when the ids are (find_clusters + queue.wait), numba's when it returns (one thread,
digis in host memory). Measured side by side, interleaved, in one run; speeds are paired ratios
against the union-find (the strongest peer).

    python benchmarks/bench_clustering.py [--quick] [--smoke] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import _common as common
import numpy as np
from numba import njit

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import pixel_clustering as pc


@njit(cache=True)
def numba_clusters(module, x, y, n_columns, n_rows):  # pragma: no cover - compiled
    """Connected components per module by a flood fill over a pixel grid, numbered per module in
    the order of each cluster's first digi."""
    n = module.size
    out = np.full(n, -1, np.int32)
    order = np.argsort(module, kind="mergesort")
    grid = np.full(n_columns * n_rows, -1, np.int64)
    stack = np.empty(n, np.int64)
    k = 0
    while k < n:
        m = module[order[k]]
        start = k
        while k < n and module[order[k]] == m:
            k += 1
        if m < 0:
            continue
        for t in range(start, k):
            i = order[t]
            grid[x[i] * n_rows + y[i]] = i
        label = 0
        for t in range(start, k):
            i = order[t]
            if out[i] >= 0:
                continue
            out[i] = label
            top = 0
            stack[0] = i
            while top >= 0:
                j = stack[top]
                top -= 1
                for dx in range(-1, 2):
                    for dy in range(-1, 2):
                        cx, cy = x[j] + dx, y[j] + dy
                        if 0 <= cx < n_columns and 0 <= cy < n_rows:
                            nb = grid[cx * n_rows + cy]
                            if nb >= 0 and out[nb] < 0:
                                out[nb] = label
                                top += 1
                                stack[top] = nb
            label += 1
        for t in range(start, k):
            i = order[t]
            grid[x[i] * n_rows + y[i]] = -1
    return out


@njit(cache=True)
def numba_union_find(module, x, y, n_modules, n_columns, n_rows):  # pragma: no cover - compiled
    """Connected components per module by a union-find (the strongest simple peer): digis grouped
    by module with a counting sort (input order kept), each module's pixels on a grid, each digi
    joined with its four later neighbours (roots the smallest index, paths halved), then numbered
    per module in the order of each cluster's first digi."""
    n = module.size
    out = np.full(n, -1, np.int32)
    start = np.zeros(n_modules + 1, np.int64)
    for i in range(n):
        if 0 <= module[i] < n_modules:
            start[module[i] + 1] += 1
    for m in range(n_modules):
        start[m + 1] += start[m]
    fill = start[:-1].copy()
    order = np.empty(start[n_modules], np.int64)
    for i in range(n):
        m = module[i]
        if 0 <= m < n_modules:
            order[fill[m]] = i
            fill[m] += 1
    grid = np.full(n_columns * n_rows, -1, np.int32)
    parent = np.arange(n).astype(np.int32)
    label = np.full(n, -1, np.int32)
    for m in range(n_modules):
        for t in range(start[m], start[m + 1]):
            grid[x[order[t]] * n_rows + y[order[t]]] = order[t]
        for t in range(start[m], start[m + 1]):
            i = order[t]
            for dx, dy in ((1, -1), (1, 0), (1, 1), (0, 1)):
                cx, cy = x[i] + dx, y[i] + dy
                j = grid[cx * n_rows + cy] if cx < n_columns and 0 <= cy < n_rows else -1
                if j >= 0:
                    a, b = i, j
                    while parent[a] != a:
                        parent[a] = parent[parent[a]]
                        a = parent[a]
                    while parent[b] != b:
                        parent[b] = parent[parent[b]]
                        b = parent[b]
                    parent[max(a, b)] = min(a, b)
        k = 0
        for t in range(start[m], start[m + 1]):  # ascending indices: a root before its cluster
            i = order[t]
            grid[x[i] * n_rows + y[i]] = -1
            r = i
            while parent[r] != r:
                r = parent[r]
            if label[r] < 0:
                label[r] = k
                k += 1
            out[i] = label[r]
    return out


#: the contenders' names: the strongest peer first (every speed is against it)
UNION_FIND, FLOOD_FILL = "numba union-find (1 thread)", "numba flood fill (1 thread)"
PROPAGATION = "cpu_serial, propagation"  # CMSSW's algorithm forced on cpu_serial


def _backends(smoke: bool) -> list[str]:
    names = common.backends()  # the available ones that $ALPYKA_BACKENDS leaves in
    return names[:1] if smoke else names


def _alpyka(b: str, module, x, y, n_modules: int, want, algorithm: str | None = None):
    """A timed call of find_clusters on backend ``b`` (the digis uploaded once, the ids checked)."""
    q = pk.Queue(pk.device(b))
    bufs = []
    for a in (module, x, y):
        buf = pk.Buffer(q.device, a.shape, a.dtype)
        pk.memcpy(q, buf, a)
        bufs.append(buf)
    got = np.empty(len(module), np.int32)
    pk.memcpy(q, got, pc.find_clusters(q, *bufs, n_modules=n_modules, algorithm=algorithm))
    q.wait()
    if not np.array_equal(got, want):
        raise AssertionError(f"{b}: ids differ from numba's at {int(np.count_nonzero(got != want))} digis")

    def run() -> None:
        pc.find_clusters(q, *bufs, n_modules=n_modules, algorithm=algorithm)
        q.wait()

    return run


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__), argv)
    n_modules = 8 if args.smoke else 300 if args.quick else 1856  # 1856: the CMS phase-1 pixel modules
    rounds = 2 if args.smoke else 5 if args.quick else 15
    module, x, y = pc.generate_digis(n_modules, clusters_per_module=40, seed=11)
    n = int(module.size)
    want = numba_union_find(module, x, y, n_modules, pc.N_COLUMNS, pc.N_ROWS)
    if not np.array_equal(want, numba_clusters(module, x, y, pc.N_COLUMNS, pc.N_ROWS)):
        raise AssertionError("the numba union-find and flood fill disagree")
    assert np.array_equal(want, pc.reference_clusters(module, x, y)) if args.smoke else True
    contenders = {
        UNION_FIND: lambda: numba_union_find(module, x, y, n_modules, pc.N_COLUMNS, pc.N_ROWS),
        FLOOD_FILL: lambda: numba_clusters(module, x, y, pc.N_COLUMNS, pc.N_ROWS),
    }
    algorithms, skipped = {}, {}
    runs = [(b, b, None) for b in _backends(args.smoke)]
    if "cpu_serial" in pk.backends() and not args.smoke:
        runs.append((PROPAGATION, "cpu_serial", "propagation"))
    for name, b, algorithm in common.progress(runs, desc="bench_clustering", disable=args.no_progress):
        try:
            contenders[name] = _alpyka(b, module, x, y, n_modules, want, algorithm)
            algorithms[name] = algorithm or pc.algorithm_for(pk.device(b))
        except Exception as exc:  # a backend that cannot run must not lose the others
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
    timings, errors = common.interleaved(contenders, rounds, warmup=1)
    skipped.update(errors)
    peer = timings[UNION_FIND]
    rows, summary = [], {"strongest peer": UNION_FIND}
    for name, t in timings.items():
        rate = n / t.median
        what = {"algorithm": algorithms[name]} if name in algorithms else {"peer": True}
        rows.append(
            {"contender": name, **what, "digis": n, "modules": n_modules, "digis_per_s": rate, **t.as_dict("time")}
        )
        summary[name] = {
            "M digis/s": rate / 1e6,
            "speed vs union-find": common.paired_ratio(peer, t),
            "speed vs flood fill": common.paired_ratio(timings[FLOOD_FILL], t),
        }
        if name in algorithms:
            summary[name]["algorithm"] = algorithms[name]
    rows += [{"contender": b, "status": "skipped", "reason": why} for b, why in skipped.items()]
    devices = ", ".join(str(pk.device(b)) for b in timings if b in pk.backends())
    doc = common.result_document(
        "clustering",
        f"{devices}; numba on the host CPU",
        args.quick,
        rows,
        summary,
        work=f"{n} digis in {n_modules} modules, 40 clusters of 1-9 pixels each, 2% invalid",
    )
    out = common.write_json(args.out, "clustering", doc)
    plot(rows, args.out)
    common.print_summary(summary, 28, skipped)
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    ok = [r for r in rows if "digis_per_s" in r]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.bar(
        range(len(ok)),
        [r["digis_per_s"] / 1e6 for r in ok],
        color=["0.35" if r["contender"] == UNION_FIND else "0.7" if r.get("peer") else "C0" for r in ok],
    )
    labels = [
        r["contender"].replace(" (1 thread)", "\n(1 thread)")
        + (f"\n{r['algorithm']}" if "algorithm" in r and "," not in r["contender"] else "")
        for r in ok
    ]
    ax.set_xticks(range(len(ok)), [t.replace(", ", "\n") for t in labels], fontsize=7)
    ax.set_ylabel("M digis/s (pixel clustering)")
    ax.set_title("grey: numba peers (dark: the union-find, the strongest)", fontsize=8)
    common.save_figure(fig, out_dir, "clustering")


if __name__ == "__main__":
    raise SystemExit(main())
