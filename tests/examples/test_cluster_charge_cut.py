"""The port of CMSSW's cluster charge cut (examples/cluster_charge_cut.py) on every backend, against
its plain numpy reference: synthetic events, the edge cases of a module (no digis, every cluster
cut, none cut, the most clusters a module holds and more), other work divisions."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

_PATH = Path(__file__).resolve().parents[2] / "examples" / "cluster_charge_cut.py"
_spec = importlib.util.spec_from_file_location("cluster_charge_cut", _PATH)
cc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cc)

MAX, INVALID = cc.MAX_CLUSTERS, cc.INVALID_CLUSTER


def _cut(queue, event, threshold, wd=None):
    new_cluster, new_n = cc.charge_cut(queue, *(upload(queue, a) for a in event), threshold, wd=wd)
    return download(queue, new_cluster), download(queue, new_n)


def _check(queue, event, threshold, wd=None):
    got = _cut(queue, event, threshold, wd)
    want = cc.reference_charge_cut(*event, threshold)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    return got


def _event(modules):
    """An event from ``[(n_clusters, [(cluster id, adc), ...]), ...]``, one entry per module."""
    n_clusters = np.array([m[0] for m in modules], np.int32)
    digis = [d for m in modules for d in m[1]]
    module_start = np.zeros(len(modules) + 1, np.int32)
    module_start[1:] = np.cumsum([len(m[1]) for m in modules])
    cluster = np.array([d[0] for d in digis], np.int32)
    adc = np.array([d[1] for d in digis], np.int32)
    return module_start, cluster, adc, n_clusters


def _edge_cases():
    """No digis and no clusters; clusters but no digis; every cluster below the threshold; every
    cluster above; MAX clusters of one digi each (every other one cut); more clusters than MAX
    (ids past MAX invalid); invalid and out-of-range ids; an empty last module."""
    rng = np.random.default_rng(5)
    full = [(c, 5000 if c % 2 == 0 else 100) for c in rng.permutation(MAX)]
    over = [(c, 5000) for c in rng.permutation(MAX + 3)]
    return _event(
        [
            (0, []),
            (3, []),
            (4, [(0, 100), (1, 200), (2, 300), (3, 400), (1, 50)]),
            (3, [(2, 5000), (0, 2500), (1, 4000), (0, 2500)]),
            (MAX, full),
            (MAX + 3, over),
            (4, [(INVALID, 9000), (1, 5000), (4, 9000), (-1, 9000), (3, 3000), (3, 1000), (0, 10)]),
            (0, []),
        ]
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_matches_numpy_reference(queue, seed):
    event = cc.generate_event(n_modules=60, clusters_per_module=12, seed=seed)
    new_cluster, new_n = _check(queue, event, 4000)
    assert 0 < new_n.sum() < event[3].sum()  # some clusters cut, some kept
    assert (new_cluster == INVALID).any() and (new_cluster >= 0).sum() > 1000


def test_edge_cases_of_a_module(queue):
    event = _edge_cases()
    new_cluster, new_n = _check(queue, event, 4000)
    assert list(new_n) == [0, 0, 0, 3, MAX // 2, MAX, 2, 0]  # module 6: 3000 + 1000 reaches 4000
    first, last = event[0][2], event[0][3]
    assert (new_cluster[first:last] == INVALID).all()  # every cluster of module 2 cut
    np.testing.assert_array_equal(new_cluster[last : event[0][4]], event[1][last : event[0][4]])  # none cut in 3
    over = new_cluster[event[0][5] : event[0][6]]
    assert (over == INVALID).sum() == 3 and over.max() == MAX - 1  # ids past MAX are no clusters


def test_no_cluster_cut_and_every_cluster_cut(queue):
    event = cc.generate_event(n_modules=30, clusters_per_module=8, seed=3)
    module_start, cluster, _, n_clusters = event
    new_cluster, new_n = _check(queue, event, 0)
    np.testing.assert_array_equal(new_n, n_clusters)
    np.testing.assert_array_equal(new_cluster, cluster)  # a threshold of 0 keeps every id
    new_cluster, new_n = _check(queue, event, 2**31 - 1)
    assert (new_cluster == INVALID).all() and (new_n == 0).all()


def test_other_work_divisions(queue):
    """Fewer blocks than modules (a block takes several in turn, its shared arrays reused), one
    digi a step or several, and many-thread blocks with real barriers where blocks have threads."""
    event = _edge_cases()
    n_modules = len(event[3])
    divisions = [pk.WorkDiv(3, 1, 1), pk.WorkDiv(n_modules, 1, 1), pk.WorkDiv(2, 1, 7)]
    if queue.device.kind != "cpu":  # OpenCL, CUDA, ROCm: threads that share the block's arrays
        divisions += [pk.WorkDiv(n_modules, 32, 1), pk.WorkDiv(3, cc.MAX_BLOCK_THREADS, 1), pk.WorkDiv(2, 64, 3)]
    for wd in divisions:
        _check(queue, event, 4000, wd)


@pytest.mark.alpyka_backends(kind="gpu")  # blocks of many threads: OpenCL, CUDA, ROCm
def test_a_block_larger_than_the_scan_workspace_is_refused(queue):
    event = _edge_cases()
    with pytest.raises(pk.WorkDivError, match="ws"):
        _cut(queue, event, 4000, pk.WorkDiv(len(event[3]), 2 * cc.MAX_BLOCK_THREADS, 1))


def test_no_modules_and_bad_input(queue):
    empty = _event([])
    new_cluster, new_n = _cut(queue, empty, 4000)
    assert new_cluster.size == 0 and new_n.size == 0
    ms, cl, adc, nc = (upload(queue, a) for a in cc.generate_event(4, 3, seed=4))
    with pytest.raises(TypeError, match="int32"):
        cc.charge_cut(queue, ms, cl, upload(queue, np.zeros(len(cl), np.int64)), nc, 10)
    with pytest.raises(ValueError, match="one length"):
        cc.charge_cut(queue, ms, cl, upload(queue, np.zeros(3, np.int32)), nc, 10)
    with pytest.raises(ValueError, match="n_modules \\+ 1"):
        cc.charge_cut(queue, nc, cl, adc, nc, 10)
