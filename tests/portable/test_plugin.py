"""The pytest plugin: backend selection, skipping with reasons, restriction markers."""

import os
from importlib.metadata import entry_points
from pathlib import Path

import portable as pk

ROOT = Path(pk.__file__).resolve().parent.parent
INSTALLED = any(ep.name == "alpyka" for ep in entry_points(group="pytest11"))

TEST_FILE = """
import pytest

def test_dev(device):
    assert device.backend_name

@pytest.mark.alpyka_backends(kind="cpu")
def test_cpu_only(backend):
    assert backend.startswith("cpu_")
"""


def _run(pytester, *args, env=None):
    pytester.makepyfile(test_matrix=TEST_FILE)
    mp = pytester._monkeypatch
    mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    mp.delenv("ALPYKA_BACKENDS", raising=False)
    for k, v in (env or {}).items():
        mp.setenv(k, v)
    plugin = () if INSTALLED else ("-p", "portable.pytest_plugin")
    return pytester.runpytest_subprocess(*plugin, "-v", "-rs", *args)


def test_selection_by_option(pytester):
    res = _run(pytester, "--backends=cpu_serial")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_dev?cpu_serial? PASSED*"])


def test_selection_by_environment(pytester):
    res = _run(pytester, env={"ALPYKA_BACKENDS": "cpu_threads"})
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_cpu_only?cpu_threads? PASSED*"])


def test_unavailable_backends_skip_with_reason(pytester):
    reasons = pk.unavailable_backends()
    res = _run(pytester)
    n_avail = len(pk.available_backends())
    n_cpu = 2
    res.assert_outcomes(passed=n_avail + n_cpu, skipped=len(reasons))
    for name in reasons:
        res.stdout.fnmatch_lines([f"*SKIPPED*{name} unavailable:*"])


def test_unknown_backend_is_a_usage_error(pytester):
    res = _run(pytester, "--backends=cpu_serial,tpu")
    assert res.ret != 0
    assert "unknown alpyka backend(s) ['tpu']" in res.stdout.str() + res.stderr.str()
