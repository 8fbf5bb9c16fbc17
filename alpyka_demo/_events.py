"""One event through the pipeline: generate -> edges -> GNN -> merge, on one queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import portable as pk

from . import _kernels as K
from ._layouts import FEATURES, INDEX, MAX_FRAGMENTS, MAX_NODES, MAX_PARTICLES, Edges, Fragments, edge_capacity

MERGE_ROUNDS = 6
THRESHOLD = 0.5


@dataclass
class EventBuffers:
    """The collections of one event, allocated on a queue."""

    n_particles: int
    frags: pk.PortableCollection
    edges: pk.PortableCollection

    @property
    def n_slots(self) -> int:
        return self.n_particles * MAX_FRAGMENTS

    @property
    def capacity(self) -> int:
        return edge_capacity(self.n_slots)


def check_particles(n_particles: int) -> None:
    """Refuse an event size the edge classifier cannot score: its node tables hold MAX_NODES
    fragments, so more particles failed inside the model, after the kernels had run (an index out
    of bounds at 5,000 particles), and tens of thousands first ran the O(n^2) edge search for minutes."""
    if not 1 <= n_particles <= MAX_PARTICLES:
        raise pk.ArgumentError(
            f"--particles must be between 1 and {MAX_PARTICLES} (got {n_particles}): the edge classifier "
            f"indexes at most {MAX_NODES} fragments, {MAX_FRAGMENTS} per particle"
        )


def allocate(queue: pk.Queue, n_particles: int) -> EventBuffers:
    n_slots = n_particles * MAX_FRAGMENTS
    return EventBuffers(
        n_particles,
        pk.PortableCollection(Fragments, n_slots, queue),
        pk.PortableCollection(Edges, edge_capacity(n_slots), queue),
    )


def workdiv(device: pk.Device, n: int) -> pk.WorkDiv:
    """Blocks of 64 threads on GPUs, 64 elements per block on CPUs (CMSSW make_workdiv)."""
    per_block = 64
    return pk.make_workdiv(device, max(1, -(-n // per_block)), per_block)


def produce(queue: pk.Queue, ev: EventBuffers, seed: int) -> None:
    """Enqueue the producer kernels: fragments, then candidate edges and their features."""
    dev = queue.device
    ev.edges.zero(queue)
    pk.exec(queue, workdiv(dev, ev.n_particles), K.generate_fragments, ev.frags.view(), ev.n_particles, seed)
    pk.exec(
        queue, workdiv(dev, ev.n_slots), K.build_edges, ev.frags.const_view(), ev.edges.view(), ev.n_slots, ev.capacity
    )


def model_metadata(ev: EventBuffers) -> Any:
    """Inputs: the edge features [E, 7] and endpoints [E, 2]; output: the score column [E, 1]."""
    from inference import ModelMetadata, SoAMetadata

    inputs = SoAMetadata(ev.edges).append_block("features", *FEATURES).append_block("index", *INDEX)
    outputs = SoAMetadata(ev.edges).append_block("score", "score")
    return ModelMetadata(inputs, outputs)


def merge(queue: pk.Queue, ev: EventBuffers, threshold: float = THRESHOLD) -> None:
    """Enqueue label propagation over edges the model accepted (and the baseline's)."""
    wd = workdiv(queue.device, ev.capacity)
    for _ in range(MERGE_ROUNDS):
        pk.exec(queue, wd, K.merge_step, ev.frags.view(), ev.edges.const_view(), ev.capacity, np.float32(threshold))


def pair_scores(truth: np.ndarray, label: np.ndarray) -> tuple[int, int, int]:
    """(pairs from one particle, pairs merged together, pairs both) over valid fragments."""
    ok = truth >= 0
    t, lab = truth[ok], label[ok]
    same_t = t[:, None] == t[None, :]
    same_l = lab[:, None] == lab[None, :]
    iu = np.triu_indices(len(t), 1)
    st, sl = same_t[iu], same_l[iu]
    return int(st.sum()), int(sl.sum()), int((st & sl).sum())


@dataclass
class Score:
    """Pairwise merging efficiency and purity, summed over events."""

    true_pairs: int = 0
    merged_pairs: int = 0
    good_pairs: int = 0

    def add(self, counts: tuple[int, int, int]) -> None:
        self.true_pairs += counts[0]
        self.merged_pairs += counts[1]
        self.good_pairs += counts[2]

    @property
    def efficiency(self) -> float:
        return self.good_pairs / max(self.true_pairs, 1)

    @property
    def purity(self) -> float:
        return self.good_pairs / max(self.merged_pairs, 1)
