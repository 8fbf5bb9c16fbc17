"""The SoA layouts of the fragment-merging pipeline."""

from __future__ import annotations

import numpy as np

import soa

#: most fragments one particle splits into
MAX_FRAGMENTS = 4
#: edge slots per fragment slot (candidate neighbours kept per fragment, on average)
EDGES_PER_FRAGMENT = 8
#: fragments the edge classifier can index (its node tables' size, fixed in the trained model)
MAX_NODES = 4096
#: most particles an event may have: every particle's fragment slots within MAX_NODES
MAX_PARTICLES = MAX_NODES // MAX_FRAGMENTS


class Fragments(soa.Layout):
    """Calorimeter-like fragments: a slot per (particle, fragment); empty slots have truth -1."""

    eta = soa.column(np.float32)
    phi = soa.column(np.float32)
    energy = soa.column(np.float32)
    time = soa.column(np.float32)
    truth = soa.column(np.int32)  # index of the particle it came from, -1 for an empty slot
    label = soa.column(np.int32)  # cluster label after merging (smallest fragment index)
    baseline = soa.column(np.int32)  # cluster label of the distance-only baseline


class EdgeInputs(soa.Layout):
    """What the GNN reads of an edge: its features (one float32 block) and endpoints (one int32
    block); a collection of its own is what a plain model request carries (bench_service)."""

    deta = soa.column(np.float32)
    dphi = soa.column(np.float32)
    dr = soa.column(np.float32)
    dt = soa.column(np.float32)
    log_e_src = soa.column(np.float32)
    log_e_dst = soa.column(np.float32)
    valid = soa.column(np.float32)
    src = soa.column(np.int32)
    dst = soa.column(np.int32)


class Edges(EdgeInputs):
    """Candidate edges between nearby fragments: the GNN's inputs (the columns of
    :class:`EdgeInputs`, first), the truth, the model's score and the count found."""

    same = soa.column(np.float32)  # truth: both ends from one particle (training target)
    score = soa.column(np.float32)  # written by the model
    n_edges = soa.scalar(np.int32)  # edges found (may exceed the slots: then some were dropped)


FEATURES = ("deta", "dphi", "dr", "dt", "log_e_src", "log_e_dst", "valid")
INDEX = ("src", "dst")


def edge_capacity(n_fragment_slots: int) -> int:
    return n_fragment_slots * EDGES_PER_FRAGMENT // 2
