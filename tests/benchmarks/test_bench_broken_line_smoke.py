"""benchmarks/bench_broken_line.py runs in its tiniest mode and writes the suite's JSON + PNG: the
numba twin and every selected backend fit the same generated tracks, each checked against the
numpy reference before timing (no timing asserted)."""

import json
import math

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script

common = load("_common")


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.timeout(900)
def test_bench_broken_line_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    r = run_script(["benchmarks/bench_broken_line.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=840)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((tmp_path / "broken_line.json").read_text())
    assert common.check_document(doc, "broken_line") == []
    assert doc["quick"] is True and doc["mode"] == "smoke"
    skipped = {row["contender"]: row["reason"] for row in doc["results"] if row.get("status") == "skipped"}
    assert not skipped, skipped  # every selected backend reproduced the reference and was timed
    timed = {row["contender"] for row in doc["results"] if "time_median_ms" in row}
    assert "numba njit (1 thread)" in timed and len(timed) >= 2, timed
    for row in doc["results"]:
        assert math.isfinite(row["time_median_ms"]) and row["time_median_ms"] > 0, row
    for name, entry in doc["summary"].items():
        if name != "numba njit (1 thread)":
            assert math.isfinite(entry["speed vs numba"]) and entry["speed vs numba"] > 0, (name, entry)
            assert isinstance(entry["met"], bool) or entry["target"] is None, (name, entry)
    assert (tmp_path / "broken_line.png").read_bytes()[:8] == PNG_MAGIC


def test_the_smoke_runs_tracks_share_the_example_tests_compiles():
    """The smoke run's columns are padded like those of tests/examples/test_broken_line_fit.py's
    fits (600 tracks), so numba's layout of the fit's arrays, part of its compile's signature, is
    the same and a whole run compiles the kernels once (at 2,000 tracks they were contiguous)."""
    numba = pytest.importorskip("numba")
    import numpy as np

    import portable as pk

    bench = load("bench_broken_line")
    q = pk.Queue(pk.device("cpu_serial"))

    def layouts(n: int) -> list[str]:
        view = pk.PortableCollection(bench.bl.Tracks, n, q).view()
        return [numba.typeof(np.asarray(view.state)).layout, numba.typeof(np.asarray(view.covariance)).layout]

    assert layouts(bench.SMOKE_TRACKS) == layouts(600) == ["A", "A"]
