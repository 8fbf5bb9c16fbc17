"""``alpyka demo --input FILE.root``: the pipeline's fragments from a real file's objects.

The mapping, honestly: each event's reconstructed objects (jets, muons, electrons, photons:
whichever of ``{Jet,Muon,Electron,Photon}_{Px,Py,Pz,E}`` the tree has, as in the CMS sample
``uproot-HZZ.root``) become the event's fragments, with eta, phi and energy from their
four-momenta and time 0 (the file has no timing). The rest of the pipeline (candidate edges,
the GNN, merging) runs unchanged. A file carries no fragment-to-particle truth, so the merging
is not scored (the report says so). The file is read once per process into one collection of
all objects plus event offsets on the device (``pk.read_root``); each event's slots are filled
there by a kernel. Events with more objects than the slots keep the first ones (counted).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import portable as pk
import soa
from portable.data import close_tree, open_tree

from . import _events as E
from ._layouts import MAX_FRAGMENTS

PREFIXES = ("Jet", "Muon", "Electron", "Photon")


class Objects(soa.Layout):
    px = soa.column(np.float32)
    py = soa.column(np.float32)
    pz = soa.column(np.float32)
    E = soa.column(np.float32)


@pk.kernel
def fill_fragments(acc, obj, offsets, e, frags, n_slots):
    """The slots of event ``e``: its objects first (eta, phi, energy), then empty slots."""
    first = offsets[e]
    n = offsets[e + 1] - first
    for f in acc.uniform_elements(n_slots):
        frags.label[f] = f
        frags.baseline[f] = f
        frags.time[f] = 0.0
        if f < n:
            r = first + f
            pt = math.sqrt(obj.px[r] * obj.px[r] + obj.py[r] * obj.py[r])
            frags.eta[f] = math.asinh(obj.pz[r] / pt) if pt > 0 else 0.0
            frags.phi[f] = math.atan2(obj.py[r], obj.px[r])
            frags.energy[f] = obj.E[r]
            frags.truth[f] = f  # no truth in a file: every object its own "particle"
        else:
            frags.eta[f] = 0.0
            frags.phi[f] = 0.0
            frags.energy[f] = 0.0
            frags.truth[f] = -1


class FileEvents:
    """A ROOT file's events on ``device``: ``produce(queue, ev, index)`` stands in for the
    generator (``_events.produce``)."""

    def __init__(self, path: str, device: pk.Device, tree: str = "events", max_slots: int = 160) -> None:
        import awkward as ak

        t = open_tree(path, tree)
        keys = set(t.keys())
        close_tree(t)
        found = [p for p in PREFIXES if {f"{p}_{c}" for c in ("Px", "Py", "Pz", "E")} <= keys]
        if not found:
            raise ValueError(
                f"{path}:{tree} has none of the object branches the demo maps to fragments "
                f"({', '.join(p + '_Px/Py/Pz/E' for p in PREFIXES)})"
            )
        parts = []
        for p in found:
            names = {"px": f"{p}_Px", "py": f"{p}_Py", "pz": f"{p}_Pz", "E": f"{p}_E"}
            c, o = pk.read_root(path, tree, Objects, pk.host(), branches=names)
            parts.append(pk.to_awkward(c, o))
        objects = ak.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        counts = ak.num(objects).to_numpy()
        self.prefixes = found
        self.n_events = len(objects)
        self.max_objects = int(counts.max()) if len(counts) else 0
        slots = min(max(self.max_objects, 1), max_slots)
        self.n_particles = -(-slots // MAX_FRAGMENTS)
        self.truncated = int(np.maximum(counts - self.n_particles * MAX_FRAGMENTS, 0).sum())
        q = pk.Queue(device, blocking=True)
        self.coll, self.offsets = pk.from_awkward(Objects, objects, q)

    def produce(self, queue: pk.Queue, ev: E.EventBuffers, index: int) -> None:
        """Enqueue event ``index % n_events``: fill its fragments, then the candidate edges."""
        dev = queue.device
        ev.edges.zero(queue)
        pk.exec(
            queue,
            E.workdiv(dev, ev.n_slots),
            fill_fragments,
            self.coll.const_view(),
            self.offsets,
            int(index) % self.n_events,
            ev.frags.view(),
            ev.n_slots,
        )
        pk.exec(
            queue,
            E.workdiv(dev, ev.n_slots),
            E.K.build_edges,
            ev.frags.const_view(),
            ev.edges.view(),
            ev.n_slots,
            ev.capacity,
        )

    def describe(self) -> str:
        return (
            f"{self.n_events} events, objects {'+'.join(self.prefixes)} (at most {self.max_objects} per event, "
            f"{self.n_particles * MAX_FRAGMENTS} slots, {self.truncated} objects over the slots dropped)"
        )


def events_source(path: str | None, device: pk.Device) -> Any:
    """A FileEvents for ``path``, or None for the generator."""
    return None if path is None else FileEvents(path, device)
