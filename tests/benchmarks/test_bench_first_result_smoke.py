"""benchmarks/bench_first_result.py runs in its tiniest mode and writes the suite's JSON + PNG:
fresh processes of alpyka on each selected backend, each beside a numba twin of its own, cold and
warm, every result checked against numpy inside the process (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script

common = load("_common")


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.timeout(300)
def test_bench_first_result_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("numba")
    r = run_script(
        ["benchmarks/bench_first_result.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=240
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "first_result.json").read_text())
    assert common.check_document(doc, "first_result") == []
    assert doc["quick"] is True and doc["mode"] == "smoke"
    timed = [row for row in doc["results"] if "s" in row]
    names = {row["contender"] for row in timed}
    assert "numba njit(cache=True)" in names and len(names) >= 2, doc["results"]
    for row in timed:  # each process computed 2 * x + y (checked inside it) and was timed
        assert row["state"] in ("cold", "warm"), row
        assert math.isfinite(row["s"]) and row["s"] > 0 and 0 < row["import_s"] <= row["s"], row
        assert math.isfinite(row["cpu_s"]) and row["cpu_s"] > 0, row
    # each alpyka process was run beside a numba twin of its own (same pair, same state)
    twins = {(row["pair"], row["state"]) for row in timed if row["contender"] == "numba njit(cache=True)"}
    assert all((row["pair"], row["state"]) in twins for row in timed), timed
    failed = [row for row in doc["results"] if str(row.get("reason", "")).startswith("failed")]
    assert not failed, failed
    for name, entry in doc["summary"].items():
        if name.startswith("alpyka"):  # its time over the twin's, paired per round, and the goal's verdict
            assert entry["cold vs numba"] > 0 and entry["warm vs numba"] > 0, (name, entry)
            assert isinstance(entry["cold met (<= 1.1)"], bool) and isinstance(entry["warm met (<= 1.0)"], bool)
    machine = doc["summary"]["machine while measured"]
    assert machine["rounds"] == 1 and machine["load average (1 min), median"] >= 0, machine
    assert (tmp_path / "first_result.png").read_bytes()[:8] == PNG_MAGIC
