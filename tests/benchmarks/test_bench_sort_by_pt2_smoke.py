"""benchmarks/bench_sort_by_pt2.py runs in its tiniest mode and writes the suite's JSON + PNG: the
numba twin, numpy and the selected backends (radix and rank sort) measured on a few events, their
results checked against numpy's before timing (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script

common = load("_common")


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.timeout(300)
def test_bench_sort_by_pt2_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    r = run_script(["benchmarks/bench_sort_by_pt2.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "sort_by_pt2.json").read_text())
    assert common.check_document(doc, "sort_by_pt2") == []
    assert doc["quick"] is True and doc["mode"] == "smoke"
    skipped = {row["contender"]: row["reason"] for row in doc["results"] if row.get("status") == "skipped"}
    assert not skipped, skipped  # every selected backend reproduced numpy's results and was timed
    timed = {row["contender"] for row in doc["results"] if "time_median_ms" in row}
    assert {"numba twin (1 thread)", "numpy per event"} < timed, timed
    assert any(name.endswith(", rank sort") for name in timed), timed
    for row in doc["results"]:
        assert math.isfinite(row["time_median_ms"]) and row["time_median_ms"] > 0, row
    for name, entry in doc["summary"].items():
        if isinstance(entry, dict):
            assert math.isfinite(entry["speed vs numba twin"]) and entry["speed vs numba twin"] > 0, (name, entry)
    assert (tmp_path / "sort_by_pt2.png").read_bytes()[:8] == PNG_MAGIC
