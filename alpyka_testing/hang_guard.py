"""A pytest plugin of alpyka's suite: a hang anywhere in the run fails it with every thread's stack.

pytest-timeout (the ``timeout`` ini option) bounds each test, its fixtures and its teardown. It
does not see what happens between tests: collection, report-making (a traceback's repr, a
finalizer that the collector runs while a failure is formatted), the session's teardown, the
terminal summary, interpreter exit. This guard does: faulthandler's watchdog, a C thread that
needs neither the GIL nor signal delivery, is re-armed at every step of the run; when no step
completes within ``ALPYKA_HANG_TIMEOUT`` seconds (default: the test timeout plus 60 s; while a
test with a longer ``@pytest.mark.timeout`` runs, that plus 60 s), it prints the stack of every
thread and ends the process with exit code 1.

Under pytest-xdist, pytest-timeout's thread method writes its stacks to the worker's terminal,
which reaches nobody: the run said only "node down: Not properly terminated". In a worker the
timer is this plugin's (:func:`pytest_timeout_set_timer`): the same limit, the test's id, its
captured output and every thread's stack go to the worker's stderr, which is the run's.

A slow artifact built once for the whole run (an AOTInductor package, the demo's trained model:
``alpyka_testing.artifact_cache``) is built inside :func:`outside_the_test_timeout`: the build
does not count against the test that happens to need it first (minutes on a busy machine would
end that test's worker), and has a limit of its own, :data:`BUILD_LIMIT_S`, past which the
guard prints every stack and ends the run as for any hang.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

ENV = "ALPYKA_HANG_TIMEOUT"
_limit = [300.0]
_item_limit = [0.0]  # the running test's own longer limit (its timeout mark + 60 s), else 0
_item: list[Any] = [None]  # the test running now (its timer is paused while an artifact builds)
#: how long one artifact's build may take (a cold AOTInductor package: ~40 s on 2 busy cores)
BUILD_LIMIT_S = 900.0


def _arm(at_least: float = 0.0) -> None:
    limit = max(_limit[0], at_least)
    if _limit[0] > 0:
        faulthandler.dump_traceback_later(limit, exit=True, file=sys.__stderr__)


def _own_timeout(item: pytest.Item) -> float:
    """A test's own ``@pytest.mark.timeout(s)`` plus the guard's margin (0 without one)."""
    mark = item.get_closest_marker("timeout")
    if mark is None:
        return 0.0
    value = mark.args[0] if mark.args else mark.kwargs.get("timeout", 0)
    try:
        return float(value) + 60.0
    except (TypeError, ValueError):
        return 0.0


def _test_timeout(config: pytest.Config) -> float:
    """pytest-timeout's limit as it reads it (``--timeout``, ``PYTEST_TIMEOUT``, the ini option);
    0 without pytest-timeout or a limit."""
    try:
        from pytest_timeout import get_env_settings

        return float(get_env_settings(config).timeout or 0)
    except Exception:  # noqa: BLE001 - not installed, or a value it rejects (it reports that itself)
        return 0.0


def pytest_configure(config: pytest.Config) -> None:
    raw = os.environ.get(ENV)
    if raw:
        from portable.env import env_number  # only then: the guard itself imports nothing of alpyka

        _limit[0] = env_number(ENV, 0.0, float, above=0)
    else:
        _limit[0] = max(_test_timeout(config), 240.0) + 60.0
    _arm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _item_limit[0] = _own_timeout(item)  # a test that declares a longer timeout gets it
    _item[0] = item
    _arm(_item_limit[0])
    try:
        yield
    finally:
        _item[0] = None
        _item_limit[0] = 0.0
        _arm()


@contextlib.contextmanager
def outside_the_test_timeout(limit: float | None = None) -> Iterator[None]:
    """Run the block (an artifact's build) with the running test's timer paused and the guard
    armed for ``limit`` seconds (default :data:`BUILD_LIMIT_S`) instead; afterwards the test's
    timer starts again, in full. Outside a test (or without pytest-timeout) the block only gets
    the guard's limit."""
    limit = BUILD_LIMIT_S if limit is None else limit
    item = _item[0]
    settings = None
    if item is not None and getattr(item, "cancel_timeout", None) is not None:
        try:
            from pytest_timeout import _get_item_settings

            settings = _get_item_settings(item)
        except Exception:  # noqa: BLE001 - a pytest-timeout without it: the test's timer runs on
            settings = None
    if settings is not None:
        item.ihook.pytest_timeout_cancel_timer(item=item)
        item.cancel_timeout = None
    real_err = _uncaptured_stderr(item)
    if _limit[0] > 0:
        faulthandler.dump_traceback_later(limit, exit=True, file=real_err)
    try:
        yield
    finally:
        _arm(_item_limit[0])
        if settings is not None:
            item.ihook.pytest_timeout_set_timer(item=item, settings=settings)
        if real_err is not sys.__stderr__:
            real_err.close()


def _uncaptured_stderr(item: Any) -> Any:
    """A file onto the process's real stderr while a test runs (its fd 2 then goes to pytest's
    capture, which nobody sees once the process ends): a dup of the descriptor pytest saved."""
    try:
        capman = item.config.pluginmanager.getplugin("capturemanager")
        # pytest's FDCapture keeps the original fd 2 and offers no public way to reach it
        fd = capman._global_capturing.err.targetfd_save  # noqa: SLF001 - pytest's own, no public API
        return os.fdopen(os.dup(fd), "w")
    except Exception:  # noqa: BLE001 - no capture (-s), no test, another pytest: fd 2 is the real one
        return sys.__stderr__


def pytest_runtest_logreport(report):
    _arm(_item_limit[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    _arm()
    yield
    _arm()


def pytest_terminal_summary(terminalreporter):
    _arm()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    _arm()  # interpreter exit (atexit hooks, finalizers) is guarded too; a normal exit cancels it


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's thread method, in an xdist worker: a timer that reports to stderr."""
    if settings.method != "thread" or not hasattr(item.config, "workerinput"):
        return None  # pytest-timeout's own timer
    timer = threading.Timer(settings.timeout, _timed_out, (item, settings.timeout))
    timer.daemon = True
    timer.name = f"alpyka-timeout {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # what pytest-timeout's pytest_timeout_cancel_timer calls
    timer.start()
    return True


def _timed_out(item: pytest.Item, timeout: float) -> None:
    """The test ran out of time: its id, captured output and every thread's stack to the
    worker's own stderr (capture suspended), then end the worker as pytest-timeout does."""
    if _debugging():
        return  # pytest-timeout's rule: a session under a debugger is not cut short
    err_file = sys.__stderr__
    try:
        captured, failure = "", ""
        try:  # first, so that what follows reaches the real stderr, not the test's capture
            capman = item.config.pluginmanager.getplugin("capturemanager")
            if capman is not None:
                capman.suspend_global_capture(item)
                out, err = capman.read_global_capture()
                captured = "".join(
                    f"{'~' * 20} Captured {name}\n{text}\n" for name, text in (("stdout", out), ("stderr", err)) if text
                )
        except Exception:  # noqa: BLE001 - the stacks matter more than the captured output
            failure = traceback.format_exc()
        worker = item.config.workerinput.get("workerid", "?")
        err_file.write(
            f"\n{'+' * 20} Timeout (>{timeout:g}s) from pytest-timeout in worker {worker}: "
            f"{item.nodeid}\n{captured}{failure}"
        )
        err_file.flush()
        faulthandler.dump_traceback(file=err_file, all_threads=True)
        err_file.write(f"{'+' * 20} Timeout: {item.nodeid}\n")
    except Exception:  # noqa: BLE001 - say what failed; the worker ends either way
        traceback.print_exc(file=err_file)
    finally:
        err_file.flush()
        os._exit(1)


def _debugging() -> bool:
    """Whether a debugger is attached (pytest-timeout's own test, where it is installed)."""
    try:
        from pytest_timeout import is_debugging
    except ImportError:
        return False
    return bool(is_debugging())
