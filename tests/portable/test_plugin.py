"""The pytest plugin: backend selection, skipping with reasons, restriction markers, and staying
out of the way of other projects (it is a pytest11 entry point, loaded by every pytest run)."""

import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import portable as pk

ROOT = Path(pk.__file__).resolve().parent.parent
INSTALLED = any(ep.name == "alpyka" for ep in entry_points(group="pytest11"))
needs_entry_point = pytest.mark.skipif(not INSTALLED, reason="alpyka is not installed (no pytest11 entry point)")

TEST_FILE = """
import pytest

def test_dev(device):
    assert device.backend_name

@pytest.mark.alpyka_backends(kind="cpu")
def test_cpu_only(backend):
    assert backend.startswith("cpu_")
"""

# A project that is not built on alpyka and has its own meaning for the names.
FOREIGN_FILES = {
    "test_own_fixture": """
import pytest

@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param

def test_own_backend(backend):
    assert backend in ("sqlite", "postgres")
""",
    "test_own_parametrize": """
import pytest

@pytest.mark.parametrize("backend", ["a", "b"])
def test_marked(backend):
    assert backend in ("a", "b")

@pytest.mark.parametrize("backend, n", [("c", 1), ("d", 2)])
def test_marked_pairs(backend, n):
    assert backend in ("c", "d")

@pytest.mark.parametrize("backend", ["e"])
class TestClassMarked:
    def test_it(self, backend):
        assert backend == "e"
""",
    "test_own_device_queue": """
import pytest

@pytest.fixture
def device():
    return "my-device"

@pytest.fixture
def queue(device):
    return [device]

def test_queue(queue):
    assert queue == ["my-device"]

def test_device(device):
    assert device == "my-device"
""",
}
FOREIGN_FILES["conftest"] = """
def pytest_generate_tests(metafunc):  # a project's own hook that parametrises `backend`
    if metafunc.function.__name__ == "test_hooked":
        metafunc.parametrize("backend", ["h1", "h2"])
"""
FOREIGN_FILES["test_own_hook"] = """
def test_hooked(backend):
    assert backend in ("h1", "h2")
"""
FOREIGN_PASSED = 2 + 2 + 2 + 5
# Checked only in a run of the foreign files alone: the plugin imports no backend and no
# compiler for a project that never uses its fixtures.
NO_RUNTIME_FILE = """
import sys

def test_alpyka_runtime_not_loaded():
    assert "numba" not in sys.modules
    assert not [m for m in sys.modules if m == "backends" or m.startswith("backends.")]
"""

ALPYKA_FILE = """
import pytest

def test_q(queue):
    assert queue.device.backend_name == "cpu_serial"

@pytest.fixture
def backend(backend):  # a project's override that extends alpyka's fixture still gets the matrix
    return backend

def test_extended(backend):
    assert backend == "cpu_serial"
"""


def _run(pytester, *args, env=None, files=None):
    pytester.makepyfile(**(files or {"test_matrix": TEST_FILE}))
    mp = pytester._monkeypatch
    mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    mp.delenv("ALPYKA_BACKENDS", raising=False)
    mp.delenv("ALPYKA_EMULATE", raising=False)
    mp.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    mp.delenv("PYTEST_ADDOPTS", raising=False)
    for k, v in (env or {}).items():
        mp.setenv(k, v)
    load = () if INSTALLED else ("-p", "portable.testing.plugin")
    return pytester.runpytest_subprocess(*load, "-p", "no:cacheprovider", "-v", "-rs", *args)


def _output(res):
    return res.stdout.str() + res.stderr.str()


def test_the_backends_filtered_warnings_stay_filtered_in_a_projects_tests(pytester):
    """A project's kernel test on opencl showed pyopencl's "Non-empty compiler output encountered"
    twice per build (Intel's compiler always leaves a log), though the backend filters it as it
    loads (docs/backends.md): pytest drops a filter set during collection or a fixture's setup.
    Each row of the matrix carries the filter as a mark now (the warning raised by hand here, so
    that the test holds on any OpenCL runtime); a test outside the matrix keeps pytest's rules."""
    files = {
        "test_warns": """
import warnings

def test_row(backend):
    warnings.warn("Non-empty compiler output encountered. Set PYOPENCL_COMPILER_OUTPUT=1", UserWarning)

def test_not_a_row():
    warnings.warn("Non-empty compiler output encountered. Set PYOPENCL_COMPILER_OUTPUT=1", UserWarning)
"""
    }
    res = _run(pytester, "--backends=cpu_serial", files=files)
    res.assert_outcomes(passed=2, warnings=1)
    res.stdout.fnmatch_lines(["*test_warns.py::test_not_a_row*"])
    assert "test_row[cpu_serial]\n  " not in res.stdout.str(), res.stdout.str()


def test_selection_by_option(pytester):
    res = _run(pytester, "--backends=cpu_serial")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_dev?cpu_serial? PASSED*"])


def test_selection_by_environment(pytester):
    res = _run(pytester, env={"ALPYKA_BACKENDS": "cpu_threads"})
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_cpu_only?cpu_threads? PASSED*"])


def test_unavailable_backends_skip_with_reason(pytester):
    from backends.emulator.fake_cupy_kernels import served_here

    standin = served_here()  # this repository's opt-in (tests/conftest.py): not in another project
    reasons = {**pk.unavailable_backends(), **{n: "" for n in standin}}
    res = _run(pytester)
    n_avail = len(pk.available_backends()) - len(standin)
    n_cpu = 2
    res.assert_outcomes(passed=n_avail + n_cpu, skipped=len(reasons))
    for name in reasons:
        res.stdout.fnmatch_lines([f"*SKIPPED*{name} unavailable:*"])


#: a project's test of its own kernel on every backend
KERNEL_TEST_FILE = """
import numpy as np
import portable as pk

@pk.kernel
def twice(acc, y, x, n):
    for i in acc.uniform_elements(n):
        y[i] = 2 * x[i]

def test_twice(device, queue):
    x = np.arange(100, dtype=np.int64)
    bx, by = pk.Buffer(device, (100,), np.int64), pk.Buffer(device, (100,), np.int64)
    pk.memcpy(queue, bx, x)
    pk.exec(queue, pk.valid_workdiv(device, 100), twice, by, bx, 100)
    got = np.empty_like(x)
    pk.memcpy(queue, got, by)
    queue.wait()
    assert (got == 2 * x).all()
"""


def test_alpyka_emulate_gives_the_matrix_emulated_rows(pytester):
    """In any project, ALPYKA_EMULATE=cuda runs the cuda row (on the CPU's GPU emulator) where it
    would be skipped without a GPU; the header says the row is emulated."""
    from backends.emulator.fake_cupy_kernels import why_not

    if why_not() is not None:
        pytest.skip(f"the GPU emulator cannot run here: {why_not()}")
    for check in ("ALPYKA_CHECK_CUDA", "ALPYKA_CHECK_HIP"):  # the suite's compile checks: not this test's
        pytester._monkeypatch.delenv(check, raising=False)
    res = _run(pytester, "--backends=cuda", env={"ALPYKA_EMULATE": "cuda"}, files={"test_kernel": KERNEL_TEST_FILE})
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["alpyka: ALPYKA_EMULATE=cuda: *emulator, not a GPU", "*test_twice?cuda? PASSED*"])


def test_unknown_backend_is_a_usage_error(pytester):
    res = _run(pytester, "--backends=cpu_serial,tpu")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown alpyka backend(s) ['tpu']" in _output(res)


def test_foreign_project_keeps_its_own_fixtures_and_parametrization(pytester):
    # ALPYKA_BACKENDS set for alpyka must not break a project that never uses its fixtures
    files = dict(FOREIGN_FILES, test_zz_no_runtime=NO_RUNTIME_FILE)
    res = _run(pytester, files=files, env={"ALPYKA_BACKENDS": "bogus"})
    res.assert_outcomes(passed=FOREIGN_PASSED + 1)
    res.stdout.fnmatch_lines(
        [  # in collection order
            "*test_own_device_queue.py::test_queue PASSED*",
            "*test_own_backend?sqlite? PASSED*",
            "*test_hooked?h2? PASSED*",
            "*test_marked?a? PASSED*",
            "*test_marked_pairs?d-2? PASSED*",
            "*TestClassMarked::test_it?e? PASSED*",
            "*test_alpyka_runtime_not_loaded PASSED*",
        ]
    )
    assert "cpu_serial" not in res.stdout.str()


def test_bad_environment_is_a_usage_error_where_the_fixtures_are_used(pytester):
    files = dict(FOREIGN_FILES, test_alpyka=ALPYKA_FILE)
    res = _run(pytester, files=files, env={"ALPYKA_BACKENDS": "cpu_serial,bogus"})
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    out = _output(res)
    assert "unknown alpyka backend(s) ['bogus'] in ALPYKA_BACKENDS='cpu_serial,bogus'" in out
    assert f"known: {pk.backends()}" in out


def test_project_using_the_fixtures_gets_the_matrix(pytester):
    res = _run(pytester, "--backends=cpu_serial", files=dict(FOREIGN_FILES, test_alpyka=ALPYKA_FILE))
    res.assert_outcomes(passed=FOREIGN_PASSED + 2)
    res.stdout.fnmatch_lines(["*test_q?cpu_serial? PASSED*", "*test_extended?cpu_serial? PASSED*"])


@needs_entry_point
def test_explicit_opt_in_without_autoload(pytester):
    res = _run(
        pytester,
        "-p",
        "alpyka",
        "--backends=cpu_serial",
        files={"test_alpyka": ALPYKA_FILE},
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    res.assert_outcomes(passed=2)


@needs_entry_point
def test_opt_out(pytester):
    files, env = {"test_alpyka": ALPYKA_FILE}, {"ALPYKA_BACKENDS": "bogus"}
    res = _run(pytester, files=files, env=env)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res = _run(pytester, "-p", "no:alpyka", files=files, env=env)
    res.assert_outcomes(errors=2)  # no plugin: no `queue` fixture, no matrix
    res.stdout.fnmatch_lines(["*fixture 'queue' not found*"])
