"""Real data in: read + fill + kernel events/s of alpyka vs plain uproot + awkward + numpy.

Both sides do the same work on the CMS sample uproot-HZZ.root (scikit-hep-testdata 0.3.12): read
the five muon branches (px, py, pz, E, charge), then compute the invariant mass of every muon pair
of every event. alpyka: ``pk.read_root`` (uproot + one memcpy per column into the SoA collection),
the ``pair_masses`` kernel of examples/dimuon_mass.py (one event per block) and the copy back to
the host; reference: ``tree.arrays`` + ``ak.combinations`` + numpy. Measured side by side,
alternating, in one run; also the bytes copied between awkward and the collection.

    python benchmarks/bench_data.py [--quick] [--smoke] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import _common as common
import numpy as np

import portable as pk

sys.path.insert(0, str(common.REPO_ROOT / "examples"))
import dimuon_mass as dm


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(common.make_parser(__doc__), argv)
    import awkward as ak
    import skhep_testdata
    import uproot

    path = skhep_testdata.data_path("uproot-HZZ.root")
    branches = dm.branches("Muon")
    repeats = 2 if args.smoke else 5 if args.quick else 15
    backends = common.backends(("cpu_serial", "cpu_threads", "opencl"))
    if args.smoke:
        backends = backends[:1]

    def reference() -> np.ndarray:
        t = uproot.open(path)["events"]
        a = t.arrays(list(branches.values()))
        mu = ak.zip({k: a[v] for k, v in branches.items()})
        return dm.reference_pair_masses(mu)[0]

    def alpyka(q: pk.Queue, report: dict | None = None) -> np.ndarray:
        coll, off = pk.read_root(path, "events", dm.Leptons, q, branches=branches, report=report)
        return np.asarray(dm.run_pair_masses(q, coll, off).mass)

    def read_only() -> None:
        uproot.open(path)["events"].arrays(list(branches.values()))

    n_events = int(uproot.open(path)["events"].num_entries)
    ref = reference()
    rows, summary = [], {}
    t_read = common.measure(read_only, repeats=repeats)
    for b in common.progress(backends, desc="bench_data", disable=args.no_progress):
        q = pk.Queue(pk.device(b))
        report: dict = {}
        np.testing.assert_allclose(alpyka(q, report), ref, rtol=1e-4, atol=1e-3)  # warm up + check
        # side by side, alternating: one reference run, one alpyka run, repeats times
        t_ref, t_pk = common.Timing([]), common.Timing([])
        for _ in range(repeats):
            t_ref.times.extend(common.measure(reference, warmup=0, repeats=1).times)
            t_pk.times.extend(common.measure(lambda: alpyka(q), warmup=0, repeats=1).times)
        row = {
            "backend": b,
            "events": n_events,
            "rows": report["rows"],
            "alpyka_events_per_s": n_events / t_pk.median,
            "reference_events_per_s": n_events / t_ref.median,
            "read_only_events_per_s": n_events / t_read.median,
            "filled_bytes": report["filled_bytes"],
            "converted_bytes": report["converted_bytes"],
            "to_device_bytes": report["to_device_bytes"],
            "offsets_shared": report["offsets_shared"],
            **t_pk.as_dict("alpyka"),
            **t_ref.as_dict("reference"),
        }
        rows.append(row)
        summary[b] = {
            "alpyka / reference": row["alpyka_events_per_s"] / row["reference_events_per_s"],
            "alpyka events/s": row["alpyka_events_per_s"],
            "reference events/s": row["reference_events_per_s"],
            "extra bytes copied (dtype conversions)": float(report["converted_bytes"]),
            "bytes filled (1 memcpy/column)": float(report["filled_bytes"]),
        }
    doc = common.result_document(
        "data",
        "cpu: " + ", ".join(str(pk.device(b)) for b in backends),
        args.quick,
        rows,
        summary,
        file="uproot-HZZ.root",
        work="read 5 muon branches + all pair masses",
    )
    out = common.write_json(args.out, "data", doc)
    plot(rows, args.out)
    common.print_summary(summary, 12)
    print(f"read only (uproot, 5 branches): {n_events / t_read.median:.0f} events/s")
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["alpyka_events_per_s"] for r in rows], 0.4, label="alpyka: read_root + kernel")
    ax.bar(x + 0.2, [r["reference_events_per_s"] for r in rows], 0.4, label="uproot + awkward + numpy")
    ax.set_xticks(x, [r["backend"] for r in rows])
    ax.set_ylabel("events/s (HZZ, muon pair masses)")
    ax.legend(fontsize=8)
    common.save_figure(fig, out_dir, "data")


if __name__ == "__main__":
    raise SystemExit(main())
