"""benchmarks/bench_graph.py runs in its tiniest mode and writes the suite's JSON + PNG (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script

common = load("_common")


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.timeout(300)
def test_bench_graph_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    r = run_script(["benchmarks/bench_graph.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "graph.json").read_text())
    assert common.check_document(doc, "graph") == []
    ok = [row for row in doc["results"] if row["status"] == "ok"]
    assert ok, doc["results"]
    for row in ok:
        assert math.isfinite(row["median_us"]) and row["median_us"] > 0, row
    for backend, entry in doc["summary"].items():
        ratio = entry["graph speedup (one by one / graph)"]
        assert math.isfinite(ratio) and ratio > 0, (backend, entry)
        assert entry.get("replay ran every kernel", True) is True, (backend, entry)  # the same 20 kernels ran
    assert (tmp_path / "graph.png").read_bytes()[:8] == PNG_MAGIC
