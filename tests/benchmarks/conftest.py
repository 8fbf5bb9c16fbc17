"""The benchmark scripts run in child processes: they get this run's backend selection
(``--backends`` / ``ALPYKA_BACKENDS``) as ``ALPYKA_BACKENDS`` (benchmarks/_common.py's ``backends``)."""

import pytest


@pytest.fixture(autouse=True)
def _backend_selection(request, monkeypatch):
    from portable.testing.plugin import selected_backends

    monkeypatch.setenv("ALPYKA_BACKENDS", ",".join(selected_backends(request.config)))
