"""pk.tools at per-event and larger sizes: prefix_scan, argsort and one_to_many on each backend
against numpy (np.cumsum, np.argsort(kind="stable"), a one-to-many by argsort + bincount) and
one_to_many against a numba counting sort, the strongest simple one a user would write.

Keys int32 (scan values 0-99; bins: n // 16, about 16 keys each), on the device before timing;
alpyka runs on a blocking queue (per event, a call returns with its results, as CMSSW's serial
backend does) and its clock stops when the results are, with new output Buffers per call as
numpy makes new arrays. Every contender of one size runs interleaved in one process
(common.interleaved), so ratios are paired per round: peer time / alpyka time, above 1 alpyka
is faster.

    python benchmarks/bench_tools.py [--quick] [--smoke] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import _common as common
import numpy as np
from numba import njit

import portable as pk


@njit(cache=True)
def numba_one_to_many(keys, nbins):  # pragma: no cover - compiled
    """A counting sort: count, scan, fill (stable); -1 past the kept keys, like pk.tools."""
    n = keys.size
    offsets = np.zeros(nbins + 1, np.int32)
    for i in range(n):
        k = keys[i]
        if 0 <= k < nbins:
            offsets[k + 1] += 1
    for b in range(nbins):
        offsets[b + 1] += offsets[b]
    pos = offsets[:nbins].copy()
    content = np.full(n, -1, np.int32)
    for i in range(n):
        k = keys[i]
        if 0 <= k < nbins:
            content[pos[k]] = i
            pos[k] += 1
    return offsets, content


def numpy_one_to_many(keys: np.ndarray, nbins: int) -> tuple[np.ndarray, np.ndarray]:
    """The same association in numpy: a stable argsort and the bins' counts scanned."""
    kept = np.flatnonzero((keys >= 0) & (keys < nbins))
    content = kept[np.argsort(keys[kept], kind="stable")].astype(np.int32)
    offsets = np.zeros(nbins + 1, np.int32)
    np.cumsum(np.bincount(keys[kept], minlength=nbins), out=offsets[1:])
    return offsets, content


def _upload(q: pk.Queue, a: np.ndarray) -> pk.Buffer:
    buf = pk.Buffer(q.device, a.shape, a.dtype)
    pk.memcpy(q, buf, a)
    return buf


def _contenders(q: pk.Queue, n: int, with_numba: bool) -> dict:
    rng = np.random.default_rng(n)
    values = rng.integers(0, 100, n).astype(np.int32)
    nbins = max(n // 16, 1)
    keys = rng.integers(0, nbins, n).astype(np.int32)
    vb, kb, dst = _upload(q, values), _upload(q, keys), pk.Buffer(q.device, n, np.int32)
    offsets, content = pk.tools.one_to_many(q, kb, nbins)
    got = np.empty(nbins + 1, np.int32)
    pk.memcpy(q, got, offsets)
    q.wait()
    if not np.array_equal(got, numpy_one_to_many(keys, nbins)[0]):
        raise AssertionError(f"{q.device}: one_to_many's offsets differ from numpy's")

    def wait_after(fn):
        def run():
            fn()
            q.wait()

        return run

    fns = {
        "alpyka prefix_scan": wait_after(lambda: pk.tools.prefix_scan(q, vb, dst)),
        "np.cumsum": lambda: np.cumsum(values),
        "alpyka argsort": wait_after(lambda: pk.tools.argsort(q, kb)),
        "np.argsort stable": lambda: np.argsort(keys, kind="stable"),
        "alpyka one_to_many": wait_after(lambda: pk.tools.one_to_many(q, kb, nbins)),
        "numpy one_to_many": lambda: numpy_one_to_many(keys, nbins),
    }
    if with_numba:
        fns["numba counting sort"] = lambda: numba_one_to_many(keys, nbins)
    return fns


PAIRS = [
    ("prefix_scan vs np.cumsum", "np.cumsum", "alpyka prefix_scan"),
    ("argsort vs np.argsort", "np.argsort stable", "alpyka argsort"),
    ("one_to_many vs numpy", "numpy one_to_many", "alpyka one_to_many"),
    ("one_to_many vs numba", "numba counting sort", "alpyka one_to_many"),
]


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__), argv)
    sizes = [1000] if args.smoke else [1000, 100_000] if args.quick else [1000, 100_000, 1_000_000]
    rounds = 3 if args.smoke else 10 if args.quick else 30
    names = common.backends(["cpu_serial", "cpu_threads", "opencl", "cuda", "rocm"])
    names = names[:1] if args.smoke else names
    rows, summary, skipped = [], {}, {}
    for b in common.progress(names, desc="bench_tools", disable=args.no_progress):
        q = pk.Queue(pk.device(b), blocking=True)  # per event: the call returns with the results
        for n in sizes:
            try:
                fns = _contenders(q, n, with_numba=n >= 1_000_000 or args.smoke)
            except Exception as exc:  # a backend that cannot run must not lose the others
                skipped[f"{b}, n={n}"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            big = n >= 1_000_000
            timings, errors = common.interleaved(fns, rounds, warmup=1, min_rounds=3, budget_s=2.0 if big else None)
            skipped.update({f"{b}, n={n}: {k}": v for k, v in errors.items()})
            for name, t in timings.items():
                rows.append(
                    {"contender": name, "section": f"{b}, n={n}", "n": n, **t.as_dict("time", scale=1e6, unit="us")}
                )
            entry = {
                label: common.paired_ratio(timings[peer], timings[mine])
                for label, peer, mine in PAIRS
                if peer in timings and mine in timings
            }
            summary[f"{b}, n={n:.0e}"] = entry
    rows += [{"contender": what, "status": "skipped", "reason": why} for what, why in skipped.items()]
    devices = ", ".join(str(pk.device(b)) for b in names)
    doc = common.result_document(
        "tools",
        f"{devices}; numpy and numba on the host CPU",
        args.quick,
        rows,
        summary,
        ratios="peer time / alpyka time, median over interleaved rounds (> 1: alpyka faster)",
    )
    out = common.write_json(args.out, "tools", doc)
    plot(summary, args.out)
    common.print_summary(summary, 22, skipped)
    print(f"wrote {out}")
    return 0


def plot(summary: dict, out_dir: Path) -> None:
    plt = common.pyplot()
    labels = list(summary)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels) + 2), 3.8))
    width = 0.8 / len(PAIRS)
    for j, (pair, _, _) in enumerate(PAIRS):
        ys = [summary[k].get(pair) or 0.0 for k in labels]
        ax.bar([i + j * width for i in range(len(labels))], ys, width, label=pair)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("peer time / alpyka time")
    ax.legend(fontsize=7)
    common.save_figure(fig, out_dir, "tools")


if __name__ == "__main__":
    raise SystemExit(main())
