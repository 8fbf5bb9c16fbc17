"""CMSSW's cluster charge cut (RecoLocalTracker/SiPixelClusterizer/plugins/alpaka/ClusterChargeCut.h)
in alpyka's kernel language: clusters whose summed charge is below a threshold are dropped and the
survivors of each module renumbered, on every backend.

The digis come grouped by module (``module_start[m]:module_start[m + 1]`` are module m's, as
CMSSW's moduleStart), each with a cluster id (``0 .. n_clusters[m] - 1``, or ``INVALID_CLUSTER``)
and a charge (``adc``). One block per module, as CMSSW:

1. the block zeroes the shared ``charge[c]`` of the module's clusters; barrier;
2. each digi adds its charge to its cluster's: ``acc.atomic_add(charge, c, adc[i], hierarchy="block")``
   on shared memory; barrier;
3. each cluster is kept when ``charge[c] >= threshold`` (``ok[c]`` 1 or 0); barrier;
4. ``pk.tools.block_prefix_scan`` of ``ok`` gives the survivors' new ids + 1 (``new_id[c]``); each
   cluster's new id (or ``INVALID_CLUSTER`` when it was cut) goes into ``charge[c]``; barrier;
5. each digi gets its cluster's new id and the module's new cluster count is written (the
   outputs are Buffers of their own: CMSSW rewrites its ids in place).

A module holds at most ``MAX_CLUSTERS`` clusters (CMSSW's maxNumClustersPerModules): digis of
clusters past it are invalid, as are digis whose cluster id is out of range.

Run: python examples/cluster_charge_cut.py [backend] [--modules N] [--clusters K] [--threshold Q]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import numpy as np

import portable as pk
from portable.cli import at_least, backend_argument, description, run_script

#: the most clusters of one module (CMSSW's phase-1 maxNumClustersPerModules)
MAX_CLUSTERS = 1024
#: the most threads of a block (the prefix scan's workspace holds one element per thread)
MAX_BLOCK_THREADS = 256
#: CMSSW's ``make_workdiv(n_modules, 256)``: 256 threads of a block on a GPU, 256 digis a thread
#: takes per step on a CPU (the library picks the shape per device)
ELEMENTS = 256
#: the id of a digi whose cluster was cut or that had none (CMSSW's invalidClusterId)
INVALID_CLUSTER = -9999


@pk.kernel
def cluster_charge_cut(acc, module_start, cluster, adc, n_clusters, threshold, new_cluster, new_n_clusters, n_modules):
    """One block per module: sum the charge per cluster, cut, renumber the survivors."""
    charge = acc.shared_array(MAX_CLUSTERS, np.int32)
    ok = acc.shared_array(MAX_CLUSTERS, np.int32)
    new_id = acc.shared_array(MAX_CLUSTERS, np.int32)
    ws = acc.shared_array(MAX_BLOCK_THREADS, np.int32)
    for m in acc.independent_groups(n_modules):
        first = module_start[m]
        last = module_start[m + 1]
        n_clus = min(max(n_clusters[m], 0), MAX_CLUSTERS)
        for c in acc.independent_group_elements(n_clus):
            charge[c] = 0
        acc.sync_block_threads()
        for i in acc.independent_group_elements(first, last):
            c = cluster[i]
            if 0 <= c and c < n_clus:
                acc.atomic_add(charge, c, adc[i], hierarchy="block")
        acc.sync_block_threads()
        for c in acc.independent_group_elements(n_clus):
            ok[c] = 1 if charge[c] >= threshold else 0
        acc.sync_block_threads()
        pk.tools.block_prefix_scan(acc, ok, new_id, n_clus, ws)  # ends with a barrier
        for c in acc.independent_group_elements(n_clus):  # charge[c] becomes the cluster's new id
            charge[c] = new_id[c] - 1 if ok[c] == 1 else INVALID_CLUSTER
        acc.sync_block_threads()
        for i in acc.independent_group_elements(first, last):
            c = cluster[i]
            new_cluster[i] = charge[c] if 0 <= c and c < n_clus else INVALID_CLUSTER
        if acc.thread_idx == 0:
            new_n_clusters[m] = new_id[n_clus - 1] if n_clus > 0 else 0
        acc.sync_block_threads()  # the next module reuses the shared arrays


@functools.lru_cache(maxsize=64)  # one per event size: a WorkDiv costs a few us to build
def workdiv(device: pk.Device, n_modules: int) -> pk.WorkDiv:
    """One block per module, as CMSSW writes it: ``pk.make_workdiv`` gives CPUs (the CPU backends,
    OpenCL on a CPU) one thread taking ``ELEMENTS`` digis a step and GPUs ``ELEMENTS`` threads."""
    return pk.make_workdiv(device, n_modules, ELEMENTS)


def charge_cut(
    queue: pk.Queue,
    module_start,
    cluster,
    adc,
    n_clusters,
    threshold: int,
    new_cluster=None,
    new_n_clusters=None,
    wd: pk.WorkDiv | None = None,
) -> tuple[pk.Buffer, pk.Buffer]:
    """Enqueue the cut of the digis' clusters (int32 Buffers: ``module_start`` of n_modules + 1
    offsets, ``cluster`` and ``adc`` per digi, ``n_clusters`` per module); returns
    ``(new_cluster, new_n_clusters)``, Buffers of the new id per digi and the new count per module
    (allocated unless given). The work division is :func:`workdiv`'s unless given (``wd``)."""
    n_modules = len(n_clusters)
    n = len(cluster)
    if len(module_start) != n_modules + 1:
        raise ValueError(f"module_start needs n_modules + 1 = {n_modules + 1} offsets, got {len(module_start)}")
    if len(adc) != n:
        raise ValueError(f"cluster and adc must have one length, got {n} and {len(adc)}")
    for name, arr in (("module_start", module_start), ("cluster", cluster), ("adc", adc), ("n_clusters", n_clusters)):
        if np.dtype(arr.dtype) != np.int32:
            raise TypeError(f"{name} must hold int32, got {arr.dtype}")
    dev = queue.device
    if new_cluster is None:
        new_cluster = pk.Buffer(dev, n, np.int32)
    if new_n_clusters is None:
        new_n_clusters = pk.Buffer(dev, n_modules, np.int32)
    if n_modules:
        wd = workdiv(dev, n_modules) if wd is None else wd
        pk.exec(
            queue,
            wd,
            cluster_charge_cut,
            module_start,
            cluster,
            adc,
            n_clusters,
            np.int32(threshold),
            new_cluster,
            new_n_clusters,
            n_modules,
        )
    return new_cluster, new_n_clusters


# ----------------------------------------------------------------------------- test data and reference
def generate_event(n_modules: int, clusters_per_module: int, seed: int = 1, invalid: float = 0.02):
    """A synthetic event: per module about ``clusters_per_module`` clusters (Poisson) of 1-9 digis,
    each digi with a charge of 300-6000 (uniform), digis of a module shuffled (cluster ids
    interleave, as a clusterizer leaves them), a fraction ``invalid`` of digis with no cluster.
    Returns int32 ``(module_start, cluster, adc, n_clusters)``."""
    rng = np.random.default_rng(seed)
    n_clusters = rng.poisson(clusters_per_module, n_modules).clip(0, MAX_CLUSTERS).astype(np.int32)
    sizes = rng.integers(1, 10, int(n_clusters.sum()))
    cluster_module = np.repeat(np.arange(n_modules), n_clusters)
    cluster_first = np.concatenate([[0], np.cumsum(n_clusters)[:-1]]).astype(np.int64)
    local_id = np.arange(len(sizes)) - np.repeat(cluster_first, n_clusters)
    module = np.repeat(cluster_module, sizes)
    cluster = np.repeat(local_id, sizes).astype(np.int32)
    order = np.lexsort((rng.random(len(module)), module))  # by module, shuffled within it
    module, cluster = module[order], cluster[order]
    cluster[rng.random(len(cluster)) < invalid] = INVALID_CLUSTER
    adc = rng.integers(300, 6001, len(cluster)).astype(np.int32)
    module_start = np.zeros(n_modules + 1, np.int32)
    module_start[1:] = np.cumsum(np.bincount(module, minlength=n_modules))
    return module_start, cluster, adc, n_clusters


def reference_charge_cut(module_start, cluster, adc, n_clusters, threshold):
    """The cut in plain numpy, module by module: ``(new_cluster, new_n_clusters)``."""
    new_cluster = np.full(len(cluster), INVALID_CLUSTER, np.int32)
    new_n = np.zeros(len(n_clusters), np.int32)
    for m in range(len(n_clusters)):
        lo, hi = int(module_start[m]), int(module_start[m + 1])
        n_clus = min(max(int(n_clusters[m]), 0), MAX_CLUSTERS)
        c = cluster[lo:hi]
        valid = (c >= 0) & (c < n_clus)
        charge = np.bincount(c[valid], weights=adc[lo:hi][valid], minlength=n_clus)
        ok = charge >= threshold
        renumber = np.cumsum(ok) - 1
        keep = valid.copy()
        keep[valid] = ok[c[valid]]
        new_cluster[lo:hi][keep] = renumber[c[keep]]
        new_n[m] = int(ok.sum())
    return new_cluster, new_n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser)
    parser.add_argument("--modules", type=at_least(1), default=2000)
    parser.add_argument(
        "--clusters",
        type=at_least(1, MAX_CLUSTERS),
        default=10,
        help=f"clusters per module (mean; at most {MAX_CLUSTERS}, CMSSW's maxNumClustersPerModules)",
    )
    parser.add_argument(
        "--threshold",
        type=at_least(0, np.iinfo(np.int32).max),
        default=4000,
        help="the least charge of a kept cluster (the kernel's int32)",
    )
    parser.add_argument("--repeats", type=at_least(1), default=5)
    args = parser.parse_args(argv)
    host = generate_event(args.modules, args.clusters)
    q = pk.Queue(pk.device(args.backend))
    bufs = []
    for a in host:
        b = pk.Buffer(q.device, a.shape, a.dtype)
        pk.memcpy(q, b, a)
        bufs.append(b)
    got_cluster = np.empty(len(host[1]), np.int32)
    got_n = np.empty(args.modules, np.int32)
    new_cluster, new_n = charge_cut(q, *bufs, args.threshold)  # the first call compiles the kernel
    q.wait()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        charge_cut(q, *bufs, args.threshold, new_cluster, new_n)
        q.wait()
        times.append(time.perf_counter() - t0)
    pk.memcpy(q, got_cluster, new_cluster)
    pk.memcpy(q, got_n, new_n)
    q.wait()
    want_cluster, want_n = reference_charge_cut(*host, args.threshold)
    dt = min(times)
    print(
        f"{args.backend} ({q.device}): {len(host[1])} digis, {int(host[3].sum())} clusters in {args.modules} "
        f"modules -> {int(got_n.sum())} kept; {dt * 1e3:.3f} ms ({len(host[1]) / dt / 1e6:.1f} M digis/s)"
    )
    if not (np.array_equal(got_cluster, want_cluster) and np.array_equal(got_n, want_n)):
        print(
            f"MISMATCH at {int(np.count_nonzero(got_cluster != want_cluster))} digis and "
            f"{int(np.count_nonzero(got_n != want_n))} modules",
            file=sys.stderr,
        )
        return 1
    print("matches the numpy reference: OK")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
