"""CMSSW's pixel clusterizer (RecoLocalTracker/SiPixelClusterizer/plugins/alpaka/PixelClustering.h)
ported to alpyka: digis in, a cluster id per digi out, on every backend.

``find_clusters(queue, module, x, y)`` gives, per digi, the id of its cluster, numbered per module
from 0 in the order of each cluster's first digi (input order), and -1 where ``module < 0``.
Two digis of a module touch when their columns and rows each differ by at most one (8-neighbour
connectivity). The steps are CMSSW's, written with alpyka's kernel language and ``pk.tools``:

1. histogram the digis by (module, column): ``pk.tools.one_to_many`` (CMSSW's HistoContainer);
2. every digi's cluster id starts as its own index;
3. one block per module: each digi looks up its neighbours through the histogram (the columns
   ``x - 1 .. x + 1``) and takes the smallest id among them (``atomic_min``, then pointer
   jumping; ids that other threads ``atomic_min`` are read atomically too, ``atomic_or(.., 0)``,
   so no plain load races an update), until no id changes in the block (``acc.sync_block_threads_or``); each cluster
   then carries the index of its first digi;
4. number the clusters per module: a stable ``pk.tools.argsort`` by module keeps input order
   within a module, a ``pk.tools.prefix_scan`` over "is a cluster's first digi" ranks them.

That is the portable kernel, the one GPUs run (a module's digis are the threads of its block).
Where a block is one thread (cpu_serial, cpu_threads) or the hardware is a CPU (OpenCL on a CPU),
its rounds over the module are pure cost, so ``find_clusters`` picks another algorithm there, as
alpaka code specialises per accelerator (:func:`algorithm_for` asks the device's declared limits
and properties, not its backend's name): step 3 becomes a union-find per module (one
single-thread block each; joining two trees keeps the smaller index as the root, so every digi
ends with the same id as above) and step 4 one pass over the digis in input order (a cluster's
first digi takes its module's next number). Both give the same ids; ``algorithm=`` forces one.

Run: python examples/pixel_clustering.py [backend] [--modules N] [--check]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import portable as pk
from portable.cli import at_least, backend_argument, description, run_script

#: a CMS phase-1 pixel module: 416 columns x 160 rows
N_COLUMNS, N_ROWS = 416, 160


@pk.kernel
def _start_ids(acc, module, x, cluster, n, n_modules, n_columns):
    """Every valid digi is its own cluster; digis of no module (or off the module) get -1."""
    for i in acc.uniform_elements(n):
        m = module[i]
        c = x[i]
        if 0 <= m and m < n_modules and 0 <= c and c < n_columns:
            cluster[i] = i
        else:
            cluster[i] = -1


@pk.kernel
def _column_keys(acc, module, x, cluster, keys, n, n_columns):
    for i in acc.uniform_elements(n):
        keys[i] = module[i] * n_columns + x[i] if cluster[i] >= 0 else -1


@pk.kernel
def _find_clus(acc, offsets, content, x, y, cluster, n_modules, n_columns):
    """One block per module: ids propagate to the smallest index of each cluster."""
    for m in acc.independent_groups(n_modules):
        first = offsets[m * n_columns]
        last = offsets[(m + 1) * n_columns]
        changed = True
        while acc.sync_block_threads_or(changed):
            changed = False
            for k in acc.independent_group_elements(first, last):
                i = content[k]
                xi = x[i]
                yi = y[i]
                best = acc.atomic_or(cluster, i, 0)  # an atomic read: other threads atomic_min these ids
                for c in range(max(xi - 1, 0), min(xi + 2, n_columns)):
                    b = m * n_columns + c
                    for kk in range(offsets[b], offsets[b + 1]):
                        j = content[kk]
                        if abs(y[j] - yi) <= 1:
                            best = min(best, acc.atomic_or(cluster, j, 0))
                up = acc.atomic_or(cluster, best, 0)
                while up < best:  # pointer jumping: an id is the index of a digi
                    best = up
                    up = acc.atomic_or(cluster, best, 0)
                if best < acc.atomic_min(cluster, i, best):
                    changed = True
            acc.mem_fence("block")


@pk.kernel
def _start_keys(acc, module, x, cluster, keys, out, n, n_modules, n_columns):
    """The union-find's first pass: ids as ``_start_ids``, the column histogram's keys as
    ``_column_keys``, and -1 out for the digis of no module (the numbering leaves them)."""
    for i in acc.uniform_elements(n):
        m = module[i]
        c = x[i]
        if 0 <= m and m < n_modules and 0 <= c and c < n_columns:
            cluster[i] = i
            keys[i] = m * n_columns + c
        else:
            cluster[i] = -1
            keys[i] = -1
        out[i] = -1


@pk.kernel
def _union_find(acc, offsets, content, y, cluster, n_modules, n_columns):
    """One single-thread block per module: a union-find over the column histogram, each digi
    joined with the later digis of its column and those of the next column within a row; a root
    is its cluster's smallest index, so every digi ends with the id the propagation gives it."""
    for m in acc.independent_groups(n_modules):
        if acc.once_per_block():
            last_bin = (m + 1) * n_columns
            for b in range(m * n_columns, last_bin):
                end = offsets[b + 2] if b + 1 < last_bin else offsets[b + 1]
                for k in range(offsets[b], offsets[b + 1]):
                    i = content[k]
                    yi = y[i]
                    for kk in range(k + 1, end):
                        j = content[kk]
                        if abs(y[j] - yi) <= 1:
                            a = i  # the roots of i and j, halving the paths on the way
                            while cluster[a] != a:
                                cluster[a] = cluster[cluster[a]]
                                a = cluster[a]
                            r = j
                            while cluster[r] != r:
                                cluster[r] = cluster[cluster[r]]
                                r = cluster[r]
                            if a < r:
                                cluster[r] = a
                            elif r < a:
                                cluster[a] = r
            for k in range(offsets[m * n_columns], offsets[last_bin]):
                i = content[k]
                r = cluster[i]
                while cluster[r] != r:
                    r = cluster[r]
                cluster[i] = r


@pk.kernel
def _number_in_order(acc, module, cluster, count, out, n, n_modules):
    """One thread, digis in input order: a root (its id is its own index) takes its module's next
    number, every other digi its root's (a root comes before the rest of its cluster)."""
    if acc.once_per_grid():
        for m in range(n_modules):
            count[m] = 0
        for i in range(n):
            r = cluster[i]
            if r == i:
                m = module[i]
                out[i] = count[m]
                count[m] += 1
            elif r >= 0:
                out[i] = out[r]


@pk.kernel
def _first_digis(acc, order, cluster, flags, n):
    """In module order: 1 where the digi starts its cluster (its id is its own index)."""
    for k in acc.uniform_elements(n):
        i = order[k]
        flags[k] = 1 if cluster[i] == i else 0


@pk.kernel
def _module_bases(acc, order, module, rank, base, n, n_modules):
    """``base[m]``: clusters started before module m's first digi (in module order)."""
    for k in acc.uniform_elements(n):
        m = module[order[k]]
        if 0 <= m and m < n_modules and (k == 0 or module[order[k - 1]] != m):
            base[m] = rank[k - 1] if k > 0 else 0


@pk.kernel
def _number_firsts(acc, order, module, cluster, rank, base, number, n):
    for k in acc.uniform_elements(n):
        i = order[k]
        if cluster[i] == i:
            number[i] = rank[k] - 1 - base[module[i]]


@pk.kernel
def _label(acc, cluster, number, out, n):
    for i in acc.uniform_elements(n):
        c = cluster[i]
        out[i] = number[c] if c >= 0 else -1


def _linear(queue: pk.Queue, n: int) -> pk.WorkDiv:
    return pk.valid_workdiv(queue.device, max(n, 1), 1 if queue.device.kind == "gpu" else 4096)


#: find_clusters' algorithms: CMSSW's label propagation (the portable kernel) and a union-find per module
ALGORITHMS = ("propagation", "union_find")


def algorithm_for(device: pk.Device) -> str:
    """The algorithm ``find_clusters`` runs on ``device``, from what the device declares: a
    union-find per module where a block is one thread (the CPU backends) or the hardware is a
    CPU (OpenCL on a CPU), where propagation's rounds over the module are pure cost; CMSSW's
    propagation on GPUs, where a module's digis are the threads of its block."""
    one_thread = device.capabilities.cpu_shaped
    return "union_find" if one_thread else "propagation"


def find_clusters(
    queue: pk.Queue,
    module,
    x,
    y,
    n_modules: int | None = None,
    n_columns: int = N_COLUMNS,
    algorithm: str | None = None,
) -> pk.Buffer:
    """Enqueue the clustering of the digis ``(module, x, y)`` (int32 Buffers of one length;
    numpy arrays on CPU backends); returns the int32 Buffer of cluster ids (see the module
    docstring). ``n_modules`` defaults to the largest module id + 1 (read back: it waits for
    the queue); digis with a module id >= n_modules or a column outside [0, n_columns) get -1.
    ``algorithm``: one of :data:`ALGORITHMS`, by default :func:`algorithm_for` the queue's
    device; both give the same ids."""
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS} or None (the device's choice), got {algorithm!r}")
    n = len(module)
    if not (len(x) == len(y) == n):
        raise ValueError(f"module, x and y must have one length, got {n}, {len(x)} and {len(y)}")
    for name, arr in (("module", module), ("x", x), ("y", y)):
        if np.dtype(arr.dtype) != np.int32:
            raise TypeError(f"{name} must hold int32, got {arr.dtype}")
    dev = queue.device
    if n_modules is None:
        host = np.empty(n, np.int32)
        pk.memcpy(queue, host, module)
        queue.wait()
        n_modules = int(host.max()) + 1 if n else 0
    cluster = pk.Buffer(dev, n, np.int32)
    out = pk.Buffer(dev, n, np.int32)
    if n == 0:
        return out
    n_modules = max(int(n_modules), 1)
    wd = _linear(queue, n)
    if (algorithm or algorithm_for(dev)) == "union_find":
        _union_find_path(queue, module, x, y, cluster, out, n_modules, n_columns, wd)
        return out
    pk.exec(queue, wd, _start_ids, module, x, cluster, n, n_modules, n_columns)
    keys = pk.Buffer(dev, n, np.int32)
    pk.exec(queue, wd, _column_keys, module, x, cluster, keys, n, n_columns)
    offsets, content = pk.tools.one_to_many(queue, keys, n_modules * n_columns)
    threads = 1 if dev.kind == "cpu" else 256
    pk.exec(
        queue,
        pk.make_workdiv(dev, n_modules, threads if dev.kind == "gpu" else 1),
        _find_clus,
        offsets,
        content,
        x,
        y,
        cluster,
        n_modules,
        n_columns,
    )
    order = pk.tools.argsort(queue, module)
    flags = pk.Buffer(dev, n, np.int32)
    pk.exec(queue, wd, _first_digis, order, cluster, flags, n)
    pk.tools.prefix_scan(queue, flags, flags)
    base = pk.Buffer(dev, n_modules, np.int32)
    pk.exec(queue, wd, _module_bases, order, module, flags, base, n, n_modules)
    number = pk.Buffer(dev, n, np.int32)
    pk.exec(queue, wd, _number_firsts, order, module, cluster, flags, base, number, n)
    pk.exec(queue, wd, _label, cluster, number, out, n)
    return out


def _union_find_path(queue, module, x, y, cluster, out, n_modules, n_columns, wd) -> None:
    """Enqueue the union-find: the column histogram, one single-thread block per module, then
    the numbering in one pass over the digis in input order."""
    dev = queue.device
    n = len(module)
    keys = pk.Buffer(dev, n, np.int32)
    pk.exec(queue, wd, _start_keys, module, x, cluster, keys, out, n, n_modules, n_columns)
    offsets, content = pk.tools.one_to_many(queue, keys, n_modules * n_columns)
    pk.exec(queue, pk.make_workdiv(dev, n_modules, 1), _union_find, offsets, content, y, cluster, n_modules, n_columns)
    count = pk.Buffer(dev, n_modules, np.int32)
    pk.exec(queue, pk.WorkDiv(1, 1, 1), _number_in_order, module, cluster, count, out, n, n_modules)


# ----------------------------------------------------------------------------- test data and reference
def generate_digis(n_modules: int, clusters_per_module: int, seed: int = 1, invalid: float = 0.02):
    """Digis of ``n_modules`` modules: clusters of 1-9 pixels (random 8-connected shapes, pixels
    unique per module), shuffled, with a fraction ``invalid`` of digis of no module (-1)."""
    rng = np.random.default_rng(seed)
    mods, xs, ys = [], [], []
    steps = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy]
    for m in range(n_modules):
        used: set[tuple[int, int]] = set()
        for _ in range(clusters_per_module):
            px, py = int(rng.integers(1, N_COLUMNS - 1)), int(rng.integers(1, N_ROWS - 1))
            shape = [(px, py)]
            for _ in range(int(rng.integers(0, 9))):
                bx, by = shape[int(rng.integers(len(shape)))]
                dx, dy = steps[int(rng.integers(len(steps)))]
                p = (min(max(bx + dx, 0), N_COLUMNS - 1), min(max(by + dy, 0), N_ROWS - 1))
                if p not in shape:
                    shape.append(p)
            for p in shape:
                if p not in used:
                    used.add(p)
                    mods.append(m)
                    xs.append(p[0])
                    ys.append(p[1])
    module = np.array(mods, np.int32)
    x, y = np.array(xs, np.int32), np.array(ys, np.int32)
    perm = rng.permutation(len(module))
    module, x, y = module[perm], x[perm], y[perm]
    module[rng.random(len(module)) < invalid] = -1
    return module, x, y


def reference_clusters(module: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Plain connected components (a union-find over 8-neighbours per module), numbered per
    module in the order of each cluster's first digi."""
    n = len(module)
    parent = np.arange(n)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    where = {(int(module[i]), int(x[i]), int(y[i])): i for i in range(n) if module[i] >= 0}
    for (m, cx, cy), i in where.items():
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                j = where.get((m, cx + dx, cy + dy))
                if j is not None:
                    a, b = root(i), root(j)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    out = np.full(n, -1, np.int32)
    seen: dict[int, int] = {}
    per_module: dict[int, int] = {}
    for i in range(n):
        if module[i] < 0:
            continue
        r = root(i)
        if r not in seen:
            seen[r] = per_module.get(int(module[i]), 0)
            per_module[int(module[i])] = seen[r] + 1
        out[i] = seen[r]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser)
    parser.add_argument("--modules", type=at_least(1), default=200)
    parser.add_argument("--clusters", type=at_least(1), default=40, help="clusters per module")
    parser.add_argument("--check", action="store_true", help="compare with the plain connected components")
    args = parser.parse_args(argv)
    module, x, y = generate_digis(args.modules, args.clusters)
    q = pk.Queue(pk.device(args.backend))
    bufs = []
    for a in (module, x, y):
        b = pk.Buffer(q.device, a.shape, a.dtype)
        pk.memcpy(q, b, a)
        bufs.append(b)
    ids = np.empty(len(module), np.int32)
    for _ in range(2):  # the first run compiles the kernels
        t0 = time.perf_counter()
        out = find_clusters(q, *bufs, n_modules=args.modules)
        pk.memcpy(q, ids, out)
        q.wait()
        dt = time.perf_counter() - t0
    n_clusters = sum(len(set(ids[module == m].tolist())) for m in range(args.modules))
    print(
        f"{args.backend}: {len(module)} digis in {args.modules} modules -> {n_clusters} clusters, "
        f"{len(module) / dt / 1e6:.2f} M digis/s"
    )
    if args.check:
        want = reference_clusters(module, x, y)
        if not np.array_equal(ids, want):
            print(f"MISMATCH at {int(np.count_nonzero(ids != want))} digis", file=sys.stderr)
            return 1
        print("matches the plain connected components")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
