"""CMSSW's cluster charge cut (examples/cluster_charge_cut.py) on each backend against its numba twin:
a plain ``@njit`` loop over the modules doing the same work, one thread, as a numba user writes it;
a ``prange`` twin over the machine's cores shows what a parallel runtime got from them meanwhile.

Per module: each digi's charge added to its cluster's (alpyka: ``atomic_add`` on shared memory,
``hierarchy="block"``), clusters below the threshold cut, the survivors renumbered (alpyka:
``pk.tools.block_prefix_scan``; numba: a running counter). Synthetic events of 2000 modules,
clusters of 1-9 digis. Both sides write the same ids (checked) into outputs allocated once; alpyka's
inputs are on the device before timing, its queue is blocking (launched from the calling thread, as
the twin runs) and its clock stops at ``queue.wait()``. Interleaved in one
process; ratios are numba's time over alpyka's, paired per round (> 1: alpyka is faster), and of each
side's best round (on a shared machine the least disturbed; parallel runtimes suffer most). The whole
run is repeated (``--repeats``, 5 in a full run, 10 s apart) and the figures are medians over the
repeats; each run records how many cores other processes kept busy meanwhile (``/proc/stat`` less
this process's CPU time), what a parallel runtime measured then could not have. The host
contenders are timed together, and OpenCL (and cuda/rocm) apart, each with the twin: Intel's
OpenCL runtime keeps ~1.2 cores spinning for a ms after a kernel, which the contender timed next
would lose. Each CPU OpenCL runtime here (Intel's, PoCL) runs the example in three work divisions
side by side: its own ``pk.make_workdiv(dev, n_modules, 256)`` (one-work-item groups on a CPU),
``pk.valid_workdiv(dev, n_modules * 256, kernel=..., args=...)`` and the GPU shape (256
work-items a group). Targets: cpu_serial >= 1x, cpu_threads >= 1.5x (2 cores),
both OpenCL runtimes >= 0.5x in the example's and valid_workdiv's work divisions.

    python benchmarks/bench_charge_cut.py [--quick] [--smoke] [--repeats N] [--out DIR]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

# the prange twin's threads sleep when done (TBB's and OpenMP's spin a while, taking the cores
# from the contender timed next); read when numba is first imported
os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")

import _common as common
import numba
import numpy as np
from numba import njit, prange

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import cluster_charge_cut as cc

NUMBA = "numba njit (1 thread)"
#: the parallel twin: what any parallel runtime got from this machine's cores meanwhile
PRANGE = "numba prange (every core)"
THRESHOLD = 4000
#: the targets: numba's time over alpyka's (OpenCL: both CPU runtimes, the example's
#: pk.make_workdiv and pk.valid_workdiv with the kernel)
TARGETS = {
    "cpu_serial": 1.0,
    "cpu_threads": 1.5,
    **{f"opencl {rt}{shape}": 0.5 for rt in ("Intel", "PoCL") for shape in ("", ", valid_workdiv")},
}
MAX_CLUSTERS, INVALID = cc.MAX_CLUSTERS, cc.INVALID_CLUSTER
#: the event the targets are read at: 10 clusters a module (~100k digis)
TARGET_PER_MODULE = 10
#: seconds between two repeats of the whole run
PAUSE_S = 10.0
#: backends whose runtime runs commands on threads of its own: timed apart from the host contenders
OWN_THREADS = ("opencl", "cuda", "rocm")


@njit(cache=True)
def numba_charge_cut(
    module_start, cluster, adc, n_clusters, threshold, new_cluster, new_n_clusters
):  # pragma: no cover - compiled
    """The cut per module in plain numba: sum, cut, renumber with a running counter."""
    charge = np.empty(MAX_CLUSTERS, np.int32)
    new_id = np.empty(MAX_CLUSTERS, np.int32)
    for m in range(n_clusters.size):
        n_clus = min(max(n_clusters[m], 0), MAX_CLUSTERS)
        charge[:n_clus] = 0
        for i in range(module_start[m], module_start[m + 1]):
            c = cluster[i]
            if 0 <= c < n_clus:
                charge[c] += adc[i]
        kept = 0
        for c in range(n_clus):
            if charge[c] >= threshold:
                new_id[c] = kept
                kept += 1
            else:
                new_id[c] = INVALID
        for i in range(module_start[m], module_start[m + 1]):
            c = cluster[i]
            new_cluster[i] = new_id[c] if 0 <= c < n_clus else INVALID
        new_n_clusters[m] = kept


@njit(parallel=True, cache=True)
def numba_charge_cut_prange(
    module_start, cluster, adc, n_clusters, threshold, new_cluster, new_n_clusters, chunks
):  # pragma: no cover - compiled
    """The same per module, the modules in ``chunks`` ranges over numba's threads (scratch arrays
    once per range, as a numba user writes a parallel loop of small bodies)."""
    n_modules = n_clusters.size
    for k in prange(chunks):
        charge = np.empty(MAX_CLUSTERS, np.int32)
        new_id = np.empty(MAX_CLUSTERS, np.int32)
        for m in range(n_modules * k // chunks, n_modules * (k + 1) // chunks):
            n_clus = min(max(n_clusters[m], 0), MAX_CLUSTERS)
            charge[:n_clus] = 0
            for i in range(module_start[m], module_start[m + 1]):
                c = cluster[i]
                if 0 <= c < n_clus:
                    charge[c] += adc[i]
            kept = 0
            for c in range(n_clus):
                if charge[c] >= threshold:
                    new_id[c] = kept
                    kept += 1
                else:
                    new_id[c] = INVALID
            for i in range(module_start[m], module_start[m + 1]):
                c = cluster[i]
                new_cluster[i] = new_id[c] if 0 <= c < n_clus else INVALID
            new_n_clusters[m] = kept


def _sizes(args) -> list[int]:
    """Mean clusters per module of each measured event (2000 modules; 5 digis a cluster on average)."""
    return [10] if args.smoke else [10] if args.quick else [5, 10, 20]


def _contenders(event, want) -> tuple[dict, dict]:
    """``({name: call}, {backend: why not})``: the numba twin and every backend that reproduces ``want``."""
    n, n_modules = len(event[1]), len(event[3])
    out = (np.empty(n, np.int32), np.empty(n_modules, np.int32))
    numba_charge_cut(*event, THRESHOLD, *out)
    if not (np.array_equal(out[0], want[0]) and np.array_equal(out[1], want[1])):
        raise AssertionError("the numba twin differs from the numpy reference")
    calls = {NUMBA: lambda: numba_charge_cut(*event, THRESHOLD, *out)}
    par = (np.empty(n, np.int32), np.empty(n_modules, np.int32))
    chunks = 4 * numba.get_num_threads()
    numba_charge_cut_prange(*event, THRESHOLD, *par, chunks)
    if not (np.array_equal(par[0], want[0]) and np.array_equal(par[1], want[1])):
        raise AssertionError("the numba prange twin differs from the numpy reference")
    calls[PRANGE] = lambda: numba_charge_cut_prange(*event, THRESHOLD, *par, chunks)
    skipped = {}
    for name, dev, shape in _devices():  # every available one that $ALPYKA_BACKENDS leaves in
        try:
            q = pk.Queue(dev, blocking=True)  # called and waited for on this thread, as the twin
            bufs = []
            for a in event:
                buf = pk.Buffer(q.device, a.shape, a.dtype)
                pk.memcpy(q, buf, a)
                bufs.append(buf)
            res = (pk.Buffer(dev, n, np.int32), pk.Buffer(dev, n_modules, np.int32))
            wd = _workdiv(shape, dev, (*bufs, np.int32(THRESHOLD), *res, n_modules))
            cc.charge_cut(q, *bufs, THRESHOLD, *res, wd=wd)
            got = (np.empty(n, np.int32), np.empty(n_modules, np.int32))
            pk.memcpy(q, got[0], res[0])
            pk.memcpy(q, got[1], res[1])
            q.wait()
            if not (np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])):
                wrong = int(np.count_nonzero(got[0] != want[0]))
                raise AssertionError(f"{name}: ids differ from the reference at {wrong} digis")
        except Exception as exc:  # a backend that cannot run must not lose the others
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
            continue

        def run(q=q, bufs=bufs, res=res, wd=wd) -> None:
            cc.charge_cut(q, *bufs, THRESHOLD, *res, wd=wd)
            q.wait()

        calls[name] = run
    return calls, skipped


#: the work divisions each CPU OpenCL runtime runs the example in: the example's own
#: (``pk.make_workdiv(dev, n_modules, 256)``, no device test), ``pk.valid_workdiv`` asked with the
#: kernel, and the GPU shape (256 work-items a group) the library would give a GPU
SHAPES = ("", ", valid_workdiv", ", 256 work-items")


def _runtime_label(dev: pk.Device) -> str:
    """A CPU OpenCL runtime's short name: Intel's, PoCL, else its platform's."""
    platform = str(dev.properties.get("platform", ""))
    return {"portable computing language": "PoCL", "intel(r) opencl": "Intel"}.get(platform.lower(), platform)


def _devices() -> list[tuple[str, pk.Device, str]]:
    """``(contender, device, shape)``: each selected backend's default device in the example's
    work division, and each OpenCL runtime (Intel's, PoCL: one device a platform, no simulator)
    in every :data:`SHAPES`."""
    out = []
    for b in common.backends():
        if b != "opencl":
            out.append((b, pk.device(b), ""))
            continue
        runtimes: dict = {}
        for dev in pk.devices("opencl"):
            if not dev.properties.get("simulator"):
                runtimes.setdefault(dev.properties.get("platform"), dev)
        for dev in runtimes.values():
            out += [(f"opencl {_runtime_label(dev)}{shape}", dev, shape) for shape in SHAPES]
    return out


def _workdiv(shape: str, dev: pk.Device, args: tuple) -> pk.WorkDiv | None:
    """The work division of a :data:`SHAPES` entry (None: the example's ``pk.make_workdiv``)."""
    n_modules = args[-1]
    if shape == ", valid_workdiv":  # one element per digi slot of each module's block, as CMSSW's grid
        return pk.valid_workdiv(dev, n_modules * cc.ELEMENTS, kernel=cc.cluster_charge_cut, args=args)
    if shape == ", 256 work-items":
        return pk.WorkDiv(n_modules, cc.ELEMENTS, 1)
    return None


def _groups(fns: dict) -> list[dict]:
    """The contenders timed together, each group with the njit twin: the host ones (the twins,
    cpu_serial, cpu_threads), and each runtime with threads of its own (:data:`OWN_THREADS`) apart,
    whose threads keep spinning after a command (Intel's OpenCL: ~1.2 cores for the first ms) and
    would take the cores from the contender timed next."""
    apart = [name for name in fns if name.split()[0] in OWN_THREADS]
    host = {name: fn for name, fn in fns.items() if name not in apart}
    return [host] + [{NUMBA: fns[NUMBA], name: fns[name]} for name in apart]


def _measure(per_module: int, n_modules: int, rounds: int, calls: int) -> tuple[list, dict]:
    """Interleaved runs of every contender on one event, group by group (:func:`_groups`):
    ``([(event facts, timings), ...], why not)``."""
    event = cc.generate_event(n_modules, per_module, seed=7)
    want = cc.reference_charge_cut(*event, THRESHOLD)
    n = len(event[1])
    fns, skipped = _contenders(event, want)
    runs = []
    for group in _groups(fns):
        ticks = common.cpu_ticks()
        timings, errors = common.interleaved(group, rounds, calls=calls, warmup=2)
        skipped.update(errors)
        facts = {
            "digis": n,
            "modules": n_modules,
            "clusters_per_module": per_module,
            "clusters": int(event[3].sum()),
            "kept": int(want[1].sum()),
            "timed_with": sorted(group),
            "cores_busy_elsewhere": common.others_cores(ticks, common.cpu_ticks(), os.cpu_count() or 1),
            "label": f"{round(n, -3) // 1000}k digis" if n >= 1000 else f"{n} digis",
        }
        runs.append((facts, timings))
    return runs, skipped


def _rows(facts: dict, timings: dict, repeat: int) -> list[dict]:
    """One row per contender of one run: its times and its paired and best-round ratio to the twin."""
    base = timings[NUMBA]
    return [
        {
            "contender": name,
            "repeat": repeat,
            **{k: v for k, v in facts.items() if k != "label"},
            "speed_vs_numba": None if name == NUMBA else common.paired_ratio(base, t),
            "speed_vs_numba_best": None if name == NUMBA else common.ratio(base.min, t.min),
            **t.as_dict("time"),
        }
        for name, t in timings.items()
    ]


def _summary(rows: list[dict]) -> dict:
    """Per contender and event: the median over the repeats of each repeat's median time and
    paired ratio, the best rounds' ratio, each repeat's ratio, and the target at ~100k digis."""
    summary: dict = {}
    events = sorted({r["digis"] for r in rows if "time_median_ms" in r})
    for name in dict.fromkeys(r["contender"] for r in rows if "time_median_ms" in r):
        entry = summary.setdefault(name, {})
        for digis in events:
            mine = [r for r in rows if r["contender"] == name and r["digis"] == digis and "time_median_ms" in r]
            if not mine:
                continue
            label = f"{round(digis, -3) // 1000}k digis"
            entry[f"ms, {label}"] = statistics.median(r["time_median_ms"] for r in mine)
            if name == NUMBA:
                continue
            speeds = [r["speed_vs_numba"] for r in mine if r["speed_vs_numba"] is not None]
            if not speeds:
                continue
            speed = statistics.median(speeds)
            entry[f"speed vs numba, {label}"] = speed
            if mine[0]["clusters_per_module"] == TARGET_PER_MODULE:
                entry["speed vs numba"] = speed
                entry["speed vs numba, each repeat"] = speeds
                best = [r["speed_vs_numba_best"] for r in mine if r["speed_vs_numba_best"] is not None]
                entry["speed vs numba, best times"] = max(best) if best else None  # the least disturbed round
                entry["target"] = TARGETS.get(name)
                entry["met"] = None if name not in TARGETS else bool(speed >= TARGETS[name])
    busy = [r["cores_busy_elsewhere"] for r in rows if r["contender"] == NUMBA and r["digis"] in events]
    busy = [b for b in busy if b is not None]
    summary["machine while measured"] = {
        "cores busy with other work": statistics.median(busy) if busy else None,
        "repeats": max((r["repeat"] for r in rows if "repeat" in r), default=0) + 1,
        "prange threads": numba.get_num_threads(),
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = common.make_parser(__doc__)
    parser.add_argument(
        "--repeats", type=int, default=None, help="whole runs, PAUSE_S apart (default: 5 full, 1 quick/smoke)"
    )
    args = common.parse_args(parser, argv)
    n_modules = 20 if args.smoke else 2000
    rounds = 2 if args.smoke else 11 if args.quick else 41
    calls = 1 if args.smoke else 3  # short samples: on a shared machine some rounds stay undisturbed
    repeats = args.repeats or (1 if args.quick else 5)
    rows, skipped = [], {}
    work = [(k, s) for k in range(repeats) for s in _sizes(args)]
    bar = common.progress(work, total=len(work), desc="bench_charge_cut", disable=args.no_progress)
    for k, per_module in bar:
        if k and per_module == _sizes(args)[0]:
            time.sleep(PAUSE_S)  # the next repeat meets other moments of a shared machine's load
        runs, why = _measure(per_module, n_modules, rounds, calls)
        skipped.update(why)
        for facts, timings in runs:
            rows += _rows(facts, timings, k)
        bar.set_postfix_str(f"repeat {k + 1}, {runs[0][0]['label']}")
    summary = _summary(rows)
    rows += [{"contender": b, "status": "skipped", "reason": r} for b, r in skipped.items()]
    devices = ", ".join(dict.fromkeys(str(dev) for name, dev, _ in _devices() if name in summary))
    doc = common.result_document(
        "charge_cut",
        f"{devices}; numba on the host CPU",
        args.quick,
        rows,
        summary,
        mode=common.mode(args),
        cores=len(os.sched_getaffinity(0)),
        load_average=[round(x, 2) for x in os.getloadavg()],
        opencl_device=os.environ.get("ALPYKA_OPENCL_DEVICE", "(default)"),
        work=f"{n_modules} modules, clusters of 1-9 digis, threshold {THRESHOLD}",
        ratios="numba's time over alpyka's, paired per round; median over the repeats",
    )
    out = common.write_json(args.out, "charge_cut", doc)
    plot(rows, args.out)
    common.print_summary(summary, 22, skipped)
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> None:
    """Speed vs the numba twin per backend and event size: the median over the repeats (bars)
    and each repeat (dots)."""
    plt = common.pyplot()
    ok = [r for r in rows if r.get("speed_vs_numba") is not None]
    sizes = sorted({r["digis"] for r in ok})
    names = list(dict.fromkeys(r["contender"] for r in ok))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(sizes), 1)
    for k, size in enumerate(sizes):
        xs, meds = [], []
        for i, b in enumerate(names):
            each = [r["speed_vs_numba"] for r in ok if r["contender"] == b and r["digis"] == size]
            xs.append(i + k * width)
            meds.append(statistics.median(each) if each else 0)
            ax.plot([i + k * width] * len(each), each, ".", color="0.2", ms=3)
        ax.bar(xs, meds, width, label=f"{size // 1000}k digis", alpha=0.8)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xticks(
        [i + width * (len(sizes) - 1) / 2 for i in range(len(names))], names, fontsize=7, rotation=30, ha="right"
    )
    ax.set_ylabel("speed vs numba njit (x)")
    ax.set_title("ClusterChargeCut, 2000 modules (bars: median of repeats)", fontsize=9)
    if sizes:
        ax.legend(fontsize=7)
    common.save_figure(fig, out_dir, "charge_cut")


if __name__ == "__main__":
    raise SystemExit(main())
