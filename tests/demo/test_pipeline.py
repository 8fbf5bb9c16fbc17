"""The main job end to end: kernels -> GNN -> kernels on one queue, physics checked vs truth."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the demo needs torch (pip install -e '.[torch]')")

import portable as pk  # noqa: E402
from alpyka_demo import _events as E  # noqa: E402
from alpyka_demo import pipeline  # noqa: E402


@pytest.fixture
def model_dir(demo_model_dir):
    return demo_model_dir


@pytest.mark.alpyka_backends("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm")
def test_demo_physics(backend, model_dir, monkeypatch):
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(model_dir))
    report = pipeline.run(backend, events=6, streams=2, n_particles=30, progress=False)
    assert report.events == 6 and report.edges > 0 and report.dropped_edges == 0
    gnn, base = report.gnn, report.baseline
    assert gnn.efficiency > 0.9 and gnn.purity > 0.6, report.table()
    # clearly better than merging by distance alone
    assert gnn.purity > base.purity + 0.2 and gnn.efficiency > base.efficiency, report.table()
    assert all(v >= 0 for v in report.step_s.values())


def test_kernels_agree_across_backends(device):
    """The producer kernels give the same fragments on every backend (counter-based RNG)."""
    q = pk.Queue(device)
    ev = E.allocate(q, 25)
    E.produce(q, ev, seed=3)
    got = ev.frags.to_dict(q)
    ref_q = pk.Queue(pk.device("cpu_serial"))
    ref = E.allocate(ref_q, 25)
    E.produce(ref_q, ref, seed=3)
    want = ref.frags.to_dict(ref_q)
    for k in ("eta", "phi", "energy", "time", "truth"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    edges, ref_edges = ev.edges.to_dict(q), ref.edges.to_dict(ref_q)
    assert int(edges["n_edges"]) == int(ref_edges["n_edges"]) > 0
    # edge order depends on atomics; the set of edges does not
    n = int(edges["n_edges"])
    pairs = sorted(zip(edges["src"][:n], edges["dst"][:n]))
    assert pairs == sorted(zip(ref_edges["src"][:n], ref_edges["dst"][:n]))


def test_cli_errors_are_one_line(model_dir):
    env = {"ALPYKA_MODEL_DIR": str(model_dir), "PATH": "/usr/bin:/bin"}
    for args, needle in [
        (["--backend", "tpu"], "unknown backend 'tpu'"),
        (["--events", "0"], "--events must be at least 1"),
    ]:
        res = subprocess.run(
            [sys.executable, "-m", "portable.cli._main", "demo", *args],
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": ":".join(sys.path)},
        )
        assert res.returncode != 0
        assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_more_particles_than_the_model_indexes_are_refused(model_dir, monkeypatch):
    """``alpyka demo --particles 5000`` ran the kernels, then failed inside the GNN with "index
    4784 is out of bounds for dimension 0 with size 4096" (its node tables hold 4096 fragments, 4
    per particle), and ``--particles 100000`` first searched edges for minutes: one line naming the
    bound now, before anything runs, and the same from ``pipeline.run`` and the Dask route."""
    from alpyka_demo import _dask
    from alpyka_demo._gnn import EdgeGNN
    from alpyka_demo._layouts import MAX_FRAGMENTS, MAX_PARTICLES

    assert MAX_PARTICLES * MAX_FRAGMENTS == EdgeGNN().max_nodes
    res = subprocess.run(
        [sys.executable, "-m", "portable.cli._main", "demo", "--particles", "5000", "--no-progress"],
        capture_output=True,
        text=True,
        env={"ALPYKA_MODEL_DIR": str(model_dir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
        timeout=300,
    )
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert f"--particles must be between 1 and {MAX_PARTICLES} (got 5000)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "out of bounds" not in res.stderr, res.stderr
    monkeypatch.setattr(pipeline, "load_model", lambda *a: pytest.fail("loaded the model first"))
    with pytest.raises(pk.ArgumentError, match="the edge classifier indexes at most 4096 fragments"):
        pipeline.run("cpu_serial", events=1, streams=1, n_particles=MAX_PARTICLES + 1, progress=False)
    monkeypatch.setattr(pk.distributed, "run", lambda *a, **k: pytest.fail("started Dask first"))
    with pytest.raises(pk.ArgumentError, match="--particles must be between"):
        _dask.run_dask("cpu_serial", 1, MAX_PARTICLES + 1, "exported", None, None, 1, None)


@pytest.mark.parametrize("flag", ["--events", "--epochs"])
def test_training_on_nothing_is_refused(tmp_path, flag):
    """``python -m alpyka_demo.train --events 0`` (or ``--epochs 0``, ``--events -3``) trained on
    nothing, printed a loss of 0.0000 and wrote an untrained model over the demo's (without
    ``--out``, the one ``alpyka demo`` then runs): one line naming the flag now, nothing written."""
    from alpyka_demo import train

    res = subprocess.run(
        [sys.executable, "-m", "alpyka_demo.train", flag, "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
        timeout=300,
    )
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert f"argument {flag}: expected a whole number of at least 1, got 0" in res.stderr, res.stderr
    assert not list(tmp_path.iterdir())
    with pytest.raises(pk.ArgumentError, match=r"epochs \(--epochs\) is at least 1"):
        train.train(n_events=1, epochs=0, log=False)


def test_train_refuses_an_out_it_cannot_write_before_training(tmp_path, monkeypatch, capsys):
    """``python -m alpyka_demo.train --out some-file`` trained for seconds, then ended in a
    FileExistsError traceback: argparse's one line naming --out now, before any training."""
    from alpyka_demo import train

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(train, "train", lambda *a, **k: pytest.fail("trained before checking --out"))
    for out in (blocker, blocker / "models"):
        with pytest.raises(SystemExit) as done:
            train.main(["--out", str(out), "--events", "1", "--epochs", "1"])
        assert done.value.code == 2
        assert f"--out {out} cannot be written" in capsys.readouterr().err


def test_the_demo_defaults_to_the_measured_fastest_cpu_backend(monkeypatch):
    monkeypatch.delenv("ALPYKA_BACKEND", raising=False)
    assert pipeline.DEMO_BACKEND == "cpu_serial"  # measured: see the comment above DEMO_BACKEND
    assert pipeline.demo_backend() == "cpu_serial"
    monkeypatch.setenv("ALPYKA_BACKEND", "cpu_threads")
    assert pipeline.demo_backend() == "cpu_threads"


def test_an_unwritable_model_dir_is_refused_before_training(tmp_path, monkeypatch):
    """the demo trained for half a minute, then failed to save with a bare OSError line"""
    from alpyka_demo import train
    from portable.cli import CliError

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(blocker / "models"))
    monkeypatch.setattr(train, "train", lambda **kw: pytest.fail("trained before checking the directory"))
    with pytest.raises(CliError, match=r"model directory .*a-file/models cannot be written.*set ALPYKA_MODEL_DIR"):
        train.ensure_model("exported", log=False)


def test_every_flag_of_the_demo_says_what_it_does(capsys):
    """``alpyka demo --help`` listed ``--no-progress`` with no description."""
    with pytest.raises(SystemExit) as done:
        pipeline.main(["--help"])
    assert done.value.code == 0
    options = capsys.readouterr().out.split("options:", 1)[1].splitlines()
    flags = [ln.split()[0].rstrip(",") for ln in options if ln.startswith("  -")]
    assert "--no-progress" in flags
    for i, ln in enumerate(options):
        if ln.startswith("  -"):
            same_line = "  " in ln.strip()  # argparse puts the help two spaces after the flag
            next_line = i + 1 < len(options) and options[i + 1].startswith("      ")  # or below it
            described = same_line or next_line
            assert described, f"{ln.strip()} has no help text"


def test_training_runs_on_one_torch_thread_and_gives_the_same_model(monkeypatch):
    """With torch's two intra-op threads the sums of a training step added in an order the
    threads' timing decided: two `alpyka demo` first runs trained different models (final losses
    0.0803 and 0.0774; the docstring says "seeded: the same arguments give the same model"). The
    training runs on one thread (and restores the count after); two trainings agree bit for bit."""
    import torch

    from alpyka_demo import _gnn, train

    seen = []
    forward = _gnn.EdgeGNN.forward

    def counting(self, *args):
        seen.append(torch.get_num_threads())
        return forward(self, *args)

    monkeypatch.setattr(_gnn.EdgeGNN, "forward", counting)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        models = [train.train(n_events=20, epochs=2, log=False) for _ in range(2)]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}, seen
    (a, loss_a), (b, loss_b) = models
    assert loss_a == loss_b
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_ctrl_c_ends_training_with_one_line(tmp_path):
    """``python -m alpyka_demo.train`` (README: how the demo's model is trained) printed a
    KeyboardInterrupt traceback of 30-65 lines at a Ctrl-C, while it imported or trained: one line
    now, killed by SIGINT, as the ``alpyka`` command; and it is a command whose import is guarded."""
    import signal
    import time

    from portable._command_start import COMMAND_MODULES, _interpreter_module

    assert _interpreter_module(["-m", "alpyka_demo.train", "--events", "3"]) in COMMAND_MODULES
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "alpyka_demo.train", "--out", str(tmp_path), "--events", "300", "--epochs", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for line in p.stdout:  # the first epoch's line: training is under way
            if "epoch" in line:
                break
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        rc = p.wait(120)  # a generous bound on a hang; it ends in well under a second
        err = p.stderr.read()
    finally:
        p.kill()
        p.stdout.close()
        p.stderr.close()
    assert rc == -signal.SIGINT, (rc, err[-3000:])
    assert err == "python -m alpyka_demo.train: interrupted\n", err[-3000:]
    assert time.monotonic() - t0 < 120 and not list(tmp_path.iterdir())
