"""A hung test fails the run fast, with every thread's stack: also in a fixture's teardown and
in a thread blocked on a lock (what the CI hang of a finalizer deadlock looked like), and a hang
outside any test (making a failure's report, interpreter exit) through alpyka_testing/hang_guard.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

#: the child pytest runs (each ends by a limit of a few seconds) and the bound on how soon it
#: failed: hang guards with headroom for the child's start on a busy 2-core machine (a pytest with
#: xdist workers: seconds idle, nine times that at a load of 18), below the test's own 240 s
CHILD_S = 200
FAILED_WITHIN_S = 150


def _project_timeout_options() -> dict:
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return {k: v for k, v in ini.items() if k.startswith("timeout")}


def test_project_settings_cover_fixtures_and_blocked_threads():
    opts = _project_timeout_options()
    assert opts.get("timeout_method") == "thread", "the signal method is swallowed by lock waits and finalizers"
    assert opts.get("timeout_func_only") is False, "fixtures and teardown must be covered"
    assert 0 < int(opts["timeout"]) <= 300, "a hang must fail within a few minutes"


def test_a_hang_in_teardown_fails_fast_with_every_threads_stack(pytester):
    pytest.importorskip("pytest_timeout")
    opts = _project_timeout_options()
    opts["timeout"] = 3  # the project's settings, a shorter limit
    pytester.makeini(
        "[pytest]\n" + "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in opts.items())
    )
    pytester.makepyfile(
        test_hangs="""
        import threading
        import pytest

        lock = threading.Lock()

        def holder():
            with lock:
                threading.Event().wait()   # holds the lock forever

        @pytest.fixture
        def stuck():
            t = threading.Thread(target=holder, name="lock-holder-thread", daemon=True)
            t.start()
            yield
            lock.acquire()                 # teardown blocks on the lock: never returns

        def test_uses_stuck(stuck):
            assert True
    """
    )
    start = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:alpyka", timeout=CHILD_S)
    elapsed = time.monotonic() - start
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0, out
    assert elapsed < FAILED_WITHIN_S, f"the hang took {elapsed:.0f} s to fail"
    assert "Timeout" in out, out
    assert "lock-holder-thread" in out, "the other threads' stacks are missing:\n" + out


_HANG_IN_REPORT = """
import threading, time, pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if call.when == "call" and call.excinfo is not None:
        threading.Thread(target=time.sleep, args=(600,), name="bystander", daemon=True).start()
        time.sleep(600)   # a report that never gets made (a blocking finalizer, a repr)
"""

_HANG_AT_EXIT = """
import atexit, time

def pytest_unconfigure(config):
    atexit.register(time.sleep, 600)   # the interpreter's exit never ends
"""


@pytest.mark.parametrize(
    "conftest, where",
    [(_HANG_IN_REPORT, "pytest_runtest_makereport"), (_HANG_AT_EXIT, "atexit")],
    ids=["report", "exit"],
)
def test_a_hang_outside_the_tests_fails_the_run_with_every_stack(pytester, monkeypatch, conftest, where):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports alpyka_testing.hang_guard
    monkeypatch.setenv("ALPYKA_HANG_TIMEOUT", "4")
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_x="def test_fails():\n    assert 1 == 2\n")
    start = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "alpyka_testing.hang_guard", "-p", "no:alpyka", "-p", "no:cacheprovider", timeout=CHILD_S
    )
    elapsed = time.monotonic() - start
    assert result.ret == 1, (result.ret, result.stdout.str(), result.stderr.str())
    err = result.stderr.str()
    assert "Timeout (0:00:04)!" in err, err
    assert "Thread 0x" in err, err
    if where == "pytest_runtest_makereport":  # every thread, with its frames
        assert where in err and err.count("Thread 0x") >= 2 and "File " in err, err
    assert elapsed < FAILED_WITHIN_S, elapsed


def test_a_longer_timeout_option_lengthens_the_guard_too(pytester, monkeypatch):
    """``--timeout 700`` (as a slow machine's run may need) moves the guard to 760 s: a guard
    still at the ini's 240 + 60 s would end such a run with a bare stack dump."""
    pytest.importorskip("pytest_timeout")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports alpyka_testing.hang_guard
    monkeypatch.delenv("ALPYKA_HANG_TIMEOUT", raising=False)
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    pytester.makeconftest("""
        import alpyka_testing.hang_guard as guard

        def pytest_sessionstart(session):
            print("GUARD LIMIT", guard._limit[0])
    """)
    pytester.makepyfile(test_x="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p",
        "alpyka_testing.hang_guard",
        "-p",
        "no:alpyka",
        "-p",
        "no:cacheprovider",
        "--timeout",
        "700",
        "-s",
        timeout=CHILD_S,
    )
    assert result.ret == 0, result.stdout.str()
    assert "GUARD LIMIT 760.0" in result.stdout.str(), result.stdout.str()


def test_a_test_with_a_longer_timeout_of_its_own_is_not_cut_short(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports alpyka_testing.hang_guard
    # the start and the collection must fit in the guard's limit: they took over 5 s with both
    # cores busy (two busy loops beside other work)
    monkeypatch.setenv("ALPYKA_HANG_TIMEOUT", "15")
    pytester.makepyfile(
        test_x="""
        import time
        import pytest

        @pytest.mark.timeout(60)
        def test_slow_but_declared():
            time.sleep(17)
    """
    )
    result = pytester.runpytest_subprocess(
        "-p", "alpyka_testing.hang_guard", "-p", "no:alpyka", "-p", "no:cacheprovider", timeout=CHILD_S
    )
    assert result.ret == 0, (result.stdout.str(), result.stderr.str())
    assert "Timeout" not in result.stderr.str()


def test_a_hung_test_under_xdist_names_itself_with_every_threads_stack(pytester, monkeypatch):
    """pytest-timeout's thread method writes to a worker's terminal, which reaches nobody under
    pytest-xdist: the run said only "node down: Not properly terminated" (the GPU machine's
    lost workers). The worker's own timer reports the test and every stack on the run's stderr."""
    pytest.importorskip("pytest_timeout")
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports alpyka_testing.hang_guard
    opts = _project_timeout_options()
    opts["timeout"] = 3
    pytester.makeini(
        "[pytest]\n" + "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in opts.items())
    )
    pytester.makepyfile(
        test_x="""
        import threading

        def bystander():
            threading.Event().wait()

        def test_hangs():
            print("what the test printed")
            threading.Thread(target=bystander, daemon=True).start()
            threading.Event().wait()

        def test_fine():
            pass
    """
    )
    start = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "alpyka_testing.hang_guard", "-p", "no:alpyka", "-p", "no:cacheprovider", timeout=CHILD_S
    )
    elapsed = time.monotonic() - start
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, out
    assert "Timeout (>3s) from pytest-timeout in worker gw" in out and "test_x.py::test_hangs" in out, out
    assert "what the test printed" in out, out
    assert 'test_x.py", line 9 in test_hangs' in out and "line 4 in bystander" in out, out  # every thread
    result.assert_outcomes(passed=1, failed=1)
    assert elapsed < FAILED_WITHIN_S, elapsed


_BUILDS = """
    import time
    import pytest
    from portable.compiler import trust  # imported at collection, as the suite's conftest does
    from alpyka_testing.artifact_cache import cached_dir

    @pytest.fixture(scope="session")
    def artifact():
        def build(d):
            time.sleep({build_s})  # a cold AOTInductor build on a busy machine
            (d / "made").write_text("yes")
        return cached_dir("slow", "k1", build)

    def test_uses_it(artifact):
        assert (artifact / "made").read_text() == "yes"
        time.sleep(1)  # the test's own time runs again, in full, after the build
"""


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["plain", "xdist"])
def test_an_artifacts_build_does_not_count_against_the_test_that_needs_it(pytester, monkeypatch, tmp_path, workers):
    """A slow fixture (an AOTInductor build) must not kill a worker: the build runs outside the
    test's time limit (a 3 s limit, a 6 s build, here). The child imports portable at collection,
    as the suite does: imported by the fixture's cache check, it took the 3 s at a load of 12."""
    pytest.importorskip("pytest_timeout")
    if workers:
        pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    opts = {**_project_timeout_options(), "timeout": 3}
    pytester.makeini(
        "[pytest]\n" + "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in opts.items())
    )
    pytester.makepyfile(test_x=_BUILDS.format(build_s=6))
    result = pytester.runpytest_subprocess(
        *workers, "-p", "alpyka_testing.hang_guard", "-p", "no:alpyka", "-p", "no:cacheprovider", timeout=CHILD_S
    )
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0 and "Timeout" not in out, out
    result.assert_outcomes(passed=1)


def test_a_hung_build_still_fails_the_run_with_every_stack(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    pytester.makeconftest("import alpyka_testing.hang_guard as g\ng.BUILD_LIMIT_S = 4\n")
    pytester.makepyfile(test_x=_BUILDS.format(build_s=600))
    start = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "alpyka_testing.hang_guard", "-p", "no:alpyka", "-p", "no:cacheprovider", timeout=CHILD_S
    )
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0 and "Timeout" in out and "in build" in out, out  # the build's stack
    assert time.monotonic() - start < FAILED_WITHIN_S
