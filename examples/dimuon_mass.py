"""Real CMS events in, invariant masses out: dimuon and four-lepton masses with alpyka kernels.

Reads the CMS samples of scikit-hep-testdata 0.3.12 (uproot-HZZ.root: muons and electrons per
event; uproot-Zmumu.root: one dimuon per event) with ``pk.read_root``, runs kernels over events
(one event per block, the event's rows over the block's threads), checks them against the
awkward/numpy reference and plots both (PNG).

Run: python examples/dimuon_mass.py [backend] [--out DIR]
Needs: pip install 'alpyka[data]' scikit-hep-testdata==0.3.12 (matplotlib for the plot)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

import portable as pk
import soa
from portable.cli import backend_argument, run_script


class Leptons(soa.Layout):
    px = soa.column(np.float32)
    py = soa.column(np.float32)
    pz = soa.column(np.float32)
    E = soa.column(np.float32)
    charge = soa.column(np.int32)


class Pairs(soa.Layout):
    mass = soa.column(np.float32)
    opposite = soa.column(np.int8)


class EventSums(soa.Layout):
    E = soa.column(np.float32)
    px = soa.column(np.float32)
    py = soa.column(np.float32)
    pz = soa.column(np.float32)
    charge = soa.column(np.int32)
    mass = soa.column(np.float32)  # -1 where the event is not 4 leptons of total charge 0


class Dimuon(soa.Layout):
    E1 = soa.column(np.float64)
    px1 = soa.column(np.float64)
    py1 = soa.column(np.float64)
    pz1 = soa.column(np.float64)
    E2 = soa.column(np.float64)
    px2 = soa.column(np.float64)
    py2 = soa.column(np.float64)
    pz2 = soa.column(np.float64)


def branches(prefix: str) -> dict[str, str]:
    return {
        "px": f"{prefix}_Px",
        "py": f"{prefix}_Py",
        "pz": f"{prefix}_Pz",
        "E": f"{prefix}_E",
        "charge": f"{prefix}_Charge",
    }


@pk.kernel
def pair_masses(acc, mu, offsets, pair_off, out, n_events):
    """Invariant mass of every muon pair of every event: blocks take events, the block's threads
    take the event's pairs; pair k of event e lands in its ``ak.combinations`` slot."""
    for e in acc.independent_groups(n_events):
        for k, a, b in acc.pairs(offsets[e], offsets[e + 1]):
            p = pair_off[e] + k
            E = mu.E[a] + mu.E[b]
            px = mu.px[a] + mu.px[b]
            py = mu.py[a] + mu.py[b]
            pz = mu.pz[a] + mu.pz[b]
            m2 = E * E - px * px - py * py - pz * pz
            out.mass[p] = math.sqrt(m2) if m2 > 0 else 0.0
            out.opposite[p] = 1 if mu.charge[a] * mu.charge[b] < 0 else 0


@pk.kernel
def four_lepton_mass(acc, lep, offsets, sums, n_events):
    """Per event: the threads of its block add up its leptons' four-momenta (atomics), then one
    thread writes the mass of events with exactly four leptons of total charge 0."""
    for e in acc.independent_groups(n_events):
        for i in acc.independent_group_elements(offsets[e], offsets[e + 1]):
            acc.atomic_add(sums.E, e, lep.E[i])
            acc.atomic_add(sums.px, e, lep.px[i])
            acc.atomic_add(sums.py, e, lep.py[i])
            acc.atomic_add(sums.pz, e, lep.pz[i])
            acc.atomic_add(sums.charge, e, lep.charge[i])
        acc.sync_block_threads()
        if acc.once_per_block():
            m2 = sums.E[e] * sums.E[e] - sums.px[e] * sums.px[e] - sums.py[e] * sums.py[e] - sums.pz[e] * sums.pz[e]
            if offsets[e + 1] - offsets[e] == 4 and sums.charge[e] == 0:
                sums.mass[e] = math.sqrt(m2) if m2 > 0 else 0.0
            else:
                sums.mass[e] = -1.0


@pk.kernel
def flat_pair_mass(acc, d, out, n):
    """One dimuon per event (flat columns): a plain element loop."""
    for e in acc.uniform_elements(n):
        E = d.E1[e] + d.E2[e]
        px = d.px1[e] + d.px2[e]
        py = d.py1[e] + d.py2[e]
        pz = d.pz1[e] + d.pz2[e]
        m2 = E * E - px * px - py * py - pz * pz
        out[e] = math.sqrt(m2) if m2 > 0 else 0.0


def on_device(queue: pk.Queue, host_array: np.ndarray):
    """``host_array`` where the queue's kernels can read it (a Buffer on non-host devices)."""
    if queue.device.is_host_memory:
        return host_array
    buf = pk.Buffer(queue.device, host_array.shape, host_array.dtype, queue=queue)
    pk.memcpy(queue, buf, host_array)
    return buf


def run_pair_masses(queue: pk.Queue, coll: pk.PortableCollection, offsets) -> pk.PortableCollection:
    """Every pair's mass and sign of every event; returns the host copy (waits)."""
    off = pk.offsets_to_host(offsets, queue)  # after the queue filled them
    n_events = len(off) - 1
    pair_off = pk.pair_offsets(off)
    pairs = pk.PortableCollection(Pairs, int(pair_off[-1]), queue)
    pk.exec(
        queue,
        pk.event_workdiv(queue.device, n_events),
        pair_masses,
        coll.const_view(),
        offsets,
        on_device(queue, pair_off),
        pairs.view(),
        n_events,
    )
    host = pairs.to_host(queue)
    queue.wait()
    return host


def run_four_lepton(queue: pk.Queue, coll: pk.PortableCollection, offsets, n_events: int) -> np.ndarray:
    sums = pk.PortableCollection(EventSums, n_events, queue).zero(queue)
    pk.exec(
        queue,
        pk.event_workdiv(queue.device, n_events),
        four_lepton_mass,
        coll.const_view(),
        offsets,
        sums.view(),
        n_events,
    )
    host = sums.to_host(queue)
    queue.wait()
    return np.array(host.mass)


def reference_pair_masses(muons) -> tuple[np.ndarray, np.ndarray]:
    """The awkward/numpy reference: ``ak.combinations`` of each event's muons."""
    import awkward as ak

    a, b = ak.unzip(ak.combinations(muons, 2))
    E, px, py, pz = a.E + b.E, a.px + b.px, a.py + b.py, a.pz + b.pz
    m2 = ak.flatten(E * E - px * px - py * py - pz * pz).to_numpy()
    return np.sqrt(np.maximum(m2, 0)), ak.flatten(a.charge * b.charge < 0).to_numpy()


def reference_four_lepton(leptons) -> np.ndarray:
    import awkward as ak

    s = {k: ak.sum(leptons[k], axis=1).to_numpy() for k in ("E", "px", "py", "pz", "charge")}
    m2 = s["E"] ** 2 - s["px"] ** 2 - s["py"] ** 2 - s["pz"] ** 2
    ok = (ak.num(leptons.E).to_numpy() == 4) & (s["charge"] == 0)
    return np.where(ok, np.sqrt(np.maximum(m2, 0)), -1.0)


#: what this example needs beyond alpyka, and the extra that brings it
NEEDS = {"awkward": "data", "uproot": "data", "skhep_testdata": "test"}


def missing_packages() -> str | None:
    """None when every package the example reads with is installed, else what to install."""
    import importlib

    absent = []
    for m in NEEDS:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError:
            absent.append(m)
    if not absent:
        return None
    extras = sorted({NEEDS[m] for m in absent})
    return (
        f"dimuon_mass.py reads CMS samples of scikit-hep-testdata with awkward and uproot; missing: "
        f'{", ".join(absent)}. Install with: pip install -e ".[{",".join(extras)}]" -c constraints.txt '
        "(or pip install "
        f"{' '.join('scikit-hep-testdata==0.3.12' if m == 'skhep_testdata' else m for m in absent)})"
    )


def main() -> int:
    problem = missing_packages()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    import awkward as ak
    import skhep_testdata

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    backend_argument(parser)
    parser.add_argument("--out", default=".", help="directory for dimuon_mass.png (default: here)")
    args = parser.parse_args()
    out = Path(args.out)  # before the work, not a traceback after it
    if out.exists() and not out.is_dir():
        parser.error(f"--out {args.out} is a file; give a directory for dimuon_mass.png")
    parent = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        parser.error(f"--out {args.out}: {parent} is not a directory this user can write; give one for dimuon_mass.png")
    q = pk.Queue(pk.device(args.backend))
    hzz = skhep_testdata.data_path("uproot-HZZ.root")

    # dimuon: every muon pair of every HZZ event
    mu, mu_off = pk.read_root(hzz, "events", Leptons, q, branches=branches("Muon"))
    pairs = run_pair_masses(q, mu, mu_off)
    ref_m, ref_os = reference_pair_masses(pk.to_awkward(mu, mu_off, queue=q))
    np.testing.assert_allclose(pairs.mass, ref_m, rtol=1e-4, atol=1e-3)
    assert np.array_equal(pairs.opposite.astype(bool), ref_os)
    print(f"HZZ dimuon: {pairs.size} muon pairs in {len(mu_off) - 1} events agree with numpy: OK")

    # four leptons: muons and electrons of each event together
    ele = pk.to_awkward(*pk.read_root(hzz, "events", Leptons, q, branches=branches("Electron")), queue=q)
    leptons = ak.concatenate([pk.to_awkward(mu, mu_off, queue=q), ele], axis=1)
    lep, lep_off = pk.from_awkward(Leptons, leptons, q)
    m4 = run_four_lepton(q, lep, lep_off, len(leptons))
    ref4 = reference_four_lepton(leptons)
    np.testing.assert_allclose(m4, ref4, rtol=1e-4, atol=1e-2)
    print(f"HZZ four-lepton: {(m4 >= 0).sum()} events with 4 leptons of charge 0 agree with numpy: OK")

    # Zmumu: one dimuon per event, flat branches
    zmm = skhep_testdata.data_path("uproot-Zmumu.root")
    d, _ = pk.read_root(zmm, "events", Dimuon, q)
    mz = pk.Buffer(q.device, (d.size,), np.float64, queue=q)
    pk.exec(q, pk.valid_workdiv(q.device, d.size), flat_pair_mass, d.const_view(), mz, d.size)
    mz_host = np.empty(d.size)
    pk.memcpy(q, mz_host, mz)
    q.wait()
    import uproot

    z = uproot.open(zmm)["events"].arrays(["E1", "px1", "py1", "pz1", "E2", "px2", "py2", "pz2", "M"], library="np")
    ref_z = np.sqrt(
        np.maximum(
            (z["E1"] + z["E2"]) ** 2
            - (z["px1"] + z["px2"]) ** 2
            - (z["py1"] + z["py2"]) ** 2
            - (z["pz1"] + z["pz2"]) ** 2,
            0,
        )
    )
    np.testing.assert_allclose(mz_host, ref_z, rtol=1e-9)
    print(
        f"Zmumu: {d.size} dimuon masses agree with numpy: OK (median {np.median(mz_host):.1f} GeV; "
        f"the file's M: {np.median(z['M']):.1f} GeV)"
    )
    plot(
        Path(args.out),
        pairs.mass[pairs.opposite.astype(bool)],
        ref_m[ref_os],
        m4[m4 >= 0],
        ref4[ref4 >= 0],
        mz_host,
        ref_z,
    )
    return 0


def plot(out: Path, m2, ref2, m4, ref4, mz, refz) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [
        ("HZZ opposite-sign dimuon", m2, ref2, (0, 150)),
        ("HZZ four leptons (charge 0)", m4, ref4, (80, 300)),
        ("Zmumu dimuon", mz, refz, (60, 120)),
    ]
    for ax, (title, mine, ref, rng) in zip(axes, panels):
        ax.hist(mine, bins=60, range=rng, histtype="stepfilled", alpha=0.5, label="alpyka kernel")
        ax.hist(ref, bins=60, range=rng, histtype="step", color="k", label="awkward/numpy")
        ax.set_title(title)
        ax.set_xlabel("mass [GeV]")
        ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "dimuon_mass.png", dpi=90)
    print(f"plot: {out / 'dimuon_mass.png'}")


if __name__ == "__main__":
    raise SystemExit(run_script(main))
