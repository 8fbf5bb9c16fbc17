"""A pytest plugin: the backend test matrix for alpyka and for projects built on it.

Installed with alpyka (entry point ``pytest11: alpyka``), so it is loaded by every pytest run in
an environment that has alpyka; it therefore acts only where its own fixtures are used. A test
that requests ``backend``, ``device`` or ``queue`` and gets *this plugin's* ``backend`` fixture
runs once per backend; backends unavailable here are skipped with their reason. A project's own
fixture of the same name, or a ``@pytest.mark.parametrize("backend", ...)`` on the test, wins:
the plugin then leaves the test alone.

Select backends with ``--backends=cpu_serial,opencl`` or the environment variable
``ALPYKA_BACKENDS``; restrict one test with ``@pytest.mark.alpyka_backends("opencl")`` or
``@pytest.mark.alpyka_backends(kind="gpu")``. An unknown name in ``--backends`` is a usage error
at once; one in ``ALPYKA_BACKENDS`` is a usage error only in a run that uses these fixtures (the
variable may be set for alpyka while other projects are tested). Opt out of the plugin with
``-p no:alpyka``; opt in explicitly (e.g. under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``) with
``-p alpyka``, or ``-p portable.testing.plugin`` from a source checkout that is not installed.

``ALPYKA_EMULATE=cuda`` (or ``rocm``, ``cuda,rocm``) gives the matrix ``cuda``/``rocm`` rows
on any machine: they run on the CPU's GPU emulator (backends/emulator/), and the run's header
says so.

Nothing here imports alpyka's runtime (numba, the backends) until a test uses the fixtures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

ENV_VAR = "ALPYKA_BACKENDS"
_ARG = "backend"  # the fixture the matrix parametrises; device and queue request it

# (selected names, error message or None), computed once per run
_SELECTION = pytest.StashKey["tuple[list[str], str | None]"]()
# an error message to raise as a usage error once collection is done
_PENDING_ERROR = pytest.StashKey[str]()
#: the warnings the backends filter as they load (backends/opencl.py: pyopencl's note that
#: Intel's compiler left a log, after every build; docs/backends.md). pytest drops a filter set
#: outside the test phase running (the backends load during collection or a fixture's setup), so
#: every row of the matrix carries them as a mark: a project's kernel tests showed two
#: "Non-empty compiler output encountered" warnings per OpenCL build.
BACKEND_WARNING_FILTERS = ("ignore:Non-empty compiler output encountered",)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("alpyka")
    group.addoption(
        "--backends",
        action="store",
        default=None,
        help=f"comma-separated alpyka backends to test (default: ${ENV_VAR} or all); "
        "used only by tests that take alpyka's backend/device/queue fixtures",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "alpyka_backends(*names, kind=None): run this test only on the named backends or kind ('cpu'/'gpu')",
    )
    # --backends is alpyka's own option: whoever passes it means alpyka, so an unknown name is a
    # usage error before collection. ALPYKA_BACKENDS is checked only where the fixtures are used.
    if config.getoption("--backends"):
        selected_backends(config)


def pytest_report_header(config: Any) -> list[str]:
    """A line naming the backends ALPYKA_EMULATE runs on the CPU's GPU emulator, where it is set."""
    raw = os.environ.get("ALPYKA_EMULATE", "").strip()
    if not raw or raw.lower() in ("off", "0", "none"):
        return []
    return [f"alpyka: ALPYKA_EMULATE={raw}: those backends' rows run on the CPU's GPU emulator, not a GPU"]


def _parse(raw: str) -> list[str]:
    return [n.strip() for n in raw.split(",") if n.strip()]


def _selection(config: Any) -> tuple[list[str], str | None]:
    """The selected names and, if some are unknown, the error message (cached per run)."""
    cached = config.stash.get(_SELECTION, None)
    if cached is not None:
        return cached
    import portable as pk

    known = pk.backends()
    option = config.getoption("--backends")
    if option:
        names, source = _parse(option), f"--backends={option!r}"
    else:
        raw = os.environ.get(ENV_VAR, "")
        names, source = _parse(raw), f"{ENV_VAR}={raw!r}"
    names = names or list(known)
    unknown = [n for n in names if n not in known]
    error = f"unknown alpyka backend(s) {unknown} in {source}; known: {known}" if unknown else None
    config.stash[_SELECTION] = (names, error)
    return names, error


def selected_backends(config: Any) -> list[str]:
    """The backend names chosen by ``--backends`` / ``ALPYKA_BACKENDS`` (all known by default).

    Raises ``pytest.UsageError`` naming the unknown names and the known ones.
    """
    names, error = _selection(config)
    if error:
        raise pytest.UsageError(error)
    return names


def _backend_kind(name: str) -> str:
    """``"cpu"``/``"gpu"``: the execution model the backend's devices declare
    (``capabilities.kind``); an unavailable backend (its rows are skipped) by its name."""
    import portable as pk

    try:
        devices = pk.devices(name)
    except (pk.BackendUnavailable, ValueError):
        devices = []
    if devices:
        return devices[0].capabilities.kind
    return "cpu" if name.startswith("cpu_") else "gpu"


def _is_own(fixturedef: Any) -> bool:
    return getattr(getattr(fixturedef, "func", None), "__module__", None) == __name__


def _uses_plugin_backend(metafunc: Any) -> bool:
    """Whether ``backend`` resolves, for this test, to this plugin's fixture.

    The closest definition (the last one) decides; a project's fixture that overrides ours
    while requesting it (``def backend(backend): ...``) still reaches ours."""
    defs = getattr(metafunc, "_arg2fixturedefs", None)
    if defs is None:
        # pytest < 8 keeps them on the definition; pytest offers no public way to ask which
        # fixture definitions a test resolves, reading its internals is the only one
        defs = metafunc.definition._fixtureinfo.name2fixturedefs  # noqa: SLF001 - pytest's own, no public API
    for fixturedef in reversed(defs.get(_ARG) or ()):
        if _is_own(fixturedef):
            return True
        if _ARG not in getattr(fixturedef, "argnames", ()):
            return False
    return False


def _parametrize_mark_argnames(mark: Any) -> list[str]:
    argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    if isinstance(argnames, str):
        return _parse(argnames)
    return list(argnames)


def _parametrized_elsewhere(metafunc: Any) -> bool:
    """A ``parametrize`` mark on the test (or its class/module), or a hook that ran before this
    one (a conftest's ``pytest_generate_tests``), owns ``backend``."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        if _ARG in _parametrize_mark_argnames(mark):
            return True
    return any(_ARG in getattr(call, "params", {}) for call in getattr(metafunc, "_calls", ()))


def pytest_generate_tests(metafunc: Any) -> None:
    if _ARG not in metafunc.fixturenames:
        return
    if not _uses_plugin_backend(metafunc) or _parametrized_elsewhere(metafunc):
        return  # not ours: the project's own fixture or parametrization decides
    import portable as pk

    config = metafunc.config
    names, error = _selection(config)
    if error:
        # The run uses alpyka's fixtures with a bad selection: a usage error after collection
        # (pytest_collection_modifyitems); the placeholder never runs.
        config.stash[_PENDING_ERROR] = error
        metafunc.parametrize(
            _ARG, [pytest.param(None, marks=pytest.mark.skip(reason=error), id="invalid")], indirect=True
        )
        return
    marker = metafunc.definition.get_closest_marker("alpyka_backends")
    if marker is not None:
        allowed = set(marker.args)
        kind = marker.kwargs.get("kind")
        names = [n for n in names if (not allowed or n in allowed) and (kind is None or _backend_kind(n) == kind)]
    reasons = pk.unavailable_backends()
    params = []
    quiet = [pytest.mark.filterwarnings(f) for f in BACKEND_WARNING_FILTERS]
    for name in names:
        marks = [pytest.mark.skip(reason=f"{name} unavailable: {reasons[name]}")] if name in reasons else quiet
        params.append(pytest.param(name, marks=marks, id=name))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(reason="no selected backend fits this test"), id="none")]
    metafunc.parametrize(_ARG, params, indirect=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: Any, config: Any, items: Any) -> None:
    error = config.stash.get(_PENDING_ERROR, None)
    if error:
        raise pytest.UsageError(error)


@pytest.fixture
def backend(request: Any) -> str:
    """The name of the backend under test."""
    if not hasattr(request, "param"):
        pytest.fail("alpyka's `backend` fixture was not parametrised by its plugin", pytrace=False)
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
