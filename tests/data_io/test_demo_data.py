"""``alpyka demo --input FILE.root``, ``--workers N`` and ``--scheduler ADDRESS``, briefly."""

import os

import pytest

pytest.importorskip("torch", reason="the demo needs torch (pip install -e '.[torch]')")
distributed = pytest.importorskip("distributed", reason="the data extra: pip install 'alpyka[data]'")
skhep = pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.3.12")
pytest.importorskip("uproot", reason="the data extra: pip install 'alpyka[data]'")

from alpyka_demo import pipeline  # noqa: E402

HZZ = skhep.data_path("uproot-HZZ.root")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def model_env(demo_model_dir, monkeypatch):
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(demo_model_dir))


def test_demo_input_file(model_env, capsys):
    assert pipeline.main(["--input", HZZ, "--events", "8", "--streams", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2421 events, objects Jet+Muon+Electron+Photon" in out
    assert "not scored (the file has no fragment truth)" in out and "8 / 1" in out


def test_demo_file_events_match_the_file(model_env):
    """The fragments of an event are the file's objects (eta, phi, energy from their four-momenta)."""
    import awkward as ak
    import numpy as np
    import uproot

    import portable as pk
    from alpyka_demo import _events as E
    from alpyka_demo._from_file import FileEvents

    q = pk.Queue(pk.device("cpu_serial"))
    src = FileEvents(HZZ, q.device)
    ev = E.allocate(q, src.n_particles)
    src.produce(q, ev, 5)
    frags = ev.frags.to_host(q)
    q.wait()
    with uproot.open(HZZ) as f:
        t = f["events"].arrays(
            ["Jet_Px", "Jet_Py", "Jet_E", "Muon_E", "Electron_E", "Photon_E"], entry_start=5, entry_stop=6
        )
    jets = len(t.Jet_Px[0])
    n = sum(len(t[f"{p}_E"][0]) for p in ("Jet", "Muon", "Electron", "Photon"))
    np.testing.assert_allclose(frags.energy[:jets], ak.to_numpy(t.Jet_E[0]), rtol=1e-6)
    np.testing.assert_allclose(
        frags.phi[:jets], np.arctan2(ak.to_numpy(t.Jet_Py[0]), ak.to_numpy(t.Jet_Px[0])), rtol=1e-5, atol=1e-6
    )
    assert (frags.truth[:n] >= 0).all() and (frags.truth[n:] == -1).all()


def test_demo_workers(model_env, capsys):
    assert pipeline.main(["--workers", "1", "--events", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "on 1 local Dask workers" in out and "GNN merging             efficiency" in out


@pytest.fixture
def environ_restored():
    """This process's environment put back afterwards: Dask's Nanny writes its workers' variables
    (``OMP_NUM_THREADS=1``, ``PYTHONHASHSEED``, ...) into it and leaves them there."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_demo_scheduler(model_env, capsys, environ_restored):
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=50,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    ) as cl:
        assert (
            pipeline.main(["--scheduler", cl.scheduler_address, "--input", HZZ, "--events", "4", "--no-progress"]) == 0
        )
    out = capsys.readouterr().out
    assert f"on {cl.scheduler_address}" in out and "not scored" in out


def test_demo_workers_flag_checked(capsys):
    with pytest.raises(SystemExit):
        pipeline.main(["--workers", "0"])
    assert "--workers must be at least 1" in capsys.readouterr().err
