"""The port of CMSSW's pixel clusterizer (examples/pixel_clustering.py) on every backend, against a
plain connected-components reference; its two algorithms (CMSSW's propagation, the union-find the
one-thread devices pick) give the same ids on every backend."""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import upload

_PATH = Path(__file__).resolve().parents[2] / "examples" / "pixel_clustering.py"
_spec = importlib.util.spec_from_file_location("pixel_clustering", _PATH)
pc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pc)


def _clusters(queue, module, x, y, **kw):
    out = pc.find_clusters(queue, *(upload(queue, a) for a in (module, x, y)), **kw)
    got = np.empty(len(module), np.int32)
    pk.memcpy(queue, got, out)
    queue.wait()
    return got


@pytest.mark.parametrize("seed", [1, 2])
def test_matches_connected_components(queue, seed):
    module, x, y = pc.generate_digis(n_modules=9, clusters_per_module=30, seed=seed)
    assert (module < 0).any() and (module >= 0).sum() > 500
    np.testing.assert_array_equal(_clusters(queue, module, x, y, n_modules=9), pc.reference_clusters(module, x, y))


def test_touching_shapes_and_long_chains(queue):
    """A snake across the module (ids must travel far), an L, a diagonal, lone pixels, and a digi
    of a module past n_modules; two modules with identical pixels stay apart."""
    pix = [(c, 5 + (c % 2)) for c in range(0, 300)]  # a 300-column zigzag: one cluster
    pix += [(10, 40), (10, 41), (10, 42), (11, 42), (12, 42)]  # an L
    pix += [(50 + k, 80 + k) for k in range(6)]  # a diagonal
    pix += [(200, 100), (202, 100), (200, 102)]  # three singles (gaps of one)
    mx = np.array([p[0] for p in pix], np.int32)
    my = np.array([p[1] for p in pix], np.int32)
    module = np.concatenate([np.zeros(len(pix), np.int32), np.ones(len(pix), np.int32), [-1, 7]]).astype(np.int32)
    x = np.concatenate([mx, mx, [1, 1]]).astype(np.int32)
    y = np.concatenate([my, my, [1, 1]]).astype(np.int32)
    perm = np.random.default_rng(3).permutation(len(module))
    module, x, y = module[perm], x[perm], y[perm]
    got = _clusters(queue, module, x, y, n_modules=2)
    want = pc.reference_clusters(np.where(module < 2, module, -1), x, y)
    np.testing.assert_array_equal(got, want)
    assert got[module == 0].max() == 5 and got[module == 7][0] == -1


def test_n_modules_read_back_and_empty_input(queue):
    module, x, y = pc.generate_digis(n_modules=3, clusters_per_module=5, seed=4)
    np.testing.assert_array_equal(_clusters(queue, module, x, y), pc.reference_clusters(module, x, y))
    empty = np.zeros(0, np.int32)
    assert _clusters(queue, empty, empty, empty).size == 0


def test_bad_input_is_refused(queue):
    a = upload(queue, np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="int32"):
        pc.find_clusters(queue, a, a, upload(queue, np.zeros(4, np.int64)))
    with pytest.raises(ValueError, match="one length"):
        pc.find_clusters(queue, a, a, upload(queue, np.zeros(3, np.int32)))


def _dense_patch(seed):
    """Two modules with the same 48 x 48 patch, each pixel there with probability 0.4: clusters
    of every shape and size up to hundreds of pixels (8-connected site percolation near its threshold, 0.41)."""
    rng = np.random.default_rng(seed)
    cx, cy = np.nonzero(rng.random((48, 48)) < 0.4)
    x = np.concatenate([cx + 180, cx + 180]).astype(np.int32)
    y = np.concatenate([cy + 50, cy + 50]).astype(np.int32)
    module = np.repeat(np.array([0, 1], np.int32), len(cx))
    perm = rng.permutation(len(module))
    return module[perm], x[perm], y[perm]


@pytest.mark.parametrize("data", ["random", "dense"])
def test_both_algorithms_give_identical_ids(queue, data):
    """Each path forced on the same input (whatever the device would pick): the same ids, those of
    the plain connected components."""
    module, x, y = (
        pc.generate_digis(n_modules=6, clusters_per_module=30, seed=5) if data == "random" else _dense_patch(6)
    )
    want = pc.reference_clusters(module, x, y)
    assert len(set(want[module == 0].tolist())) > 20  # many clusters, numbered per module
    for algorithm in pc.ALGORITHMS:
        np.testing.assert_array_equal(_clusters(queue, module, x, y, algorithm=algorithm), want, err_msg=algorithm)


def test_the_device_declares_which_algorithm_it_runs(device):
    """One-thread blocks (the CPU backends) or CPU hardware (OpenCL on a CPU): the union-find;
    a GPU's multi-thread blocks: CMSSW's propagation. Asked of the device, not the backend's name."""
    one_thread = device.kind == "cpu" or device.properties.get("type") == "cpu"
    assert pc.algorithm_for(device) == ("union_find" if one_thread else "propagation")
    if device.backend_name in ("cpu_serial", "cpu_threads"):
        assert pc.algorithm_for(device) == "union_find"
    gpu = dataclasses.replace(
        device,
        kind="gpu",
        limits=dataclasses.replace(device.limits, max_threads_per_block=1024),
        properties={"type": "gpu"},
        capabilities=pk.DeviceCapabilities("gpu", False, hardware="gpu"),
    )
    assert pc.algorithm_for(gpu) == "propagation"
    on_cpu = dataclasses.replace(gpu, capabilities=pk.DeviceCapabilities("gpu", False, hardware="cpu"))
    assert pc.algorithm_for(on_cpu) == "union_find"  # OpenCL on a CPU, as the device declares it


def test_an_unknown_algorithm_is_refused(queue):
    a = upload(queue, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="union_find"):
        pc.find_clusters(queue, a, a, a, algorithm="flood_fill")
