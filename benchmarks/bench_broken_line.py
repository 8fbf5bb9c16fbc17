"""CMSSW's Broken Line track fit (examples/broken_line_fit.py) on each backend against its numba
twin (benchmarks/_broken_line_twin.py: one ``@njit`` loop over the tracks, as a numba user writes
it), on generated helix tracks of 3-5 hits (examples/broken_line_reference.py).

Both sides fit the same tracks into outputs allocated once, and both agree with the numpy
reference within float64 rounding (checked before timing). alpyka's inputs are on the device
before timing; its timed call is the whole fit (grouping the tracks by hit count with
``pk.tools.one_to_many``, then one launch per count) on a blocking queue, its clock stopped at
``queue.wait()``. Interleaved in one process; ratios are the twin's time over alpyka's, paired per
round (> 1: alpyka is faster). Runtimes with threads of their own (OpenCL, cuda, rocm) are timed
apart from the host contenders, each with the twin. Target: cpu_serial >= 1.0x at
100,000 tracks.

    python benchmarks/bench_broken_line.py [--quick] [--smoke] [--tracks N] [--out DIR]
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import _common as common
import numpy as np
from _broken_line_twin import numba_broken_line

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import broken_line_fit as bl  # examples/ is not a package

ref = bl.reference
NUMBA = "numba njit (1 thread)"
TARGETS = {"cpu_serial": 1.0}
#: how far a contender may be from the reference (as tests/examples/test_broken_line_fit.py)
TOLERANCE = 1e-8
OWN_THREADS = ("opencl", "cuda", "rocm")
FIELDS = ("state", "covariance", "pt", "eta", "chi2", "charge")
#: the smoke run's tracks: not a multiple of the SoA columns' alignment, so the columns are padded
#: and numba compiles the fit kernels for the same array layout ('A') as the example's tests (600
#: and 300 tracks), whose compiles a whole run then shares; at 2,000 the columns are contiguous
#: ('F') and numba compiled the three fit kernels again (about 10 s of CPU)
SMOKE_TRACKS = 1990


def _outputs(t: int) -> dict:
    return {"state": np.zeros((t, 5)), "covariance": np.zeros((t, 15)), "pt": np.zeros(t), "eta": np.zeros(t),
            "chi2": np.zeros(t), "charge": np.zeros(t, np.int8)}  # fmt: skip


def _check(name: str, got: dict, want: dict) -> None:
    worst = bl.compare(got, want)
    if worst["charge"] or max(worst.values()) >= TOLERANCE:
        raise AssertionError(f"{name} differs from the numpy reference: {worst}")


def _contenders(generated: dict, want: dict) -> tuple[dict, dict]:
    """``({name: call}, {backend: why not})``: the twin and every backend that reproduces the reference."""
    t = len(generated["n_hits"])
    out = _outputs(t)
    args = (generated["n_hits"], generated["hits"], generated["hits_ge"], ref.B_FIELD, *(out[k] for k in FIELDS))
    numba_broken_line(*args)
    _check(NUMBA, out, want)
    calls = {NUMBA: lambda: numba_broken_line(*args)}
    skipped = {}
    for b in common.backends():
        try:
            q = pk.Queue(pk.device(b), blocking=True)
            n_hits, hits = bl.upload_tracks(q, generated)
            tracks = pk.PortableCollection(bl.Tracks, t, q)
            scratch = bl.fit_tracks(q, n_hits, hits, tracks)
            _check(b, bl.download_tracks(q, tracks), want)
        except Exception as exc:  # a backend that cannot run must not lose the others
            skipped[b] = f"{type(exc).__name__}: {exc}"[:300]
            continue

        def run(q=q, n_hits=n_hits, hits=hits, tracks=tracks, scratch=scratch) -> None:
            bl.fit_tracks(q, n_hits, hits, tracks, scratch=scratch)
            q.wait()

        calls[b] = run
    return calls, skipped


def _groups(fns: dict) -> list[dict]:
    """The host contenders together, each runtime with threads of its own apart (with the twin)."""
    apart = [name for name in fns if name in OWN_THREADS]
    host = {name: fn for name, fn in fns.items() if name not in apart}
    return [host] + [{NUMBA: fns[NUMBA], name: fns[name]} for name in apart]


def main(argv: list[str] | None = None) -> int:
    parser = common.make_parser(__doc__)
    parser.add_argument("--tracks", type=int, default=None, help="tracks per fit (default: 100,000; smoke: 1,990)")
    args = common.parse_args(parser, argv)
    n = args.tracks or (SMOKE_TRACKS if args.smoke else 100_000)
    rounds = 2 if args.smoke else 9 if args.quick else 31
    generated = ref.generate_tracks(n, seed=11)
    want = ref.reference_fit_all(generated)
    fns, skipped = _contenders(generated, want)
    rows = []
    groups = _groups(fns)
    bar = common.progress(groups, total=len(groups), desc="bench_broken_line", disable=args.no_progress)
    for group in bar:
        timings, errors = common.interleaved(group, rounds, warmup=2)
        skipped.update(errors)
        base = timings.get(NUMBA)
        for name, timing in timings.items():
            rows.append({
                "contender": name,
                "tracks": n,
                "timed_with": sorted(group),
                "speed_vs_numba": None if name == NUMBA or base is None else common.paired_ratio(base, timing),
                "speed_vs_numba_best": None if name == NUMBA or base is None else common.ratio(base.min, timing.min),
                "us_per_track": timing.median / n * 1e6,
                **timing.as_dict("time"),
            })  # fmt: skip
    summary = _summary(rows)
    rows += [{"contender": b, "status": "skipped", "reason": r} for b, r in skipped.items()]
    devices = ", ".join(str(pk.device(b)) for b in summary if b in pk.backends())
    doc = common.result_document(
        "broken_line",
        f"{devices}; numba on the host CPU",
        args.quick,
        rows,
        summary,
        mode=common.mode(args),
        cores=len(os.sched_getaffinity(0)),
        load_average=[round(x, 2) for x in os.getloadavg()],
        work=f"{n} generated helix tracks of 3-5 hits, Broken Line fit (line + circle), float64",
        ratios="the numba twin's time over alpyka's, paired per round",
    )
    out = common.write_json(args.out, "broken_line", doc)
    plot(rows, args.out, n)
    common.print_summary(summary, 24, skipped)
    print(f"wrote {out}")
    return 0


def _summary(rows: list[dict]) -> dict:
    """Per contender: the median time, us per track, the paired ratio to the twin (the median over
    the groups it was timed in), the best rounds' ratio, and the target where there is one."""
    summary: dict = {}
    for name in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == name]
        entry = summary.setdefault(name, {})
        entry["ms"] = statistics.median(r["time_median_ms"] for r in mine)
        entry["us per track"] = statistics.median(r["us_per_track"] for r in mine)
        speeds = [r["speed_vs_numba"] for r in mine if r["speed_vs_numba"] is not None]
        if name != NUMBA and speeds:
            entry["speed vs numba"] = statistics.median(speeds)
            entry["speed vs numba, best times"] = max(r["speed_vs_numba_best"] for r in mine)
            entry["target"] = TARGETS.get(name)
            entry["met"] = None if name not in TARGETS else bool(entry["speed vs numba"] >= TARGETS[name])
    return summary


def plot(rows: list[dict], out_dir: Path, n: int) -> None:
    """Speed vs the numba twin per backend."""
    plt = common.pyplot()
    ok = [r for r in rows if r.get("speed_vs_numba") is not None]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.bar([r["contender"] for r in ok], [r["speed_vs_numba"] for r in ok], color="tab:blue", alpha=0.8)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_ylabel("speed vs numba njit (x)")
    ax.set_title(f"Broken Line fit, {n:,} tracks of 3-5 hits", fontsize=9)
    common.save_figure(fig, out_dir, "broken_line")


if __name__ == "__main__":
    raise SystemExit(main())
