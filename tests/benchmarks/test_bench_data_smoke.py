"""benchmarks/bench_data.py runs in its tiniest mode and writes the suite's JSON + PNG (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, run_script, selected


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
def test_bench_data_smoke(tmp_path):
    for extra in ("awkward", "uproot", "skhep_testdata", "matplotlib"):
        pytest.importorskip(extra)
    selected(("cpu_serial", "cpu_threads", "opencl"))
    r = run_script(["benchmarks/bench_data.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "data.json").read_text())
    assert doc["benchmark"] == "data" and doc["results"]
    row = doc["results"][0]
    assert all(math.isfinite(row[k]) and row[k] > 0 for k in ("alpyka_events_per_s", "reference_events_per_s"))
    assert row["converted_bytes"] == 0 and row["filled_bytes"] > 0  # HZZ's dtypes match the layout
    assert (tmp_path / "data.png").read_bytes()[:8] == PNG_MAGIC
