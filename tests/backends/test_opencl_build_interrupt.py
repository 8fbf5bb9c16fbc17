"""Ctrl-C during an OpenCL program's build is honoured at once. The CPU runtimes compile inside
``clBuildProgram``, in the calling thread (PoCL's LLVM and Intel's compiler are linked into the
runtime: no child process to stop), and pyopencl cannot abandon a build, so the KeyboardInterrupt
waited for the build's end (1.7-2.4 s for the examples' kernels on PoCL; here a program built for
tens of seconds). The main thread now hands the build to a helper thread and waits interruptibly
(backends/_off_main.py); the process ends killed by SIGINT, as an uncaught Ctrl-C ends it."""

from __future__ import annotations

import os
import signal
import subprocess
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

#: a large program for ``sys.argv[1]``'s runtime (``sys.argv[2]`` kernels, salted by ``sys.argv[3]``
#: so that no cache knows it): ``cl``, ``device``, ``context``, ``source``
PROGRAM = textwrap.dedent("""
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
""")

CHILD = PROGRAM + textwrap.dedent("""
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


#: a call of call_off_main that writes ``done`` when it ends (after ``sys.argv[2]`` s), interrupted;
#: ``after`` is written by an atexit hook that runs after _off_main's (registered before it)
LEFT_RUNNING = textwrap.dedent("""
    import atexit, sys, time
    from pathlib import Path

    out = Path(sys.argv[1])
    atexit.register(lambda: (out / "after").write_text("finalised"))
    from backends._off_main import call_off_main

    def call():
        time.sleep(float(sys.argv[2]))
        (out / "done").write_text("ended")

    print("launching", flush=True)
    try:
        call_off_main(call)
    except KeyboardInterrupt:
        if sys.argv[3] == "caught":
            print("caught", flush=True)
            sys.exit(0)
        if sys.argv[3] == "alpyka":  # alpyka's own ending (its commands, the examples)
            from portable.cli import end_by_interrupt

            end_by_interrupt("child: interrupted")
        raise
""")


def _left_running(tmp_path: Path, how: str) -> object:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return interrupt_child(
        [sys.executable, "-c", LEFT_RUNNING, str(tmp_path), "3", how], env, running_s=0.3, exit_wait_s=60
    )


def test_alpyka_ended_by_the_ctrl_c_does_not_finalise_under_the_call_left_running(tmp_path):
    """The call left running must not come back while the interpreter finalises (a thread
    returning into pybind11 then is ended by pthread_exit and std::terminate aborts the process:
    ``alpyka info`` interrupted in a probe's build, 1 run in 20 by SIGABRT). At exit a process of
    alpyka's own ending (end_by_interrupt) that the Ctrl-C ends is killed by SIGINT at once."""
    run = _left_running(tmp_path, "alpyka")
    assert run.rc == -signal.SIGINT, (run.rc, run.err[-3000:])
    assert not (tmp_path / "after").exists() and not (tmp_path / "done").exists()


def test_a_users_program_ended_by_the_ctrl_c_does_not_finalise_under_the_call_either(tmp_path):
    """A user's program (no end of alpyka's) that the Ctrl-C ends is killed by SIGINT at exit too
    (a Ctrl-C within 1 s during a build; the atexit hooks before this one are skipped: documented)."""
    run = _left_running(tmp_path, "uncaught")
    assert run.rc == -signal.SIGINT, (run.rc, run.err[-3000:])
    assert not (tmp_path / "done").exists()


def test_a_program_that_goes_on_after_the_ctrl_c_waits_for_the_call_at_exit(tmp_path):
    """A program that caught the KeyboardInterrupt and ends normally waits at exit for the call
    it left, as it would have waited for the call in the main thread (its daemon thread was cut
    off at finalisation: ``done`` never written)."""
    run = _left_running(tmp_path, "caught")
    assert run.said("caught") is not None and run.rc == 0, (run.rc, run.err[-3000:])
    assert "waiting for an OpenCL build left running by Ctrl-C" in run.err
    assert (tmp_path / "done").read_text() == "ended" and (tmp_path / "after").exists()


#: a daemon thread building a program (its first kernel's launch, say) while the main thread ends
DAEMON_BUILDS = PROGRAM + textwrap.dedent("""
    import threading, time

    def builds():
        _opencl_devices.build(cl, context, source, [device])
        print("built", flush=True)

    threading.Thread(target=builds, daemon=True).start()
    time.sleep(0.3)
    print("exiting", flush=True)
""")


@pytest.mark.parametrize(("runtime", "kernels"), [("portable computing language", 600), ("intel", 60)])
def test_a_daemon_threads_build_is_waited_for_at_exit(tmp_path, runtime, kernels):
    """A daemon thread inside a build when the program ends: the exit waits for the build (its
    thread, coming back from the runtime while the interpreter finalised, was ended by
    pthread_exit through pybind11's frames: std::terminate, SIGABRT; CI's fresh cache met it in
    test_opencl_joined_waits, whose daemon thread built its first kernel)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "ALPYKA_CACHE_DIR": str(tmp_path),
        "PYOPENCL_NO_CACHE": "1",
        "POCL_CACHE_DIR": str(tmp_path / "pocl"),
        "POCL_KERNEL_CACHE": "0",
    }
    salt = str(time.time_ns() % 100_000)
    r = subprocess.run(
        [sys.executable, "-c", DAEMON_BUILDS, runtime, str(kernels), salt],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if "no such platform" in r.stdout:  # (it says "launching" too)
        pytest.skip(f"no {runtime} OpenCL platform")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    assert r.stdout.split() == ["exiting", "built"], r.stdout
