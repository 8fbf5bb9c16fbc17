"""Ctrl-C during an OpenCL program's build is honoured at once. The CPU runtimes compile inside
``clBuildProgram``, in the calling thread (PoCL's LLVM and Intel's compiler are linked into the
runtime: no child process to stop), and pyopencl cannot abandon a build, so the KeyboardInterrupt
waited for the build's end (1.7-2.4 s for the examples' kernels on PoCL; here a program built for
tens of seconds). The main thread now hands the build to a helper thread and waits interruptibly
(backends/_off_main.py); the process ends killed by SIGINT, as an uncaught Ctrl-C ends it."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

pytest.importorskip("pyopencl")

ROOT = Path(__file__).resolve().parents[2]
#: from SIGINT to the child's end (about 0.1 s idle); the builds below take 20-30 s on a free core
EXIT_LIMIT_S = 8.0

CHILD = textwrap.dedent("""
    import sys
    from backends import _opencl_devices

    _opencl_devices.register_runtimes()
    import pyopencl as cl

    platforms = [p for p in cl.get_platforms() if sys.argv[1] in p.name.lower()]
    if not platforms:
        print("no such platform", flush=True)
        print("launching", flush=True)
        sys.exit(0)
    device = platforms[0].get_devices()[0]
    context = cl.Context([device])
    source = "\\n".join(
        f"__kernel void k{i}(__global float* a) {{ int g = get_global_id(0); float s = a[g]; "
        f"for (int j = 0; j < {i % 5 + 2}; ++j) s = sin(s * {i}.0f + j + {sys.argv[3]}) * cos(s + j); a[g] = s; }}"
        for i in range(int(sys.argv[2]))
    )
    print("launching", flush=True)
    _opencl_devices.build(cl, context, source, [device])
    print("the build ended before the Ctrl-C", flush=True)
""")


@pytest.mark.parametrize(("runtime", "kernels"), [("portable computing language", 6000), ("intel", 600)])
def test_ctrl_c_during_a_build_ends_the_program_at_once(tmp_path, runtime, kernels):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "ALPYKA_CACHE_DIR": str(tmp_path),  # (no program cache entry left for other runs)
        "PYOPENCL_NO_CACHE": "1",
        "POCL_CACHE_DIR": str(tmp_path / "pocl"),  # PoCL's own cache: a new source is built anew
        "POCL_KERNEL_CACHE": "0",
    }
    salt = str(time.time_ns() % 100_000)  # (no runtime's cache knows the program)
    run = interrupt_child(
        [sys.executable, "-c", CHILD, runtime, str(kernels), salt], env, ready="launching", exit_wait_s=60
    )
    if run.said("no such platform") is not None:
        pytest.skip(f"no {runtime} OpenCL platform")
    assert run.said("the build ended before the Ctrl-C") is None, "the build was too short for the test"
    assert run.rc == -signal.SIGINT, (run.rc, run.err[-3000:])
    took = run.ended - run.sent
    assert took < EXIT_LIMIT_S, f"the Ctrl-C waited {took:.1f} s (for the build's end)"
