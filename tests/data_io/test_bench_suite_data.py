"""`alpyka bench` (benchmarks/run_all.py) runs bench_data with the rest of the suite: it finds
every bench_*.py, and bench_data takes --smoke like the others."""

from alpyka_testing.bench import BENCH, load

run_all = load("run_all")


def test_run_all_discovers_bench_data_and_pipeline():
    found = run_all.discover(BENCH)
    assert found["data"] == BENCH / "bench_data.py"
    assert found["pipeline"] == BENCH / "bench_pipeline.py"
    assert run_all.supports_smoke(found["data"]) and run_all.supports_smoke(found["pipeline"])
