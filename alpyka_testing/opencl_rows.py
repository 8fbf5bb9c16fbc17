"""A pytest plugin that keeps the OpenCL rows only: the sanitizer pass's child run
(tests/kernels/test_sanitizer.py, ``-p alpyka_testing.opencl_rows``) checks the kernels its files
launch on Oclgrind; their host-only tests (IR walks, type rules, error messages, compile-cost
checks on cpu_serial and cpu_threads) launch nothing there and run in the suite itself."""

from __future__ import annotations


def is_opencl_row(item) -> bool:
    """Whether ``item`` is a test's row for the ``opencl`` backend."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "opencl"


def pytest_collection_modifyitems(config, items):
    drop = [it for it in items if not is_opencl_row(it)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if is_opencl_row(it)]
