"""The pipeline's producer kernels, written once for every backend."""

from __future__ import annotations

import math

import portable as pk

from ._layouts import MAX_FRAGMENTS

# generation parameters (a dense region, so that distance alone is ambiguous)
ETA_RANGE = 1.2
PHI_RANGE = 1.2
SPREAD = 0.06  # fragment position spread around its particle
TIME_RANGE = 10.0  # particles' arrival times, ns
TIME_JITTER = 0.08  # fragments' time resolution, ns
EDGE_DR = 0.25  # candidate edges: fragments closer than this
BASELINE_DR = 0.12  # the distance-only baseline merges fragments closer than this


@pk.device_function
def uniform01(seed, i, k):
    """A counter-based uniform number in [0, 1) from (seed, i, k): integer hashing, portable."""
    x = (seed * 1000003 + i * 7919 + k * 104729 + 12345) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (x >> 16) ^ x
    return (x & 0xFFFFFF) / 16777216.0


@pk.device_function
def gauss(seed, i, k):
    """An approximately normal number (sum of four uniforms, unit variance)."""
    s = uniform01(seed, i, k) + uniform01(seed, i, k + 1) + uniform01(seed, i, k + 2) + uniform01(seed, i, k + 3)
    return (s - 2.0) * 1.7320508


@pk.kernel
def generate_fragments(acc, frags, n_particles, seed):
    """One particle per element: split into 1..MAX_FRAGMENTS fragments around it."""
    for p in acc.uniform_elements(n_particles):
        eta = ETA_RANGE * (2.0 * uniform01(seed, p, 0) - 1.0)
        phi = PHI_RANGE * (2.0 * uniform01(seed, p, 1) - 1.0)
        energy = 5.0 + 45.0 * uniform01(seed, p, 2)
        t0 = TIME_RANGE * uniform01(seed, p, 3)
        n_frag = 1 + int(uniform01(seed, p, 4) * MAX_FRAGMENTS)
        total = 0.0
        for j in range(n_frag):
            total += 0.3 + uniform01(seed, p, 10 + j)
        for j in range(MAX_FRAGMENTS):
            f = p * MAX_FRAGMENTS + j
            frags.label[f] = f
            frags.baseline[f] = f
            if j < n_frag:
                frags.eta[f] = eta + SPREAD * gauss(seed, p, 20 + 8 * j)
                frags.phi[f] = phi + SPREAD * gauss(seed, p, 24 + 8 * j)
                frags.energy[f] = energy * (0.3 + uniform01(seed, p, 10 + j)) / total
                frags.time[f] = t0 + TIME_JITTER * gauss(seed, p, 60 + 4 * j)
                frags.truth[f] = p
            else:
                frags.eta[f] = 0.0
                frags.phi[f] = 0.0
                frags.energy[f] = 0.0
                frags.time[f] = 0.0
                frags.truth[f] = -1


@pk.kernel
def build_edges(acc, frags, edges, n_slots, capacity):
    """Candidate edges between valid fragments closer than EDGE_DR, with their features."""
    for i in acc.uniform_elements(n_slots):
        if frags.truth[i] >= 0:
            for j in range(i + 1, n_slots):
                if frags.truth[j] >= 0:
                    deta = frags.eta[j] - frags.eta[i]
                    dphi = frags.phi[j] - frags.phi[i]
                    dr = math.sqrt(deta * deta + dphi * dphi)
                    if dr < EDGE_DR:
                        e = acc.atomic_add(edges.n_edges, 1)
                        if e < capacity:
                            edges.deta[e] = abs(deta)
                            edges.dphi[e] = abs(dphi)
                            edges.dr[e] = dr
                            edges.dt[e] = abs(frags.time[j] - frags.time[i])
                            edges.log_e_src[e] = math.log(frags.energy[i])
                            edges.log_e_dst[e] = math.log(frags.energy[j])
                            edges.valid[e] = 1.0
                            edges.src[e] = i
                            edges.dst[e] = j
                            if frags.truth[i] == frags.truth[j]:
                                edges.same[e] = 1.0
                            else:
                                edges.same[e] = 0.0


@pk.kernel
def merge_step(acc, frags, edges, capacity, threshold):
    """One round of label propagation over edges scored above ``threshold`` (GNN) and over
    edges shorter than BASELINE_DR (the distance-only baseline). Empty edge slots have
    valid == 0, so no host synchronisation is needed to know how many edges there are."""
    for e in acc.uniform_elements(capacity):
        if edges.valid[e] < 0.5:
            continue
        a = edges.src[e]
        b = edges.dst[e]
        # labels are read atomically (atomic_or with 0 returns the value): other threads of the
        # launch lower them with atomic_min, and a plain read beside those is a data race on a GPU
        if edges.score[e] > threshold:
            m = min(acc.atomic_or(frags.label, a, 0), acc.atomic_or(frags.label, b, 0))
            acc.atomic_min(frags.label, a, m)
            acc.atomic_min(frags.label, b, m)
        if edges.dr[e] < BASELINE_DR:
            m = min(acc.atomic_or(frags.baseline, a, 0), acc.atomic_or(frags.baseline, b, 0))
            acc.atomic_min(frags.baseline, a, m)
            acc.atomic_min(frags.baseline, b, m)
