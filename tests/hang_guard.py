"""A pytest plugin of alpyka's suite: a hang anywhere in the run fails it with every thread's stack.

pytest-timeout (the ``timeout`` ini option) bounds each test, its fixtures and its teardown. It
does not see what happens between tests: collection, report-making (a traceback's repr, a
finalizer that the collector runs while a failure is formatted), the session's teardown, the
terminal summary, interpreter exit. This guard does: faulthandler's watchdog, a C thread that
needs neither the GIL nor signal delivery, is re-armed at every step of the run; when no step
completes within ``ALPYKA_HANG_TIMEOUT`` seconds (default: the test timeout plus 60 s), it
prints the stack of every thread and ends the process with exit code 1.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

ENV = "ALPYKA_HANG_TIMEOUT"
_limit = [300.0]


def _arm() -> None:
    if _limit[0] > 0:
        faulthandler.dump_traceback_later(_limit[0], exit=True, file=sys.__stderr__)


def pytest_configure(config: pytest.Config) -> None:
    raw = os.environ.get(ENV)
    if raw:
        _limit[0] = float(raw)
    else:
        try:
            per_test = float(config.getini("timeout") or 0)
        except (ValueError, KeyError):
            per_test = 0.0
        _limit[0] = max(per_test, 240.0) + 60.0
    _arm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 - pytest's hook signature
    _arm()
    yield
    _arm()


def pytest_runtest_logreport(report):  # noqa: ARG001
    _arm()


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    _arm()
    yield
    _arm()


def pytest_terminal_summary(terminalreporter):  # noqa: ARG001
    _arm()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):  # noqa: ARG001
    _arm()  # interpreter exit (atexit hooks, finalizers) is guarded too; a normal exit cancels it
