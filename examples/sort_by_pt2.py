"""CMSSW's pixel vertex finder's last step, sortByPt2 (RecoVertex/PixelVertexFinding/plugins/alpaka/
sortByPt2.h), in alpyka's kernel language with the in-kernel sort pk.tools.block_radix_sort: each
vertex gets the sum of its tracks' pt^2, and the vertices of an event are ordered by it.

Events come as flat arrays with offsets (``track_start[e]:track_start[e + 1]`` are event e's
tracks, ``vertex_start`` its vertices). Per track: its vertex (``iv``, local to the event; 9999
for a track of no vertex, CMSSW's noise marker: only ``iv <= 9990`` counts), its pt^2 (``ptt2``)
and its slot in the track collection (``itrk``). One block per event, as CMSSW:

1. ``idv[itrk[i]] = iv[i]``: each track's vertex, in the track collection's order;
2. each vertex's pt^2 sum: the tracks add theirs with atomics (into shared float64 sums: the
   n float32 pt^2 of one vertex add up exactly in float64 while n times the largest is below 2**28
   times the smallest (100 tracks of 0.5 to 800 GeV; these events: at most 40 of 0.5 to 50 GeV),
   so then any order of the additions gives the same float32
   ``ptv2``, where CMSSW's float atomics may differ in the last bits from run to run); barrier;
3. ``sort_ind``: the vertices in increasing ``ptv2`` (local indices; the last is the leading
   vertex), by ``pk.tools.block_radix_sort_range`` over the event's vertices, stable. CMSSW sorts
   only the 16 high bits on GPUs and with ``std::sort`` on CPUs, so its two paths may order
   nearly equal sums differently; here every backend gives numpy's stable argsort of ``ptv2``.
   ``sort="rank"`` uses ``pk.tools.block_rank_sort_range`` instead (no workspace; quadratic).

Run: python examples/sort_by_pt2.py [backend] [--events N] [--vertices V] [--sort radix|rank]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import portable as pk
from portable.cli import at_least, backend_argument, description, run_script

#: the most vertices of an event (CMSSW's MAXVTX)
MAX_VERTICES = 1024
#: the most threads of a block the workspace is declared for
MAX_BLOCK_THREADS = 256
#: CMSSW's marker of a track of no vertex (``iv <= 9990`` counts)
NOISE = 9999
#: the radix sort's shared workspace: 8 bits a pass up to 16 threads a block, else 4
WS = pk.tools.radix_sort_workspace(MAX_BLOCK_THREADS, 4)


@pk.device_function
def vertex_pt2(acc, track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sums, e):
    """Steps 1 and 2 for event ``e``; returns its number of vertices."""
    t0 = track_start[e]
    t1 = track_start[e + 1]
    v0 = vertex_start[e]
    nv = min(vertex_start[e + 1] - v0, MAX_VERTICES)
    for i in acc.independent_group_elements(t0, t1):
        idv[t0 + itrk[i]] = iv[i]
    for v in acc.independent_group_elements(nv):
        sums[v] = 0.0
    acc.sync_block_threads()
    for i in acc.independent_group_elements(t0, t1):
        if iv[i] <= 9990 and iv[i] < nv:
            acc.atomic_add(sums, iv[i], np.float64(ptt2[i]), hierarchy="threads")
    acc.sync_block_threads()
    for v in acc.independent_group_elements(nv):
        ptv2[v0 + v] = sums[v]
    acc.sync_block_threads()
    return nv


@pk.kernel
def sort_by_pt2(acc, track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sort_ind, ind2, n_events):
    sums = acc.shared_array(MAX_VERTICES, np.float64)
    ws = acc.shared_array(WS, np.int32)
    for e in acc.independent_groups(n_events):
        nv = vertex_pt2(acc, track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sums, e)
        v0 = vertex_start[e]
        pk.tools.block_radix_sort_range(acc, ptv2, sort_ind, ind2, v0, v0 + nv, ws)


@pk.kernel
def sort_by_pt2_rank(acc, track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sort_ind, ind2, n_events):
    sums = acc.shared_array(MAX_VERTICES, np.float64)
    for e in acc.independent_groups(n_events):
        nv = vertex_pt2(acc, track_start, vertex_start, iv, ptt2, itrk, idv, ptv2, sums, e)
        v0 = vertex_start[e]
        pk.tools.block_rank_sort_range(acc, ptv2, sort_ind, v0, v0 + nv)


def workdiv(device: pk.Device, n_events: int) -> pk.WorkDiv:
    """One block per event: 128 threads where blocks have threads (CMSSW's vertex finder uses a
    block per event too), one element each; one thread elsewhere."""
    threads = min(128, device.limits.max_threads_per_block)
    return pk.WorkDiv(max(n_events, 1), threads, 1)


def outputs(device: pk.Device, n_tracks: int, n_vertices: int) -> tuple[pk.Buffer, ...]:
    """The Buffers of sort_events: ``idv`` (per track), ``ptv2``, ``sort_ind`` and the sort's
    second index array (per vertex)."""
    nv = max(n_vertices, 1)
    return (
        pk.Buffer(device, n_tracks, np.int32),
        pk.Buffer(device, nv, np.float32),
        pk.Buffer(device, nv, np.int32),
        pk.Buffer(device, nv, np.int32),
    )


def sort_events(q: pk.Queue, track_start, vertex_start, iv, ptt2, itrk, out, sort: str = "radix") -> None:
    """Enqueue sortByPt2 over every event into ``out`` (:func:`outputs`)."""
    n_events = int(vertex_start.shape[0]) - 1
    kernel = sort_by_pt2 if sort == "radix" else sort_by_pt2_rank
    pk.exec(q, workdiv(q.device, n_events), kernel, track_start, vertex_start, iv, ptt2, itrk, *out, n_events)


def generate_events(n_events: int, vertices: int, seed: int = 0):
    """Events of ``vertices`` vertices on average (at least 1, at most :data:`MAX_VERTICES`, as the
    kernel's shared sums: more were left unsorted, a mismatch), 2-40 tracks a vertex, 5% noise
    tracks; pt in [0.5, 50) GeV. Returns ``(track_start, vertex_start, iv, ptt2, itrk)``."""
    rng = np.random.default_rng(seed)
    nv = np.clip(rng.poisson(vertices, n_events), 1, MAX_VERTICES)
    iv_parts, pt_parts, itrk_parts, n_tracks = [], [], [], []
    for v in nv:
        per = rng.integers(2, 41, v)
        iv = np.repeat(np.arange(v, dtype=np.int32), per)
        iv[rng.random(iv.size) < 0.05] = NOISE
        order = rng.permutation(iv.size)
        iv_parts.append(iv[order])
        pt = rng.uniform(0.5, 50.0, iv.size).astype(np.float32)
        pt_parts.append(pt * pt)
        itrk_parts.append(rng.permutation(iv.size).astype(np.int32))
        n_tracks.append(iv.size)
    track_start = np.concatenate([[0], np.cumsum(n_tracks)]).astype(np.int32)
    vertex_start = np.concatenate([[0], np.cumsum(nv)]).astype(np.int32)
    return track_start, vertex_start, np.concatenate(iv_parts), np.concatenate(pt_parts), np.concatenate(itrk_parts)


def reference(track_start, vertex_start, iv, ptt2, itrk):
    """numpy, event by event: ``(idv, ptv2, sort_ind)``."""
    idv = np.empty(iv.size, np.int32)
    ptv2 = np.zeros(max(int(vertex_start[-1]), 1), np.float32)
    sort_ind = np.zeros_like(ptv2, dtype=np.int32)
    for e in range(len(track_start) - 1):
        t0, t1, v0, v1 = track_start[e], track_start[e + 1], vertex_start[e], vertex_start[e + 1]
        idv[t0 + itrk[t0:t1]] = iv[t0:t1]
        mine = iv[t0:t1]
        keep = mine <= 9990
        sums = np.zeros(v1 - v0, np.float64)
        np.add.at(sums, mine[keep], ptt2[t0:t1][keep].astype(np.float64))
        ptv2[v0:v1] = sums
        sort_ind[v0:v1] = np.argsort(ptv2[v0:v1], kind="stable")
    return idv, ptv2, sort_ind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser)
    parser.add_argument("--events", type=at_least(1), default=200)
    parser.add_argument(
        "--vertices",
        type=at_least(1, MAX_VERTICES),
        default=40,
        help=f"vertices per event (mean; at most {MAX_VERTICES}, CMSSW's MAXVTX)",
    )
    parser.add_argument("--sort", choices=("radix", "rank"), default="radix")
    parser.add_argument("--repeats", type=at_least(1), default=5)
    args = parser.parse_args(argv)
    host = generate_events(args.events, args.vertices)
    q = pk.Queue(pk.device(args.backend))
    bufs = []
    for a in host:
        b = pk.Buffer(q.device, a.shape, a.dtype)
        pk.memcpy(q, b, a)
        bufs.append(b)
    out = outputs(q.device, host[2].size, int(host[1][-1]))
    sort_events(q, *bufs, out, sort=args.sort)  # the first call compiles the kernel
    q.wait()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        sort_events(q, *bufs, out, sort=args.sort)
        q.wait()
        times.append(time.perf_counter() - t0)
    got = [np.empty(b.shape, b.dtype) for b in out[:3]]
    for g, b in zip(got, out):
        pk.memcpy(q, g, b)
    q.wait()
    want = reference(*host)
    n_vertices = int(host[1][-1])
    dt = min(times)
    print(
        f"{args.backend} ({q.device}): {args.events} events, {n_vertices} vertices, {host[2].size} tracks; "
        f"{args.sort} sort {dt * 1e3:.3f} ms ({args.events / dt:.0f} events/s)"
    )
    names = ("idv", "ptv2", "sort_ind")
    bad = [n for n, g, w in zip(names, got, want) if not np.array_equal(g[: w.size], w)]
    if bad:
        print(f"MISMATCH in {', '.join(bad)}", file=sys.stderr)
        return 1
    lead = [int(host[1][e] + got[2][host[1][e + 1] - 1]) for e in range(min(3, args.events))]
    print(f"leading vertices of the first events: {lead}; idv, ptv2 and sort_ind equal numpy's: OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
