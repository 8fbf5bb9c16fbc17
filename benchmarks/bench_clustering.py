"""Pixel clustering digis/s: the port of CMSSW's clusterizer (examples/pixel_clustering.py) on each
backend against a numba connected-components implementation on the host.

Digis of CMS-sized modules (416 x 160 pixels), clusters of 1-9 pixels, 2% invalid, shuffled. Both
sides produce the same ids (checked); alpyka's digis are on the device before timing and its
clock stops when the ids are (find_clusters + queue.wait), numba's when it returns (one thread,
digis in host memory). Measured side by side, interleaved, in one run.

    python benchmarks/bench_clustering.py [--quick] [--smoke] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import njit

import _common as common

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import pixel_clustering as pc  # noqa: E402  - the port and the data, one copy


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


def _backends(smoke: bool) -> list[str]:
    names = common.backends()  # the available ones that $ALPYKA_BACKENDS leaves in
    return names[:1] if smoke else names


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__.splitlines()[0]), argv)
    n_modules = 8 if args.smoke else 300 if args.quick else 1856  # 1856: the CMS phase-1 pixel modules
    rounds = 2 if args.smoke else 5 if args.quick else 15
    module, x, y = pc.generate_digis(n_modules, clusters_per_module=40, seed=11)
    n = int(module.size)
    want = numba_clusters(module, x, y, pc.N_COLUMNS, pc.N_ROWS)
    assert np.array_equal(want, pc.reference_clusters(module, x, y)) if args.smoke else True
    contenders = {"numba (1 thread)": lambda: numba_clusters(module, x, y, pc.N_COLUMNS, pc.N_ROWS)}
    skipped = {}
    for b in common.progress(_backends(args.smoke), desc="bench_clustering", disable=args.no_progress):
        try:
            q = pk.Queue(pk.device(b))
            bufs = []
            for a in (module, x, y):
                buf = pk.Buffer(q.device, a.shape, a.dtype)
                pk.memcpy(q, buf, a)
                bufs.append(buf)
            got = np.empty(n, np.int32)
            pk.memcpy(q, got, pc.find_clusters(q, *bufs, n_modules=n_modules))
            q.wait()
            if not np.array_equal(got, want):
                raise AssertionError(f"{b}: ids differ from numba's at {int(np.count_nonzero(got != want))} digis")
        except Exception as exc:  # a backend that cannot run must not lose the others
            skipped[b] = f"{type(exc).__name__}: {exc}"[:300]
            continue

        def run(q=q, bufs=bufs) -> None:
            pc.find_clusters(q, *bufs, n_modules=n_modules)
            q.wait()

        contenders[b] = run
    timings, errors = common.interleaved(contenders, rounds, warmup=1)
    skipped.update(errors)
    base = timings["numba (1 thread)"]
    rows, summary = [], {}
    for name, t in timings.items():
        rate = n / t.median
        rows.append({"contender": name, "digis": n, "modules": n_modules, "digis_per_s": rate, **t.as_dict("time")})
        summary[name] = {"M digis/s": rate / 1e6, "speed vs numba": common.paired_ratio(base, t)}
    rows += [{"contender": b, "status": "skipped", "reason": why} for b, why in skipped.items()]
    devices = ", ".join(str(pk.device(b)) for b in timings if b in pk.backends())
    doc = common.result_document("clustering", f"{devices}; numba on the host CPU", args.quick, rows, summary,
                                 work=f"{n} digis in {n_modules} modules, 40 clusters of 1-9 pixels each, 2% invalid")
    out = common.write_json(args.out, "clustering", doc)
    plot(rows, args.out)
    for name, v in summary.items():
        print(f"{name:<18} " + "  ".join(f"{k}: {common.format_number(val)}" for k, val in v.items()))
    for b, why in skipped.items():
        print(f"skipped {b}: {why}")
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    ok = [r for r in rows if "digis_per_s" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(range(len(ok)), [r["digis_per_s"] / 1e6 for r in ok], color=["0.5"] + ["C0"] * (len(ok) - 1))
    ax.set_xticks(range(len(ok)), [r["contender"] for r in ok], fontsize=8)
    ax.set_ylabel("M digis/s (pixel clustering)")
    common.save_figure(fig, out_dir, "clustering")


if __name__ == "__main__":
    raise SystemExit(main())
