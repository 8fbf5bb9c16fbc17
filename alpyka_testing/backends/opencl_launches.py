"""The OpenCL launch and wait tests' shared pieces (tests/backends: test_opencl_native_launch.py,
test_opencl_joined_waits.py, test_opencl_wait_choice.py and a child script): the kernel they
launch again and again, what a fast launcher runs, and a stand-in of the loader's
``clWaitForEvents`` for the native launch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import portable as pk


@pk.kernel
def add_v(acc, out, v):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] += v


def fast_runs(q: pk.Queue, kernel: Any, wd: pk.WorkDiv) -> list:
    """What the fast launchers of ``kernel`` over ``wd`` on ``q`` run (their guards' ``_run``)."""
    site = q.launch_sites[kernel].peek(id(wd))
    return [f.__closure__[f.__code__.co_freevars.index("_run")].cell_contents for f in site.fast]


def is_native(run: Any) -> bool:
    """Whether a fast launcher's run (:func:`fast_runs`) is the native launch."""
    return type(getattr(run, "__self__", None)).__name__ == "BlockingLaunch"


def wait_stand_in(wait: Callable[[Callable[[int, int], int], int, int], int]) -> Any:
    """A ctypes callback standing in for the loader's ``clWaitForEvents(n, events)``, to bind the
    native launch to: it calls ``wait(real, n, events)``, ``real`` being the loader's own (the
    events as an address), and returns its error code (0: complete). Keep it alive while bound."""
    import ctypes

    from backends._opencl_waits import opencl_library

    real = opencl_library().clWaitForEvents
    real.argtypes, real.restype = [ctypes.c_uint32, ctypes.c_void_p], ctypes.c_int32
    callback = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_void_p)
    return callback(lambda n, events: wait(real, n, events))
