"""benchmarks/bench_waits.py runs in its tiniest mode and writes the suite's JSON + PNG (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script

common = load("_common")


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.timeout(300)
def test_bench_waits_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    r = run_script(["benchmarks/bench_waits.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "waits.json").read_text())
    assert common.check_document(doc, "waits") == []
    assert doc["busy_counts"][0] == 0 and doc["busy_counts"][-1] >= 1, doc["busy_counts"]
    launches = [row for row in doc["results"] if row["section"] == "blocking launch" and "us_per_launch" in row]
    if not launches:
        pytest.skip(f"no CPU OpenCL device measured: {doc['results']}")
    for row in launches:
        assert math.isfinite(row["us_per_launch"]) and row["us_per_launch"] > 0, row
        assert math.isfinite(row["cpu_us_per_launch"]) and row["cpu_us_per_launch"] > 0, row
        assert row["busy_processes"] in doc["busy_counts"] and len(row["load_average"]) == 3, row
    for label, entry in doc["summary"].items():
        keys = ("alpyka_over_raw", "cpu_alpyka_over_raw", "joined_only_over_raw", "python_launcher_over_raw")
        for key in (*keys, "graph_speedup"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (label, key, entry)
        assert isinstance(entry["native_launch"], bool), entry  # (the benchmark checks which ran natively)
        assert 0 <= entry["joined_share"] <= 1, (label, entry)  # how often alpyka's choice joined
    variants = {row["variant"] for row in launches}
    assert {"alpyka, free-core interruptible wait only", "alpyka, joined wait only"} <= variants, variants
    assert {"alpyka pk.exec, a scalar changed each launch"} <= variants, variants
    for label, entry in doc["summary"].items():  # (the pair with a scalar changed, the peer with 1 us first)
        for key in ("scalar_changed_alpyka_over_raw", "raw_1us_first_over_raw"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (label, key, entry)
    assert "alpyka, Python launcher only (no native call)" in variants, variants
    assert {row["busy_processes"] for row in launches} == set(doc["busy_counts"])  # free and busy cores
    assert (tmp_path / "waits.png").read_bytes()[:8] == PNG_MAGIC
