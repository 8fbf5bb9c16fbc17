"""A pytest plugin: the backend test matrix for alpyka and for projects built on it.

Installed with alpyka (entry point ``pytest11: alpyka``). Tests that use the fixtures
``backend``, ``device`` or ``queue`` run once per backend; backends unavailable here are skipped
with their reason. Select backends with ``--backends=cpu_serial,opencl`` or the environment
variable ``ALPYKA_BACKENDS``; restrict one test with ``@pytest.mark.alpyka_backends("opencl")``
or ``@pytest.mark.alpyka_backends(kind="gpu")``.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("alpyka")
    group.addoption(
        "--backends",
        action="store",
        default=None,
        help="comma-separated alpyka backends to test (default: $ALPYKA_BACKENDS or all)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "alpyka_backends(*names, kind=None): run this test only on the named backends or kind ('cpu'/'gpu')",
    )
    selected_backends(config)  # an unknown name is a usage error before collection


def selected_backends(config: Any) -> list[str]:
    """The backend names chosen by ``--backends`` / ``ALPYKA_BACKENDS`` (all known by default)."""
    import portable as pk

    raw = config.getoption("--backends") or os.environ.get("ALPYKA_BACKENDS") or ""
    names = [n.strip() for n in raw.split(",") if n.strip()] or pk.backends()
    unknown = [n for n in names if n not in pk.backends()]
    if unknown:
        raise pytest.UsageError(f"unknown alpyka backend(s) {unknown}; known: {pk.backends()}")
    return names


def _backend_kind(name: str) -> str:
    return "cpu" if name.startswith("cpu_") else "gpu"


def pytest_generate_tests(metafunc: Any) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    import portable as pk

    names = selected_backends(metafunc.config)
    marker = metafunc.definition.get_closest_marker("alpyka_backends")
    if marker is not None:
        allowed = set(marker.args)
        kind = marker.kwargs.get("kind")
        names = [n for n in names if (not allowed or n in allowed) and (kind is None or _backend_kind(n) == kind)]
    reasons = pk.unavailable_backends()
    params = []
    for name in names:
        marks = [pytest.mark.skip(reason=f"{name} unavailable: {reasons[name]}")] if name in reasons else []
        params.append(pytest.param(name, marks=marks, id=name))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(reason="no selected backend fits this test"), id="none")]
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: Any) -> str:
    """The name of the backend under test."""
    return request.param


@pytest.fixture
def device(backend: str) -> Any:
    """Device 0 of the backend under test."""
    import portable as pk

    return pk.device(backend)


@pytest.fixture
def queue(device: Any) -> Iterator[Any]:
    """A non-blocking queue on the device under test; drained after the test."""
    import portable as pk

    q = pk.Queue(device)
    yield q
    q.wait()  # an error left in the queue fails the test; tests that provoke one wait for it
