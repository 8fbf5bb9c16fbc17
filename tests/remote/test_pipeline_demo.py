"""``alpyka demo --remote-pipeline``: edges + GNN + merging as one pipeline on Triton; the client
only generates fragments; the merging scores equal the local run's."""

from __future__ import annotations

import pytest

from .triton_support import pytriton_reason

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

from alpyka_demo import pipeline  # noqa: E402


def _scores(report) -> tuple:
    g, b = report.gnn, report.baseline
    return (
        g.true_pairs,
        g.merged_pairs,
        g.good_pairs,
        b.true_pairs,
        b.merged_pairs,
        b.good_pairs,
        report.edges,
        report.dropped_edges,
    )


def test_remote_pipeline_equals_local(demo_model_dir, monkeypatch, capsys):
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(demo_model_dir))
    local = pipeline.run("cpu_serial", events=8, streams=1, n_particles=30, progress=False)
    auto = pipeline.run("cpu_serial", events=8, streams=2, n_particles=30, progress=False, remote_pipeline="auto")
    assert "remote pipeline (local Triton at 127.0.0.1:" in auto.model
    assert _scores(auto) == _scores(local), (auto.table(), local.table())
    assert auto.gnn.efficiency > 0.9

    from alpyka_demo._service import merge_fragments
    from inference.serving import serve

    with serve(merge_fragments, device="cpu_threads") as server:
        url = server.grpc_url
        assert (
            pipeline.main(
                [
                    "--backend",
                    "cpu_serial",
                    "--events",
                    "8",
                    "--streams",
                    "1",
                    "--particles",
                    "30",
                    "--no-progress",
                    "--remote-pipeline",
                    f"{url},{url}",
                ]
            )
            == 0
        )
    out = capsys.readouterr().out
    g = local.gnn
    assert f"remote pipeline ({url},{url})" in out
    assert f"efficiency {g.efficiency:.3f}, purity {g.purity:.3f}" in out, out
