"""A wait for a tiny known OpenCL launch follows how busy other processes keep the cores
(backends/_other_load.py): joined while they leave fewer than 1.5 cores free (Intel's CPU runtime
then runs the command in the waiting thread: 1.2x raw pyopencl + ``finish`` where the
interruptible wait took 7-600x), interruptible where they leave more (the runtime's worker ends a
tiny command first: the join took 1.4-2.0x raw there, the interruptible wait 0.8-1.0x), in any
thread; a longer known launch is joined either way. A Ctrl-C reaches the main thread within a
second in either mode. The signal itself, on fixed samples:
tests/backends/test_other_load.py."""

import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.opencl_launches import add_v
from alpyka_testing.interrupt import interrupt_child
from alpyka_testing.threads import run_threads
from portable.spi import queue_impl

pytestmark = pytest.mark.alpyka_backends("opencl")

ROOT = Path(__file__).resolve().parents[2]
#: from SIGINT to the child's "interrupted" line
INTERRUPT_LIMIT_S = 1.0


class _Switch:
    """A load whose ``busy`` the test sets (an :class:`~backends._other_load.OtherLoad` stand-in)."""

    def __init__(self) -> None:
        self.busy, self.left = True, math.inf  # (never a reading)

    def used_up(self, now: float) -> None:
        self.left = math.inf

    def stalled(self, now: float) -> None:  # (a wait on a busy test machine may stall: ignored here)
        pass


def _blocking_queue_counting_interruptible(dev, load, monkeypatch, tiny=60.0):
    """A blocking queue of ``dev`` waiting by ``load``, and the list its interruptible waits
    append to; a run shorter than ``tiny`` seconds counts as tiny (the choice is tested, not the
    bound: on a busy machine a tiny wait's tail can pass it)."""
    import backends._opencl_waits as ow

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the main thread's choice is tested; this test runs in another thread")
    monkeypatch.setattr(ow, "JOIN_LIMIT_S", 60.0)  # every run counts as short
    monkeypatch.setattr(ow, "TINY_WAIT_S", tiny)
    monkeypatch.setattr(ow, "other_load", load)
    q = pk.Queue(dev, blocking=True)
    waits, calls = queue_impl(q).waits, []
    assert waits.load is load
    real = waits.interruptible
    monkeypatch.setattr(waits, "interruptible", lambda ev: (calls.append(ev), real(ev)))
    return q, calls


@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_short_known_work_is_joined_on_busy_cores_and_waited_interruptibly_on_free_ones(which, monkeypatch):
    devices = pk.devices("opencl")
    if which >= len(devices):
        pytest.skip("one OpenCL device here")
    dev, load = devices[which], _Switch()
    q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    for _ in range(3):  # the checked path twice, the fast launcher's first run: unknown
        pk.exec(q, wd, add_v, out, one)
    n = len(calls)
    for busy, interruptible in ((True, 0), (False, 4), (True, 0), (False, 4)):
        load.busy = busy
        for _ in range(4):
            pk.exec(q, wd, add_v, out, one)
        assert len(calls) - n == interruptible, f"busy={busy}"
        n = len(calls)
    host = np.empty(8, np.float32)
    pk.memcpy(q, host, out)
    np.testing.assert_array_equal(host, 3 + 16)


def test_a_known_launch_that_is_not_tiny_joins_on_free_cores_too(monkeypatch):
    """Its wait's end is then exact and costs no CPU (polling a longer command would)."""
    dev, load = pk.device("opencl"), _Switch()
    load.busy = False
    q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch, tiny=0.0)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, one)
    n = len(calls)
    for _ in range(4):
        pk.exec(q, wd, add_v, out, one)
    assert len(calls) == n


def test_another_thread_waits_for_tiny_work_interruptibly_on_free_cores_only(monkeypatch):
    dev, load = pk.device("opencl"), _Switch()
    q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    counts = []

    def work(_: int) -> None:
        for _ in range(3):
            pk.exec(q, wd, add_v, out, one)
        for busy in (True, False):
            load.busy, n = busy, len(calls)
            for _ in range(4):
                pk.exec(q, wd, add_v, out, one)
            counts.append(len(calls) - n)

    run_threads(work, 1)
    assert counts == [0, 4]


def test_a_stalled_wait_on_cores_read_as_free_makes_them_busy_for_a_while(monkeypatch):
    """Cores busy with this process's own threads (a long kernel of another queue on the
    runtime's workers) read as free; a tiny command's wait that then stalls past 1 ms makes the
    next ones join for ``HOLD_S``."""
    from backends import _other_load as ol
    from backends._opencl_waits import STALLED_S

    free = "cpu  0 0 0 {i} 0 0 0 0 0 0\n"  # every tick idle: no other process
    ticks = [0]

    def read() -> str:
        ticks[0] += 1000
        return free.format(i=ticks[0])

    load = ol.OtherLoad(read=read, cpus=None, cpu_time=lambda: 0.0)
    load.update(time.perf_counter())
    assert not load.busy
    dev = pk.device("opencl")
    q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch)
    waits = queue_impl(q).waits
    slow = waits.interruptible
    monkeypatch.setattr(waits, "interruptible", lambda ev: (slow(ev), time.sleep(3 * STALLED_S)))
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    for _ in range(3):  # the checked path twice, the fast launcher's first run: unknown
        pk.exec(q, wd, add_v, out, one)
    n = len(calls)
    pk.exec(q, wd, add_v, out, one)  # tiny, on free cores: interruptible, and it stalls
    assert len(calls) == n + 1 and load.busy
    for _ in range(4):
        pk.exec(q, wd, add_v, out, one)
    assert len(calls) == n + 1, "waited interruptibly on cores held busy"


def test_tiny_known_work_behind_an_unfinished_command_learns_no_time_on_free_cores(monkeypatch):
    """On free cores a tiny known copy or launch is waited for interruptibly; behind an unfinished
    command of its queue (a kernel a caught Ctrl-C left running, another thread's launch) that
    wait's time is the work ahead's too: it is neither learned as the work's time nor taken for a
    stall of the cores (a user event no one has completed stands for the unfinished command)."""
    import pyopencl as cl

    dev, load, stalls = pk.device("opencl"), _Switch(), []
    load.busy, load.stalled = False, stalls.append
    q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch)
    impl = queue_impl(q)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    host, wd, one = np.zeros(8, np.float32), pk.WorkDiv(1, 1, 8), np.float32(1)
    for _ in range(3):  # known from here on: the copy and the launch
        pk.memcpy(q, out, host)
        pk.exec(q, wd, add_v, out, one)
    copy_took = impl.transfer_took("h2d", host.nbytes)
    known = copy_took[0]
    for i, op in enumerate([lambda: pk.memcpy(q, out, host), lambda: pk.exec(q, wd, add_v, out, one)]):
        user = cl.UserEvent(dev.native.context)
        impl.last_event = cl.enqueue_marker(impl.cq, wait_for=[user])  # an unfinished command ahead
        threading.Timer(0.3, user.set_status, (cl.command_execution_status.COMPLETE,)).start()
        before = len(calls)
        stalls.clear()  # (the tiny waits before may stall on a busy machine)
        op()
        assert len(calls) == before + 1, i
        assert copy_took[0] == known, "the wait for the work ahead was learned as the copy's time"
        assert stalls == [], f"{i}: the wait for the work ahead was taken for a stall of the cores"
    got = np.empty(8, np.float32)
    pk.memcpy(q, got, out)
    np.testing.assert_array_equal(got, 1)  # the last copy, then one launch


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat: every short wait joins")
def test_a_process_spinning_on_every_core_makes_the_main_thread_join(monkeypatch):
    """The real signal: with a spinner per core, short known launches join (after the first
    window's sample; other work on the machine only adds to the spinners)."""
    from backends._other_load import OtherLoad

    dev = pk.device("opencl")
    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.3)  # they run
        load = OtherLoad()
        q, calls = _blocking_queue_counting_interruptible(dev, load, monkeypatch)
        out = pk.Buffer(dev, 8, np.float32, queue=q)
        wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
        for _ in range(3):
            pk.exec(q, wd, add_v, out, one)
        deadline = time.perf_counter() + 60  # a hang guard on a busy machine
        while load.others is None and time.perf_counter() < deadline:  # sampled once
            pk.exec(q, wd, add_v, out, one)
        n = len(calls)
        for _ in range(20):
            pk.exec(q, wd, add_v, out, one)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert load.others is not None and load.busy, load.others
    assert len(calls) == n, "a short known launch waited interruptibly while every core was busy"


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import portable as pk
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    @pk.kernel
    def spin(acc, out, iters):
        for b in acc.uniform_elements(out.shape[0]):
            s = 0.0
            for k in range(iters[0]):
                s = s * 0.999999 + 1.0
            out[b] = s

    which, cores, case = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ow.other_load = FixedLoad(busy=cores == "busy")
    ow.TINY_WAIT_S = 1.0  # the short runs count as tiny, whatever a busy machine makes of them
    dev = pk.devices("opencl")[which]
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, (4000,), np.float64, queue=q)
    iters = pk.Buffer(dev, (1,), np.int64, queue=q)
    wd = pk.valid_workdiv(dev, 4000)
    pk.memcpy(q, iters, np.array([10], np.int64))
    for _ in range(6):  # short runs of the same launch: known short from the third on
        pk.exec(q, wd, spin, out, iters)
    pk.memcpy(q, iters, np.array([20_000_000], np.int64))  # 20-40 s on 2 cores
    if case == "new_args":
        out = pk.Buffer(dev, (4000,), np.float64, queue=q)
    print("launching", flush=True)
    try:
        pk.exec(q, wd, spin, out, iters)
        print("the kernel ended before the Ctrl-C", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
""")

#: a joined wait of known-short work with the same arguments is waited out (docs/backends.md):
#: on busy cores only a launch with new arguments is interruptible
_CASES = [("free", "same_args"), ("free", "new_args"), ("busy", "new_args")]


@pytest.mark.parametrize("cores,case", _CASES, ids=[f"{c}-{a}" for c, a in _CASES])
@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_ctrl_c_reaches_a_long_launch_within_a_second(which, cores, case, tmp_path):
    if which >= len(pk.devices("opencl")):
        pytest.skip("one OpenCL device here")
    script = tmp_path / "choice_child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = interrupt_child([sys.executable, str(script), str(which), cores, case], env, running_s=1.0, exit_wait_s=60)
    interrupted = run.said("interrupted")
    assert interrupted is not None, (run.rc, run.lines, run.err[-3000:])
    assert interrupted - run.sent < INTERRUPT_LIMIT_S, f"Ctrl-C raised {interrupted - run.sent:.2f} s after the signal"
