"""The pixel vertex finder's sortByPt2 (examples/sort_by_pt2.py: per-vertex pt^2 sums, then the
vertices of each event sorted in the kernel by pk.tools.block_radix_sort) on each backend, against
the strongest simple peer, a numba twin (one thread: the same sums, then numpy's stable argsort
of each event), and numpy event by event.

Events of 8, 40 and 200 vertices on average (2-40 tracks a vertex). alpyka's rows run the radix
sort and, on cpu_serial and the first backend whose blocks have threads, the rank sort
(``sort="rank"``: pk.tools.block_rank_sort, quadratic, no workspace), to show where the simple
block sort pays. Every contender's ``sort_ind`` and ``ptv2`` are checked equal to numpy's.
alpyka's inputs are on the device before timing and its clock stops when the results are
(sort_events + queue.wait); numba's and numpy's when they return. Measured side by side,
interleaved, in one run; speeds are paired ratios against the numba twin (and best-of ratios),
each size with the load and the cores other processes kept busy.

    python benchmarks/bench_sort_by_pt2.py [--quick] [--smoke] [--out DIR]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import _common as common
import numpy as np
from numba import njit

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import sort_by_pt2 as sp


@njit(cache=True)
def numba_twin(track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sort_ind):  # pragma: no cover - compiled
    """sortByPt2 on one thread: the same exact float64 sums, rounded to float32, then a stable
    argsort (numba's mergesort) of each event's vertices."""
    for e in range(track_start.size - 1):
        t0, t1, v0, v1 = track_start[e], track_start[e + 1], vertex_start[e], vertex_start[e + 1]
        sums = np.zeros(v1 - v0, np.float64)
        for i in range(t0, t1):
            idv[t0 + itrk[i]] = iv[i]
            if iv[i] <= 9990 and iv[i] < v1 - v0:
                sums[iv[i]] += np.float64(ptt2[i])
        for v in range(v1 - v0):
            ptv2[v0 + v] = np.float32(sums[v])
        sort_ind[v0:v1] = np.argsort(ptv2[v0:v1], kind="mergesort")


#: the contenders that are not alpyka's: the strongest peer first (every speed is against it)
NUMBA, NUMPY = "numba twin (1 thread)", "numpy per event"


def _alpyka(b: str, host, want, sort: str):
    """A timed call of sort_events on backend ``b`` (inputs uploaded once, results checked)."""
    q = pk.Queue(pk.device(b))
    bufs = []
    for a in host:
        buf = pk.Buffer(q.device, a.shape, a.dtype)
        pk.memcpy(q, buf, a)
        bufs.append(buf)
    out = sp.outputs(q.device, host[2].size, int(host[1][-1]))
    sp.sort_events(q, *bufs, out, sort=sort)
    got = [np.empty(o.shape, o.dtype) for o in out[:3]]
    for g, o in zip(got, out):
        pk.memcpy(q, g, o)
    q.wait()
    for name, g, w in zip(("idv", "ptv2", "sort_ind"), got, want):
        if not np.array_equal(g[: w.size], w):
            raise AssertionError(f"{b}: {name} differs from numpy's")

    def run() -> None:
        sp.sort_events(q, *bufs, out, sort=sort)
        q.wait()

    return run


def _peers(host, want) -> dict:
    n_tracks, nv = host[2].size, max(int(host[1][-1]), 1)
    idv, ptv2, sort_ind = np.empty(n_tracks, np.int32), np.zeros(nv, np.float32), np.zeros(nv, np.int32)
    numba_twin(*host, idv, ptv2, sort_ind)
    for name, g, w in zip(("idv", "ptv2", "sort_ind"), (idv, ptv2, sort_ind), want):
        if not np.array_equal(g[: w.size], w):
            raise AssertionError(f"the numba twin's {name} differs from numpy's")
    return {NUMBA: lambda: numba_twin(*host, idv, ptv2, sort_ind), NUMPY: lambda: sp.reference(*host)}


def _runs(smoke: bool) -> list[tuple[str, str, str]]:
    """(row name, backend, sort) of alpyka's rows."""
    names = common.backends()
    names = names[:1] if smoke else names
    runs = [(b, b, "radix") for b in names]
    threaded = [b for b in names if pk.device(b).limits.max_threads_per_block > 1][:1]
    for b in ([names[0]] if names else []) + threaded:
        runs.append((f"{b}, rank sort", b, "rank"))
    return runs


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__), argv)
    n_events = 4 if args.smoke else 100 if args.quick else 1000
    rounds = 2 if args.smoke else 5 if args.quick else 15
    sizes = [8] if args.smoke else [8, 40, 200]
    rows, summary, skipped = [], {"strongest peer": NUMBA}, {}
    for vertices in common.progress(sizes, desc="bench_sort_by_pt2", disable=args.no_progress):
        host = sp.generate_events(n_events, vertices, seed=vertices)
        want = sp.reference(*host)
        contenders = _peers(host, want)
        for name, b, sort in _runs(args.smoke):
            try:
                contenders[name] = _alpyka(b, host, want, sort)
            except Exception as exc:  # a backend that cannot run must not lose the others
                skipped[f"{name} ({vertices} vertices)"] = f"{type(exc).__name__}: {exc}"[:300]
        ticks = common.cpu_ticks()
        timings, errors = common.interleaved(contenders, rounds, warmup=1)
        busy = common.others_cores(ticks, common.cpu_ticks())
        skipped.update({f"{k} ({vertices} vertices)": v for k, v in errors.items()})
        peer = timings[NUMBA]
        for name, t in timings.items():
            rate = n_events / t.median
            rows.append(
                {
                    "contender": name,
                    "vertices_per_event": vertices,
                    "events": n_events,
                    "tracks": int(host[2].size),
                    "events_per_s": rate,
                    "cores_busy_elsewhere": busy,
                    "load_average": common.load_average(),
                    **t.as_dict("time"),
                }
            )
            summary[f"{name}, {vertices} vertices"] = {
                "k events/s": rate / 1e3,
                "speed vs numba twin": common.paired_ratio(peer, t),
                "best-of speed": common.ratio(peer.min, t.min),
            }
    rows += [{"contender": what, "status": "skipped", "reason": why} for what, why in skipped.items()]
    devices = ", ".join(str(pk.device(b)) for b in dict.fromkeys(b for _, b, _ in _runs(args.smoke)))
    doc = common.result_document(
        "sort_by_pt2",
        f"{devices}; numba and numpy on the host CPU",
        args.quick,
        rows,
        summary,
        mode=common.mode(args),
        work=f"{n_events} events of {', '.join(map(str, sizes))} vertices on average, 2-40 tracks a vertex",
        load_average=common.load_average(),
        cores=os.cpu_count(),
    )
    out = common.write_json(args.out, "sort_by_pt2", doc)
    plot(rows, args.out)
    common.print_summary(summary, 40, skipped)
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    ok = [r for r in rows if "events_per_s" in r]
    names = list(dict.fromkeys(r["contender"] for r in ok))
    sizes = sorted({r["vertices_per_event"] for r in ok})
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        rate = {r["vertices_per_event"]: r["events_per_s"] / 1e3 for r in ok if r["contender"] == name}
        color = "0.35" if name == NUMBA else "0.7" if name == NUMPY else f"C{k}"
        xs = [s + k * width for s in range(len(sizes))]
        ax.bar(xs, [rate.get(s, 0) for s in sizes], width, label=name, color=color)
    ax.set_xticks([s + 0.4 - width / 2 for s in range(len(sizes))], [f"{s} vertices/event" for s in sizes])
    ax.set_yscale("log")
    ax.set_ylabel("k events/s (sortByPt2)")
    ax.set_title("grey: numba twin (dark, the strongest peer) and numpy", fontsize=8)
    ax.legend(fontsize=6, ncol=2)
    common.save_figure(fig, out_dir, "sort_by_pt2")


if __name__ == "__main__":
    raise SystemExit(main())
