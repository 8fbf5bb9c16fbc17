"""Kernels over events (one event per block, rows over threads) equal the numpy reference."""

import numpy as np
import pytest

import portable as pk

ak = pytest.importorskip("awkward", reason="the data extra: pip install 'alpyka[data]'")
skhep = pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.3.12")
pytest.importorskip("uproot", reason="the data extra: pip install 'alpyka[data]'")

from alpyka_testing.data import (  # noqa: E402
    BRANCHES,
    Leptons,
    branches,
    reference_four_lepton,
    reference_pair_masses,
    run_four_lepton,
    run_pair_masses,
)


def test_dimuon_pair_masses_hzz(queue):
    coll, offsets = pk.read_root(skhep.data_path("uproot-HZZ.root"), "events", Leptons, queue, branches=BRANCHES)
    pairs = run_pair_masses(queue, coll, offsets)
    ref_m, ref_os = reference_pair_masses(pk.to_awkward(coll, offsets, queue=queue))
    assert pairs.size == len(ref_m) > 1000
    np.testing.assert_allclose(pairs.mass, ref_m, rtol=2e-5, atol=1e-3)
    np.testing.assert_array_equal(pairs.opposite.astype(bool), ref_os)
    # the Z peak is there: most opposite-sign pairs of 2-muon events sit near 91 GeV
    z = pairs.mass[pairs.opposite.astype(bool)]
    assert 0.4 < np.mean((z > 80) & (z < 100)) < 1.0


def test_event_workdiv_covers_few_blocks(queue):
    """independent_groups strides over the grid: a work division of fewer blocks than events is correct."""
    arr = ak.Array([[{"px": 1.0, "py": 0.0, "pz": 0.0, "E": 2.0, "charge": 1}] * n for n in [3, 0, 1, 2, 5]])
    coll, offsets = pk.from_awkward(Leptons, arr, queue)
    pairs = run_pair_masses(queue, coll, offsets)
    assert pairs.size == 3 + 0 + 0 + 1 + 10
    np.testing.assert_allclose(pairs.mass, np.full(14, np.sqrt(16 - 4), np.float32))


def test_four_lepton_mass_hzz(queue):
    path = skhep.data_path("uproot-HZZ.root")
    mu = pk.to_awkward(*pk.read_root(path, "events", Leptons, queue, branches=BRANCHES), queue=queue)
    ele = pk.to_awkward(*pk.read_root(path, "events", Leptons, queue, branches=branches("Electron")), queue=queue)
    leptons = ak.concatenate([mu, ele], axis=1)
    coll, offsets = pk.from_awkward(Leptons, leptons, queue)
    m4 = run_four_lepton(queue, coll, offsets, len(leptons))
    ref = reference_four_lepton(leptons)
    assert (ref >= 0).sum() > 20
    np.testing.assert_allclose(m4, ref, rtol=1e-4, atol=1e-2)
