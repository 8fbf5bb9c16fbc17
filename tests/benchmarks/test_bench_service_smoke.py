"""benchmarks/bench_service.py runs in its tiniest mode (two real Triton servers on 127.0.0.1) and
writes the suite's JSON + PNG; no timing is asserted."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, run_script


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
def test_bench_service_smoke(tmp_path):
    for extra in ("torch", "tritonclient.grpc", "pytriton.triton", "matplotlib"):
        pytest.importorskip(extra)
    r = run_script(["benchmarks/bench_service.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "service.json").read_text())
    assert doc["benchmark"] == "service" and doc["results"]
    routes = {row["route"] for row in doc["results"]}
    assert {
        "local",
        "remote model",
        "remote pipeline",
        "remote pipeline, 2 servers",
        "SONIC prediction: remote pipeline",
    } <= routes
    assert all(math.isfinite(row["events_per_s"]) and row["events_per_s"] > 0 for row in doc["results"])
    bytes_ = doc["bytes_per_event"]
    assert bytes_["remote pipeline"] < bytes_["remote model"]  # fragments + labels vs edge tensors
    o = doc["overhead"]
    assert o["model"]["bytes_per_request"] == o["pipeline, same tensors"]["bytes_per_request"]
    assert math.isfinite(o["overhead_fraction"])
    assert (tmp_path / "service.png").read_bytes()[:8] == PNG_MAGIC
