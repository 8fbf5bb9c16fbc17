"""OpenCL waits on a runtime that runs a command in the thread waiting for it (issue 41 item 2).

Intel's CPU runtime (TBB) runs a tiny kernel inside ``clWaitForEvents``; polled, the command
waited for a worker thread of the runtime, which other processes on the cores delayed: a blocking
tiny launch took 12x raw pyopencl + ``finish`` at load 10 (4.6x its best round). Its queues hand
each wait to a waiter thread that waits natively (3.4x), while the caller sleeps where a Ctrl-C
still reaches it. Other runtimes (PoCL: polled 1.2x raw) keep the polled wait on free cores; on
busy cores every runtime's interruptible wait goes to a waiter thread at once, without polling.
The waiter is the native library's (a thread that never takes the GIL) where it is built, else a
Python thread: the tests of the hand-over run on both (``hand_over``).
"""

import signal
import threading
import time

import numpy as np
import pytest

import portable as pk
from portable.spi import queue_impl

pytestmark = pytest.mark.alpyka_backends("opencl")


@pk.kernel
def add_one(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] += 1.0


def _waiters() -> list:
    """The waiter threads alive: Python's (threads) and the native library's (their task ids)."""
    python = [t for t in threading.enumerate() if t.name == "alpyka-opencl-waiter"]
    return python + _native_waiters()


def _native_waiters() -> list[str]:
    import glob

    from backends._opencl_native import native_module

    module = native_module()
    if module is None:
        return []
    found = []
    for comm in glob.glob("/proc/self/task/*/comm"):
        try:
            with open(comm) as f:
                if f.read().strip() == module.WAITER_NAME:
                    found.append(comm.split("/")[-2])
        except OSError:  # (a thread that ended meanwhile)
            continue
    return found


@pytest.fixture(params=["native", "python"])
def hand_over(request, monkeypatch):
    """Which waiter a handed wait goes to: the native library's, or a Python thread (where no C
    compiler builds the library)."""
    import backends._opencl_waits as ow
    from backends._opencl_native import native_module, native_problem

    if request.param == "native":
        if native_module() is None:
            pytest.skip(f"the native library is not built here: {native_problem()}")
        if not _native_waiters_visible():
            pytest.skip("no /proc/self/task to count the native waiter threads in")
        monkeypatch.setattr(ow, "_hand_over", native_module().hand_over)
    else:
        monkeypatch.setattr(ow, "_hand_over", None)
    return request.param


def _native_waiters_visible() -> bool:
    import os

    return os.path.isdir("/proc/self/task")


def test_intels_cpu_runtime_waits_in_a_waiter_thread_and_others_poll(hand_over):
    from backends._opencl_waits import runs_commands_in_waits, wait_event, wait_event_handed

    before = set(_waiters())  # other threads' waiters, from earlier tests of this process
    for dev in pk.devices("opencl"):
        q = pk.Queue(dev, blocking=True)
        out = pk.Buffer(dev, 4, np.float32, queue=q)
        pk.memset(q, out, 0)
        for _ in range(3):
            pk.exec(q, pk.WorkDiv(1, 1, 4), add_one, out, 4)
        host = np.empty(4, np.float32)
        pk.memcpy(q, host, out)
        np.testing.assert_array_equal(host, 3)
        handed = dev.properties["platform"].startswith("Intel") and dev.properties["type"] == "cpu"
        assert runs_commands_in_waits(dev) == handed
        assert queue_impl(q).waits.on_free_cores is (wait_event_handed if handed else wait_event)
    intel = [d for d in pk.devices("opencl") if runs_commands_in_waits(d)]
    if not intel:
        pytest.skip("Intel's CPU OpenCL runtime is not installed: every runtime here polls")
    import pyopencl as cl

    for _ in range(2):  # a command that outlasts the first poll (a tiny launch may not, on free cores)
        user = cl.UserEvent(intel[0].native.context)
        threading.Timer(0.05, user.set_status, (cl.command_execution_status.COMPLETE,)).start()
        wait_event_handed(user)
    # one waiter for this thread (made here, or by an earlier test of this thread), reused by every wait
    assert _waiters() and len(set(_waiters()) - before) <= 1


def test_a_ctrl_c_reaches_a_handed_wait_and_the_next_wait_gets_a_fresh_waiter(hand_over):
    """A user event no one completes stands for a long kernel: SIGINT raises KeyboardInterrupt
    in the waiting thread at once; the waiter still in the native wait ends once the event
    completes, and the next wait is not queued behind it."""
    import pyopencl as cl

    from backends._opencl_waits import wait_event_handed

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a SIGINT's KeyboardInterrupt is raised in the main thread only; this test runs in another")
    ctx = pk.device("opencl").native.context
    user = cl.UserEvent(ctx)
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    before = len(_waiters())
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        wait_event_handed(user)
    took = time.monotonic() - t0
    assert took < 10, f"the KeyboardInterrupt came {took:.1f} s after the wait began (0.3 s expected)"
    second = cl.UserEvent(ctx)
    threading.Timer(0.2, second.set_status, (cl.command_execution_status.COMPLETE,)).start()
    wait_event_handed(second)  # a fresh waiter: the first one is still inside its native wait
    assert second.command_execution_status == cl.command_execution_status.COMPLETE
    user.set_status(cl.command_execution_status.COMPLETE)  # the first waiter ends (retired)
    deadline = time.monotonic() + 30  # a hang guard on a busy machine
    while len(_waiters()) > max(before, 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_waiters()) <= max(before, 1), "the waiter of the interrupted wait did not end"


def test_a_failed_user_event_raises_the_runtimes_error_through_a_handed_wait(hand_over):
    import pyopencl as cl

    from backends._opencl_waits import wait_event_handed

    user = cl.UserEvent(pk.device("opencl").native.context)
    threading.Timer(0.1, user.set_status, (-1,)).start()
    with pytest.raises(cl.Error):
        wait_event_handed(user)


def test_a_forked_child_gets_a_waiter_of_its_own(hand_over):
    """A child forked after a handed wait has no copy of the waiter thread: its waits start one
    (before, the child's wait went to a queue no thread read, and hung)."""
    import os

    import pyopencl as cl

    import backends._opencl_waits as oq
    from backends._opencl_native import native_module

    if not hasattr(os, "fork"):
        pytest.skip("os.fork is POSIX only")
    if hand_over == "native":
        has_waiter = lambda: native_module().idle_waiters() > 0  # noqa: E731
    else:
        has_waiter = lambda: getattr(oq._waiters, "waiter", None) is not None  # noqa: E731
    pending = cl.UserEvent(pk.device("opencl").native.context)
    threading.Timer(0.1, pending.set_status, (cl.command_execution_status.COMPLETE,)).start()
    oq.wait_event_handed(pending)  # this process now has a waiter
    assert has_waiter()
    pid = os.fork()
    if pid == 0:  # the child checks the waiter's record only (OpenCL runtimes are not fork-safe)
        os._exit(0 if not has_waiter() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "the child kept the parent's waiter, whose thread it has not"


def test_the_waiter_of_a_thread_that_ended_ends_too(monkeypatch):
    """A program that waits from short-lived threads does not collect idle waiter threads (Python
    waiters, one per thread; the native library keeps at most one idle waiter a process)."""
    import pyopencl as cl

    import backends._opencl_waits as oq

    monkeypatch.setattr(oq, "WAITER_IDLE_S", 0.1)
    monkeypatch.setattr(oq, "_hand_over", None)
    ctx = pk.device("opencl").native.context
    before = len(_waiters())

    def wait_once() -> None:
        ev = cl.UserEvent(ctx)
        threading.Timer(0.1, ev.set_status, (cl.command_execution_status.COMPLETE,)).start()
        oq.wait_event_handed(ev)

    t = threading.Thread(target=wait_once)
    t.start()
    t.join(60)
    deadline = time.monotonic() + 30  # a hang guard on a busy machine
    while len(_waiters()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_waiters()) <= before, "the waiter outlived the thread it waited for"


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "free"])
def test_on_busy_cores_an_unknown_wait_goes_to_a_waiter_at_once_on_every_runtime(busy, monkeypatch):
    """A launch with new arguments is waited for interruptibly; where other processes keep the
    cores busy it is handed to a waiter thread without polling first (a ``sched_yield`` of a busy
    core can give it away for a whole time slice: Intel, a changed scalar, 7.8 ms -> 0.2 ms a
    launch), on PoCL too; on free cores Intel's runtime polls first and others poll."""
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    handed, yields = [], [0]
    real_handed, real_yield = ow.wait_event_handed, ow._yield_core
    monkeypatch.setattr(
        ow, "wait_event_handed", lambda ev, poll_s=None: (handed.append(poll_s), real_handed(ev, poll_s))
    )
    monkeypatch.setattr(ow, "_yield_core", lambda: (yields.__setitem__(0, yields[0] + 1), real_yield()))
    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=busy))
    for dev in pk.devices("opencl"):
        q = pk.Queue(dev, blocking=True)
        out = pk.Buffer(dev, 4, np.float32, queue=q)
        pk.memset(q, out, 0)
        handed.clear()
        for n in (4, 3, 2):  # new arguments each time: unknown, interruptible
            pk.exec(q, pk.WorkDiv(1, 1, 4), add_one, out, n)
        waits, got = queue_impl(q).waits, list(handed)
        host = np.empty(4, np.float32)
        pk.memcpy(q, host, out)
        np.testing.assert_array_equal(host, [3, 3, 2, 1])
        if dev.properties.get("simulator"):
            assert got == [], "a simulator polls"
        elif busy:
            assert got == [0.0] * 3, got
        else:  # (the queue took the patched function as its free-core wait where it hands)
            assert got == ([None] * 3 if waits.on_free_cores is ow.wait_event_handed else []), got
    if busy:
        assert yields[0] == 0, "a busy core was yielded while waiting"


@pytest.mark.parametrize("hand_over", ["native"], indirect=True)
def test_native_waits_from_several_threads_keep_a_few_idle_waiters(hand_over):
    """Handed waits made at once from several threads each get a waiter (never one request
    queued behind another's wait); afterwards a few idle waiters are kept for the next waits
    (``IDLE_MAX``: threads that hand waits at once start no thread a wait), the others end."""
    import pyopencl as cl

    import backends._opencl_waits as oq
    from backends._opencl_native import native_module

    module = native_module()
    ctx = pk.device("opencl").native.context
    events = [cl.UserEvent(ctx) for _ in range(module.IDLE_MAX + 2)]
    done: list[int] = []
    threads = [threading.Thread(target=lambda e=e: (oq.wait_event_handed(e, 0.0), done.append(1))) for e in events]
    for t in threads:
        t.start()
    time.sleep(0.2)
    assert not done, "a handed wait returned before its event completed"
    for e in events:
        e.set_status(cl.command_execution_status.COMPLETE)
    for t in threads:
        t.join(60)
    assert len(done) == len(events)
    assert module.idle_waiters() == module.IDLE_MAX
    deadline = time.monotonic() + 30  # a hang guard on a busy machine
    while len(_native_waiters()) > module.IDLE_MAX and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_native_waiters()) == module.IDLE_MAX, "the extra native waiters did not end"


def test_an_exception_raised_in_the_waiting_thread_reaches_a_handed_wait(hand_over):
    """An exception another thread raises in the waiting one (``PyThreadState_SetAsyncExc``: what
    debuggers and timeout tools use) is raised within a slice, as a Ctrl-C is: the native wait
    goes back to Python between slices."""
    import ctypes

    import pyopencl as cl

    from backends._opencl_waits import HANDED_SLICE_S, wait_event_handed

    class Stop(Exception):
        pass

    user = cl.UserEvent(pk.device("opencl").native.context)
    me = threading.get_ident()
    raise_here = lambda: ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(me), ctypes.py_object(Stop))  # noqa: E731
    timer = threading.Timer(0.2, raise_here)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(Stop):
            wait_event_handed(user)
        took = time.monotonic() - t0
    finally:
        user.set_status(cl.command_execution_status.COMPLETE)
        timer.join()
    assert took < 10, f"raised {took:.1f} s after the wait began (0.2 s + one {HANDED_SLICE_S} s slice expected)"


@pytest.mark.parametrize("hand_over", ["native"], indirect=True)
def test_a_native_hand_over_refuses_bad_slices_and_a_second_wait(hand_over):
    import pyopencl as cl

    from backends._opencl_native import native_module

    user = cl.UserEvent(pk.device("opencl").native.context)
    handed = native_module().hand_over(user.int_ptr)
    try:
        for bad in (0.0, -1.0, float("nan"), float("inf"), 1e300):
            with pytest.raises(ValueError, match="slice"):
                handed.wait(bad)
        assert handed.wait(0.01) is None  # not complete yet: call again
    finally:
        user.set_status(cl.command_execution_status.COMPLETE)
    while (err := handed.wait(0.1)) is None:
        pass
    assert err == 0
    with pytest.raises(ValueError, match="over"):
        handed.wait(0.1)
    with pytest.raises(ValueError):
        native_module().hand_over(0)
