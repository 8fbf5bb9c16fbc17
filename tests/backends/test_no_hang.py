"""No hang after a failure: a failed build and a failed launch, with copies and host functions
in flight, leave nothing that the garbage collector or the interpreter's exit would wait for.

Each case runs in a child process (a hang there cannot take the suite with it): the child
injects the failures on one backend, drops every object, times ``gc.collect()``, checks the
queue's device is still usable, and exits; the parent bounds the whole child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import portable as pk

ROOT = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S = 120
GC_LIMIT_S = 5.0

_PRELUDE = """
import gc, json, os, sys, time
import numpy as np
name = sys.argv[1]
if name in ("cuda", "rocm"):
    from portable import _registry
    _registry.emulate([name])
import portable as pk
from backends._c_build import KernelBuildError

@pk.kernel
def fill(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = i + 1

@pk.kernel
def overrun(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i + 1] = i          # one past the end at i = n - 1: a range-checked launch fails

def busy(seconds):
    def run():
        time.sleep(seconds)
    return run

dev = pk.device(name)
n = 1 << 16
"""

_BUILD_SEAMS = {
    "cpu_serial": ("backends._host_launch", "load_generated_module"),
    "cpu_threads": ("backends._host_launch", "load_generated_module"),
    "opencl": ("backends._opencl_launch", "build_program"),
    "cuda": ("backends._cupy_launch", "build_function"),
    "rocm": ("backends._cupy_launch", "build_function"),
}

_SCENARIO = """
import importlib
seam_module, seam_name = {seam!r}
mod = importlib.import_module(seam_module)
original = getattr(mod, seam_name)

def broken(*args, **kwargs):
    raise KernelBuildError("injected: the device compiler failed")

q = pk.Queue(dev)
host = np.arange(n, dtype=np.float32)
back = np.zeros(n, np.float32)
buf = pk.Buffer(dev, (n,), np.float32)
pk.memcpy(q, buf, host)                   # copies and host functions in flight ...
q.enqueue(busy(0.3))
pk.memcpy(q, back, buf)
setattr(mod, seam_name, broken)           # ... when the build fails
try:
    pk.exec(q, pk.valid_workdiv(dev, n), fill, buf, n)
    raise SystemExit("the injected build failure was not raised")
except KernelBuildError:
    pass
setattr(mod, seam_name, original)
q.enqueue(busy(0.2))
os.environ["ALPYKA_DEBUG"] = "1"          # a launch that fails on the device
pk.exec(q, pk.valid_workdiv(dev, n), overrun, buf, n)
pk.memcpy(q, back, buf)
del os.environ["ALPYKA_DEBUG"]
launch_error = None
if {wait!r}:
    try:
        q.wait()
    except Exception as exc:
        launch_error = " ".join(type(e).__name__ for e in (exc, exc.__cause__) if e is not None)
del q, buf, host, back                    # dropped with work possibly in flight
t0 = time.perf_counter()
gc.collect()
gc_s = time.perf_counter() - t0
q = pk.Queue(dev)                         # the device still works
out = pk.Buffer(dev, (n,), np.float32)
pk.exec(q, pk.valid_workdiv(dev, n), fill, out, n)
res = np.zeros(n, np.float32)
pk.memcpy(q, res, out)
q.wait()
assert res[0] == 1 and res[-1] == n, res
print(json.dumps({{"gc_s": gc_s, "launch_error": launch_error}}))
"""


def _run_child(script: str, backend: str, tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the child imports portable, backends and alpyka_testing
    path = tmp_path / "child.py"  # kernels are read from their file
    path.write_text(script)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(path), backend],
            capture_output=True,
            text=True,
            timeout=CHILD_LIMIT_S,
            env=env,
            cwd=str(ROOT),
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child hung for {CHILD_LIMIT_S} s (gc, exit or the device):\n{exc.stderr}")
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["child_s"] = time.monotonic() - start
    return result


@pytest.mark.parametrize("wait", [True, False], ids=["waited", "dropped_in_flight"])
def test_failed_build_and_launch_leave_nothing_to_wait_for(backend, wait, tmp_path):
    pk.device(backend)  # skipped with its reason where the backend is unavailable
    script = textwrap.dedent(_PRELUDE) + textwrap.dedent(_SCENARIO.format(seam=_BUILD_SEAMS[backend], wait=wait))
    result = _run_child(script, backend, tmp_path)
    assert result["gc_s"] < GC_LIMIT_S, result
    if wait:
        assert "KernelIndexError" in result["launch_error"], result


_NEVER_COMPLETES = """
import pyopencl as cl
from backends import _retention
q = pk.Queue(dev)
cq = q.native_handle
user = cl.UserEvent(dev.native.context)       # a command that will never complete ...
cl.enqueue_barrier(cq, wait_for=[user])
host = np.ones(n, np.float32)
buf = pk.Buffer(dev, (n,), np.float32)
pk.memcpy(q, buf, host)                        # ... with transfers (pyopencl NannyEvents) behind it
pk.memcpy(q, host, buf)
del q, buf, host
t0 = time.perf_counter()
gc.collect()
gc_s = time.perf_counter() - t0
time.sleep(3 * _retention.REAP_INTERVAL_S)
print(json.dumps({"gc_s": gc_s, "buried": _retention.reap()}))
"""


@pytest.mark.alpyka_backends("opencl")
def test_a_command_that_never_completes_blocks_neither_gc_nor_exit(backend, tmp_path):
    """The class of the reported hang: pyopencl's transfer events wait in their destructor, so a
    queue collected with a transfer that can never run must not destroy them (nor may exit)."""
    pk.device(backend)
    script = textwrap.dedent(_PRELUDE) + textwrap.dedent(_NEVER_COMPLETES)
    result = _run_child(script, backend, tmp_path)
    assert result["gc_s"] < GC_LIMIT_S, result
    assert result["buried"] >= 1, result  # kept by the reaper, not waited for
    assert result["child_s"] < CHILD_LIMIT_S / 2, result  # and the interpreter's exit did not wait
