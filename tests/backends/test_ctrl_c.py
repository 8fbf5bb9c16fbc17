"""Ctrl-C stops a program whose kernel runs for a minute, on every backend: the KeyboardInterrupt
reaches the main thread while it waits (a blocking launch, ``q.wait()``, ``ev.wait()``), and the
process then ends without waiting for the kernel (a CPU kernel cannot be preempted, a device
kernel need not be waited for: both are left to the OS at exit; docs/runtime.md, "Exit and
Ctrl-C").

Each case is a child process; the limits measure those two things, with headroom for a machine
whose cores are busy (the child's own end, the interpreter's, takes ~0.1 s idle; on a loaded
2-core machine its garbage collections alone took 1-3 s). Before, the waits sat in
``clWaitForEvents`` until the kernel ended (OpenCL: 11-22 s) and the exit joined a queue's
worker for 10 s (cpu_serial: 11-12 s). "repeated": the long launch comes after short runs of
the same launch with another scalar value, on a blocking queue; "repeated_wait": the same with
``q.wait()`` on a non-blocking one (an OpenCL queue waits for work known short in the runtime's
own wait, which no Ctrl-C interrupts: new arguments must make it unknown again).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

ROOT = Path(__file__).resolve().parents[2]
#: from SIGINT to the child's "interrupted" line: the wait lets the KeyboardInterrupt through
INTERRUPT_LIMIT_S = 5.0
#: from SIGINT to the child's exit: nothing waits for the kernel (about 1 s idle)
EXIT_LIMIT_S = 8.0

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    name, mode = sys.argv[1], sys.argv[2]
    if name in ("cuda", "rocm"):
        try:
            import cupy  # noqa: F401
        except ImportError:
            from portable import _registry
            _registry.emulate([name])
    import portable as pk

    from alpyka_testing.spin_kernel import spin

    dev = pk.device(name)
    q = pk.Queue(dev, blocking=mode in ("blocking", "repeated"))
    small = pk.Buffer(dev, (4,), np.float64)
    pk.exec(q, pk.valid_workdiv(dev, 4), spin, small, 1000)  # compiled before the clock starts
    q.wait()
    out = pk.Buffer(dev, (4000,), np.float64)
    wd = pk.valid_workdiv(dev, 4000)
    if mode.startswith("repeated"):  # the same launcher, short, many times: waited for joined
        for _ in range(5):
            pk.exec(q, wd, spin, out, 10)
            q.wait()
    print("launching", flush=True)
    try:
        pk.exec(q, wd, spin, out, int(sys.argv[3]))  # 20-40 s on 2 cores
        if mode in ("wait", "repeated_wait"):
            q.wait()
        elif mode == "event":
            ev = pk.Event(dev)
            q.record(ev)
            ev.wait()
        print("the kernel ended before the Ctrl-C", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise  # uncaught, as in most programs: the process ends killed by SIGINT
""")


@pytest.mark.parametrize("mode", ["blocking", "wait", "event", "repeated", "repeated_wait"])
def test_ctrl_c_stops_a_long_kernel(backend, mode, tmp_path):
    script = tmp_path / "long_kernel.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # ~10 ms a block on the CPU backends (a cpu_threads chunk, whose end a Ctrl-C waits for, is a
    # 512th of the kernel), ~20 ms on the devices: 20-40 s of work in all
    iters = 10_000_000 if backend.startswith("cpu") else 20_000_000
    run = interrupt_child([sys.executable, str(script), backend, mode, str(iters)], env, exit_wait_s=EXIT_LIMIT_S + 30)
    if run.rc is None:
        pytest.fail(
            f"still running {EXIT_LIMIT_S + 30} s after Ctrl-C: {[ln for _, ln in run.lines]}\n{run.err[-3000:]}"
        )
    interrupted = run.said("interrupted")
    assert run.rc == -signal.SIGINT and interrupted is not None, (run.rc, run.lines, run.err[-3000:])
    assert interrupted - run.sent < INTERRUPT_LIMIT_S, f"Ctrl-C raised {interrupted - run.sent:.1f} s after the signal"
    assert run.ended - run.sent < EXIT_LIMIT_S, f"the process ended {run.ended - run.sent:.1f} s after the signal"
    assert "KeyboardInterrupt" in run.err and "Exception ignored" not in run.err, run.err[-3000:]


class _SlowNative:
    """A CUDA/HIP event or stream whose work ends ``seconds`` from now; its ``synchronize`` stands
    for the runtime's blocking wait (a thread inside it runs no Python, so no Ctrl-C either): it
    must only be called once the work is done."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds
        self.early_syncs = 0

    @property
    def done(self) -> bool:
        return time.monotonic() >= self.ends

    def synchronize(self) -> None:
        if not self.done:
            self.early_syncs += 1


def test_cuda_and_hip_waits_poll_instead_of_blocking_in_the_runtime():
    """``cudaEventSynchronize`` / ``cudaStreamSynchronize`` hold the waiting thread in the runtime
    until the kernel ends: the CUDA/HIP queue's waits poll ``done`` with short sleeps first
    (Ctrl-C is raised between polls), and synchronize only to report an error."""
    import types

    from backends._cupy_queue import CupyQueue

    event = _SlowNative(0.3)
    CupyQueue.sync_native(None, types.SimpleNamespace(recorded=True, event=event))  # ev.wait()
    stream = _SlowNative(0.3)
    queue = types.SimpleNamespace(_lock=threading.Lock(), _ticket=0, _done=0, stream=stream)
    CupyQueue.finish(queue)  # q.wait(), a blocking queue's launch
    assert event.done and stream.done
    assert event.early_syncs == 0 and stream.early_syncs == 0, "waited inside the runtime's blocking wait"
