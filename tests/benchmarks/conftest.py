"""The smoke runs of the benchmark scripts, started together for the tests that check them."""

from __future__ import annotations

import pytest
from bench_run import SmokeRuns


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "smoke_script(name): the test checks the smoke run of benchmarks/<name>.py")


@pytest.fixture(scope="session")
def smoke_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """:class:`bench_run.SmokeRuns` of every script a selected test is marked with."""
    names = {m.args[0] for item in request.session.items for m in item.iter_markers("smoke_script")}
    runs = SmokeRuns(names, tmp_path_factory.mktemp("smoke"))
    yield runs
    runs.close()
