"""OpenCL waits that join the runtime: the runtime's own wait in the calling thread.

On busy cores a blocking tiny launch waited for by polling or by a waiter thread took 12-1800x raw
pyopencl + ``finish`` (Intel's CPU runtime runs the command in the thread that waits for it; any
other thread must first get a core), joined it takes ~1.1-1.3x. A joined wait cannot be
interrupted, so the main thread joins only for a launch whose last run with the same objects and
scalar values was short (or, for q.wait(), known work waited for quickly before); other threads
always join (Python raises a Ctrl-C in the main thread only), through
ctypes, which takes the GIL back in plain C: a daemon thread still waiting when the interpreter
ends is stopped cleanly (pyopencl's ``Event.wait`` aborted the process there, "terminate
called").
Ctrl-C while a long launch runs after short runs of it: tests/backends/test_ctrl_c.py, "repeated*".
"""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.opencl_launches import add_v
from alpyka_testing.threads import run_threads
from portable.spi import queue_impl

pytestmark = pytest.mark.alpyka_backends("opencl")

ROOT = Path(__file__).resolve().parents[2]


def _counting_interruptible(q, monkeypatch) -> list:
    """Count the waits of ``q`` that take the interruptible path (handed or polled)."""
    waits, calls = queue_impl(q).waits, []
    real = waits.interruptible

    def counting(ev):
        calls.append(ev)
        real(ev)

    monkeypatch.setattr(waits, "interruptible", counting)
    return calls


def _main_thread_only(monkeypatch):
    """Skip unless in the main thread; any wait counts as short (the choice, not the limit, is
    tested: on a busy machine a tiny wait's tail can pass the limit), and the cores count as busy
    (the main thread joins there only: tests/backends/test_opencl_wait_choice.py). Call it before
    the queue is made."""
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the main thread's choice is tested; this test runs in another thread")
    monkeypatch.setattr(ow, "JOIN_LIMIT_S", 60.0)
    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=True))


@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_the_main_thread_joins_a_repeated_launch_only_once_it_was_short(which, monkeypatch):
    _main_thread_only(monkeypatch)
    devices = pk.devices("opencl")
    if which >= len(devices):
        pytest.skip("one OpenCL device here")
    dev = devices[which]
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    calls = _counting_interruptible(q, monkeypatch)
    one, two = np.float32(1), np.float32(2)
    for _ in range(3):  # the checked path twice, then the fast launcher's first run: unknown
        pk.exec(q, wd, add_v, out, one)
    assert len(calls) == 3
    for _ in range(5):  # the same arguments, known short: joined
        pk.exec(q, wd, add_v, out, one)
    assert len(calls) == 3
    pk.exec(q, wd, add_v, out, two)  # another scalar value: unknown again, interruptible
    assert len(calls) == 4
    pk.exec(q, wd, add_v, out, two)
    assert len(calls) == 4
    host = np.empty(8, np.float32)
    pk.memcpy(q, host, out)
    np.testing.assert_array_equal(host, 8 * 1 + 2 * 2)


def test_a_launcher_keeps_the_time_of_each_set_of_scalar_values_until_its_objects_change(monkeypatch):
    """A launcher keeps a run's time per set of its scalars' values while its buffer arguments
    are the same objects: scalars alternating between values seen before are joined; a value
    never seen (even of the same size: a range's end, a shift, can change the work by any
    factor) is waited for interruptibly, and a new buffer (other data) forgets them all."""
    _main_thread_only(monkeypatch)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    calls = _counting_interruptible(q, monkeypatch)
    added = 0.0

    def launch(buf, v, interruptible):
        nonlocal added
        n = len(calls)
        pk.exec(q, wd, add_v, buf, np.float32(v))
        if buf is out:
            added += v
        assert len(calls) == n + interruptible, (v, interruptible)

    for _ in range(3):  # the checked path twice, then the fast launcher's first run
        pk.exec(q, wd, add_v, out, np.float32(3.0))
    added, n0 = 9.0, len(calls)
    launch(out, 3.0, False)  # known
    launch(out, 3.5, True)  # a value never seen: unknown, then learned
    launch(out, 3.0, False)  # alternating between values seen: each still known
    launch(out, 3.5, False)
    other = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, other, 0)
    launch(other, 3.0, True)  # a new buffer: what was learned is forgotten
    launch(other, 3.0, False)
    launch(out, 3.0, True)  # and back: forgotten too
    assert len(calls) == n0 + 3
    host = np.empty(8, np.float32)
    pk.memcpy(q, host, out)
    np.testing.assert_array_equal(host, np.float32(added))


def test_a_launcher_keeps_the_last_sets_of_scalar_values_only(monkeypatch):
    from backends import _opencl_launch

    monkeypatch.setattr(_opencl_launch, "_CELLS_MAX", 3)
    _main_thread_only(monkeypatch)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    wd = pk.WorkDiv(1, 1, 8)
    calls = _counting_interruptible(q, monkeypatch)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, np.float32(1))

    def interruptible(v) -> bool:
        n = len(calls)
        pk.exec(q, wd, add_v, out, np.float32(v))
        return len(calls) > n

    assert [interruptible(v) for v in (2, 3, 1, 2, 3)] == [True, True, False, False, False]
    assert interruptible(4)  # a fourth: the least recently used (1) is dropped
    assert [interruptible(v) for v in (2, 3, 4, 1)] == [False, False, False, True]


def test_a_ctrl_c_while_new_arguments_are_set_leaves_the_next_launch_setting_them_again(monkeypatch):
    """A KeyboardInterrupt between two argument settings leaves the kernel with some new values:
    the next launch, with any arguments, sets them again (before, a relaunch of the old
    arguments counted as the same and ran with a mix of old and new values)."""
    from backends import _opencl_launch

    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, np.float32(1))
    real, calls = _opencl_launch.set_arg, []

    def interrupted_after_one(knl, i, v):
        real(knl, i, v)
        calls.append(i)
        raise KeyboardInterrupt

    monkeypatch.setattr(_opencl_launch, "set_arg", interrupted_after_one)
    with pytest.raises(KeyboardInterrupt):
        pk.exec(q, wd, add_v, out, np.float32(10))
    monkeypatch.setattr(_opencl_launch, "set_arg", real)
    assert calls, "no argument was set"
    pk.exec(q, wd, add_v, out, np.float32(1))  # the old arguments again
    host = np.empty(8, np.float32)
    pk.memcpy(q, host, out)
    np.testing.assert_array_equal(host, 4)


def test_a_launch_not_short_is_never_joined_in_the_main_thread(monkeypatch):
    import backends._opencl_waits as ow

    _main_thread_only(monkeypatch)
    monkeypatch.setattr(ow, "JOIN_LIMIT_S", 0.0)  # no run is short enough
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    calls = _counting_interruptible(q, monkeypatch)
    wd = pk.WorkDiv(1, 1, 8)
    for _ in range(6):
        pk.exec(q, wd, add_v, out, np.float32(1))
    assert len(calls) == 6


def test_other_threads_join_every_wait(monkeypatch):
    dev = pk.device("opencl")
    qb, qn = pk.Queue(dev, blocking=True), pk.Queue(dev)
    calls_b, calls_n = _counting_interruptible(qb, monkeypatch), _counting_interruptible(qn, monkeypatch)
    out = pk.Buffer(dev, 8, np.float32)
    host = np.empty(8, np.float32)

    def work(_: int) -> None:
        pk.memset(qb, out, 0)
        for v in (1, 2, 3):  # new scalar values: unknown launches, joined all the same here
            pk.exec(qb, pk.WorkDiv(1, 1, 8), add_v, out, np.float32(v))
        pk.exec(qn, pk.WorkDiv(1, 1, 8), add_v, out, np.float32(4))
        qn.wait()
        ev = pk.Event(dev)
        qn.record(ev)
        ev.wait()
        pk.memcpy(qb, host, out)

    run_threads(work, 1)
    np.testing.assert_array_equal(host, 10)
    assert calls_b == [] and calls_n == []


def test_a_failed_command_raises_through_a_joined_wait():
    import pyopencl as cl

    from backends._opencl_waits import wait_event_joined

    user = cl.UserEvent(pk.device("opencl").native.context)
    threading.Timer(0.1, user.set_status, (-1,)).start()
    with pytest.raises(cl.Error):
        wait_event_joined(user)


EXITS_WHILE_WAITING = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import portable as pk

    from alpyka_testing.spin_kernel import spin

    dev = pk.devices("opencl")[int(sys.argv[1])]

    def launches():  # joined waits (not the main thread), one completing while the interpreter ends
        q = pk.Queue(dev, blocking=True)
        out = pk.Buffer(dev, 2, np.float64, queue=q)
        wd = pk.WorkDiv(2, 1, 1)
        while True:
            pk.exec(q, wd, spin, out, 200_000)

    threading.Thread(target=launches, daemon=True).start()
    time.sleep(1.0)
    print("exiting", flush=True)
""")


@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_the_interpreter_ends_cleanly_while_a_daemon_thread_waits(which, tmp_path):
    """The waiting thread's wait returns while the interpreter finalises; it is stopped taking
    the GIL back in plain C (ctypes), never from C++ (pyopencl's wait: std::terminate)."""
    if which >= len(pk.devices("opencl")):
        pytest.skip("one OpenCL device here")
    script = tmp_path / "exits_while_waiting.py"
    script.write_text(EXITS_WHILE_WAITING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for _ in range(3):  # each run ends at another point of a launch
        r = subprocess.run(
            [sys.executable, str(script), str(which)],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
        assert "exiting" in r.stdout
        assert "terminate" not in r.stderr and "Fatal Python error" not in r.stderr, r.stderr[-3000:]


def test_q_wait_joins_known_work_once_the_same_work_was_short(monkeypatch):
    """``q.wait()`` in the main thread joins when everything since the last wait was known work
    (fast launches with their last arguments, graph replays, copies and fills of a size) whose
    same mix was waited for within the limit before; anything else waits interruptibly."""
    _main_thread_only(monkeypatch)
    dev = pk.device("opencl")
    q = pk.Queue(dev)
    out = pk.Buffer(dev, 8, np.float32)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    q.wait()
    calls = _counting_interruptible(q, monkeypatch)
    one = np.float32(1)

    def waits_interruptibly(enqueue) -> bool:
        before = len(calls)
        enqueue()
        q.wait()
        return len(calls) > before

    def launches(n, v=one):
        return lambda: [pk.exec(q, wd, add_v, out, v) for _ in range(n)]

    assert waits_interruptibly(launches(3))  # the checked path twice, the fast launcher's first run
    assert waits_interruptibly(launches(4))  # known launches, this mix never waited for
    assert not waits_interruptibly(launches(4))  # the same mix, short: joined
    assert waits_interruptibly(launches(2))  # another mix
    assert not waits_interruptibly(launches(2))
    assert waits_interruptibly(launches(2, np.float32(2)))  # a new scalar value: unknown
    assert waits_interruptibly(launches(2, np.float32(2)))  # known launches, a mix never waited for
    assert not waits_interruptibly(launches(2, np.float32(2)))
    assert waits_interruptibly(launches(1, np.float32(3)))  # new arguments: unknown at first
    assert waits_interruptibly(launches(2, np.float32(3)))  # 3: other work, a mix never waited for
    assert not waits_interruptibly(launches(2, np.float32(3)))
    assert waits_interruptibly(launches(1, np.float32(2)))  # back to 2 (a fresh launch: unknown)
    assert not waits_interruptibly(launches(2, np.float32(2)))  # 2's mix, known
    assert not waits_interruptibly(lambda: pk.memset(q, out, 0))  # a fill of a size waited for first
    big = pk.Buffer(dev, 64, np.float32)
    assert waits_interruptibly(lambda: pk.memset(q, big, 0))  # a fill of another size: unknown
    mix = lambda: (pk.memset(q, out, 0), launches(2)())  # noqa: E731
    assert waits_interruptibly(mix)  # the launcher's arguments changed back: unknown
    assert waits_interruptibly(mix)  # a fill and known launches, a mix never waited for
    assert not waits_interruptibly(mix)
    with pk.capture(q) as graph:
        launches(3)()
    assert waits_interruptibly(graph.launch)
    assert not waits_interruptibly(graph.launch)
    assert not waits_interruptibly(graph.launch)
    host = np.empty(8, np.float32)
    pk.memcpy(q, host, out)
    q.wait()
    np.testing.assert_array_equal(host, 11)  # the last fill and its two launches, then three replays of three


def test_a_blocking_queue_joins_a_copy_or_fill_of_a_size_once_one_was_short(monkeypatch):
    """A blocking queue is idle before each command, so a copy's or fill's time follows its kind
    and size: the first of a kind and size is waited for interruptibly, the next joined where it
    was short; every byte lands either way."""
    _main_thread_only(monkeypatch)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    buf, big = pk.Buffer(dev, 8, np.float32, queue=q), pk.Buffer(dev, 64, np.float32, queue=q)
    calls = _counting_interruptible(q, monkeypatch)

    def interruptible(op) -> bool:
        before = len(calls)
        op()
        return len(calls) > before

    host, back = np.arange(8, dtype=np.float32), np.empty(8, np.float32)
    steps = [
        (lambda: pk.memcpy(q, buf, host), True),  # host to device, 32 bytes: unknown
        (lambda: pk.memcpy(q, buf, host + 1), False),  # the same kind and size: known, joined
        (lambda: pk.memcpy(q, back, buf), True),  # device to host: another kind
        (lambda: pk.memcpy(q, back, buf), False),
        (lambda: pk.memset(q, big, 0), True),  # a fill of 256 bytes
        (lambda: pk.memset(q, buf, 0), True),  # of 32: another size
        (lambda: pk.memset(q, buf, 0), False),
        (lambda: pk.memcpy(q, big, np.ones(64, np.float32)), True),
    ]
    for i, (op, want) in enumerate(steps):
        assert interruptible(op) == want, i
    pk.memcpy(q, back, buf)
    np.testing.assert_array_equal(back, 0)
    got = np.empty(64, np.float32)
    pk.memcpy(q, got, big)
    np.testing.assert_array_equal(got, 1)


def test_known_work_behind_an_unfinished_command_is_waited_for_interruptibly(monkeypatch):
    """A blocking queue's command is behind the queue's others: where one is unfinished (a kernel
    a caught Ctrl-C left running, another thread's launch), a copy, fill or launch known short
    waits interruptibly, and its time is not learned (a user event no one has completed stands
    for the unfinished command)."""
    import pyopencl as cl

    _main_thread_only(monkeypatch)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    impl = queue_impl(q)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    host = np.zeros(8, np.float32)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    for _ in range(4):  # known short from here on: the copy, the fill and the launch
        pk.memcpy(q, out, host)
        pk.memset(q, out, 0)
        pk.exec(q, wd, add_v, out, one)
    calls = _counting_interruptible(q, monkeypatch)
    ops = [lambda: pk.memcpy(q, out, host), lambda: pk.memset(q, out, 0), lambda: pk.exec(q, wd, add_v, out, one)]
    for op in ops:
        op()
    assert calls == [], "known short work on an idle queue is joined"
    copy_took = impl.transfer_took("h2d", host.nbytes)
    for i, op in enumerate(ops):
        user = cl.UserEvent(dev.native.context)
        impl.last_event = cl.enqueue_marker(impl.cq, wait_for=[user])  # an unfinished command ahead
        threading.Timer(0.3, user.set_status, (cl.command_execution_status.COMPLETE,)).start()
        before = len(calls)
        op()
        assert len(calls) == before + 1, i
        assert copy_took[0] < 0.3, "the wait for the work ahead was learned as the copy's time"
    for op in ops:
        op()
    assert len(calls) == 3, "joined again once nothing is left ahead"
    got = np.empty(8, np.float32)
    pk.memcpy(q, got, out)
    np.testing.assert_array_equal(got, 1)  # the last fill, then one launch


def test_another_thread_joins_known_work_behind_an_unfinished_command_but_learns_no_time(monkeypatch):
    """Outside the main thread known work is joined (Python raises a Ctrl-C in the main thread
    only), also behind an unfinished command of its queue (another thread's launch, a kernel a
    caught Ctrl-C left running); but that wait's time is the work ahead's too, and is not learned
    as the work's (it was: 0.3 s for a 32-byte copy, a fill and a tiny launch; a user event no one
    has completed stands for the unfinished command)."""
    import pyopencl as cl

    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    monkeypatch.setattr(ow, "JOIN_LIMIT_S", 60.0)  # any wait counts as short (the choice is tested)
    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=True))  # tiny work joins too
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    impl = queue_impl(q)
    cells = []  # the time cells made from here on (the last: the launch's, for its arguments)
    monkeypatch.setattr(impl, "time_cell", lambda: cells.append(ow.time_cell()) or cells[-1])
    calls = _counting_interruptible(q, monkeypatch)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    host = np.zeros(8, np.float32)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    ops = [lambda: pk.memcpy(q, out, host), lambda: pk.memset(q, out, 0), lambda: pk.exec(q, wd, add_v, out, one)]
    learned = []

    def work(_: int) -> None:
        for _ in range(4):  # known short from here on: the copy, the fill and the launch
            for op in ops:
                op()
        took = [impl.transfer_took("h2d", host.nbytes), impl.transfer_took("fill", out.nbytes), cells[-1]]
        learned.append([cell[0] for cell in took])
        for op in ops:
            user = cl.UserEvent(dev.native.context)
            impl.last_event = cl.enqueue_marker(impl.cq, wait_for=[user])  # an unfinished command ahead
            threading.Timer(0.3, user.set_status, (cl.command_execution_status.COMPLETE,)).start()
            op()
        learned.append([cell[0] for cell in took])

    run_threads(work, 1)
    assert calls == [], "another thread waited interruptibly"
    known, after = learned
    assert len(known) == 3 and None not in known, known
    assert after == known, f"the wait for the work ahead was learned as the work's time: {known} -> {after}"
    got = np.empty(8, np.float32)
    pk.memcpy(q, got, out)
    np.testing.assert_array_equal(got, 1)  # the last fill, then one launch


def test_new_known_work_is_never_taken_for_a_mix_of_work_let_go_of(monkeypatch):
    """``q.wait()`` keys the mixes of known work it learned by their time cells' tokens: keyed by
    ids, a cell made after one was let go of (a dropped graph's or launcher's, a transfer kind
    the queue forgot) got its id (provoked here), and its work, never waited for, was taken for
    the old mix (its wait joined, if short: no Ctrl-C for a long kernel)."""
    import pyopencl as cl

    from backends._opencl_queue import _WORK_KINDS

    q = pk.Queue(pk.device("opencl"))
    impl = queue_impl(q)
    offered = []  # the learned time each q.wait() was offered (None: unknown work)
    real = impl._wait_timed
    monkeypatch.setattr(impl, "_wait_timed", lambda ev, took, flush: (offered.append(took[0]), real(ev, took, flush)))

    def wait_for_known(cell) -> None:
        with impl.lock:
            impl.after_known(cell, cl.enqueue_marker(impl.cq))
        q.wait()

    old = impl.time_cell()
    wait_for_known(old)
    wait_for_known(old)
    assert offered == [None, offered[1]] and offered[1] is not None  # the mix learned
    old_id, kept = id(old), []
    del old
    new = impl.time_cell()
    while id(new) != old_id and len(kept) < 10_000:  # (usually the first: the freed memory)
        kept.append(new)
        new = impl.time_cell()
    assert id(new) == old_id, "no new cell got the freed one's id: the reuse was not provoked"
    wait_for_known(new)
    assert offered[2] is None, "new work was taken for the mix of work let go of"
    for n in range(_WORK_KINDS + 1):  # the queue's transfer cells stay bounded
        impl.transfer_took("fill", n + 1)
    assert len(impl._took_by_transfer) == 1


def test_a_replayed_graph_sets_shared_arguments_once_and_others_again():
    """Kernels of a graph with equal arguments share one argument list (set once a replay where
    they follow each other); other arguments, and a launch between replays, set theirs again."""
    dev = pk.device("opencl")
    q = pk.Queue(dev)
    a, b = pk.Buffer(dev, 8, np.float32), pk.Buffer(dev, 8, np.float32)
    pk.memset(q, a, 0)
    pk.memset(q, b, 0)
    wd = pk.WorkDiv(1, 1, 8)
    one, two = np.float32(1), np.float32(2)
    for _ in range(3):  # a fast launcher for the launch between the replays
        pk.exec(q, wd, add_v, b, np.float32(100))
    with pk.capture(q) as graph:
        pk.exec(q, wd, add_v, a, one)
        pk.exec(q, wd, add_v, a, np.float32(1))  # equal: shares the list
        pk.exec(q, wd, add_v, a, two)
        pk.exec(q, wd, add_v, b, one)
        pk.exec(q, wd, add_v, a, one)
    graph.launch()
    pk.exec(q, wd, add_v, b, np.float32(100))  # the fast launcher's own arguments in between
    graph.launch()
    ha, hb = np.empty(8, np.float32), np.empty(8, np.float32)
    pk.memcpy(q, ha, a)
    pk.memcpy(q, hb, b)
    q.wait()
    np.testing.assert_array_equal(ha, 2 * (1 + 1 + 2 + 1))
    np.testing.assert_array_equal(hb, 300 + 100 + 2 * 1)
