"""benchmarks/bench_service.py runs in its tiniest mode (two real Triton servers on 127.0.0.1) and
writes the suite's JSON + PNG; no timing is asserted."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_bench_service_smoke(tmp_path):
    for extra in ("torch", "tritonclient.grpc", "pytriton.triton", "matplotlib"):
        pytest.importorskip(extra)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "benchmarks/bench_service.py", "--smoke", "--no-progress", "--out",
                        str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "service.json").read_text())
    assert doc["benchmark"] == "service" and doc["results"]
    routes = {row["route"] for row in doc["results"]}
    assert {"local", "remote model", "remote pipeline", "remote pipeline, 2 servers",
            "SONIC prediction: remote pipeline"} <= routes
    assert all(math.isfinite(row["events_per_s"]) and row["events_per_s"] > 0 for row in doc["results"])
    bytes_ = doc["bytes_per_event"]
    assert bytes_["remote pipeline"] < bytes_["remote model"]  # fragments + labels vs edge tensors
    o = doc["overhead"]
    assert o["model"]["bytes_per_request"] == o["pipeline, same tensors"]["bytes_per_request"]
    assert math.isfinite(o["overhead_fraction"])
    assert (tmp_path / "service.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
