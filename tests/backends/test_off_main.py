"""backends/_off_main.py in this process: a call the main thread hands to a helper thread, a Ctrl-C
that leaves it running, and a request of the same key that then waits for it (an OpenCL program
built once, not a second time beside the first build) and gets its result or its error."""

from __future__ import annotations

import _thread
import gc
import threading
import types
import weakref

import pytest

from backends import _off_main
from backends import _opencl_devices as od
from backends._off_main import call_off_main

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="needs the main thread (a Ctrl-C's target)"
)
#: a generous bound on a hang: the helper's call ends once released
HANG_S = 30.0


class Blocked:
    """A call that counts its runs and blocks until released, then returns or raises."""

    def __init__(self, fails: bool = False) -> None:
        self.runs, self.fails = 0, fails
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> str:
        self.runs += 1
        self.started.set()
        assert self.release.wait(HANG_S)
        if self.fails:
            raise RuntimeError("the build failed")
        return "program"


def _interrupted(call: Blocked, key: object) -> None:
    """``call_off_main(call, key=key)`` ended by a Ctrl-C (KeyboardInterrupt on the main thread)
    while ``call`` runs."""
    threading.Thread(target=lambda: call.started.wait(HANG_S) and _thread.interrupt_main(), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        call_off_main(call, key=key)


@pytest.fixture(autouse=True)
def _left_running():
    """The helpers these tests leave are their own: none left at exit."""
    before = list(_off_main._left_running)
    yield
    _off_main._left_running[:] = before


def test_a_request_after_a_caught_ctrl_c_waits_for_the_call_left_running():
    call = Blocked()
    _interrupted(call, ("k", 1))
    threading.Timer(0.2, call.release.set).start()
    assert call_off_main(call, key=("k", 1)) == "program"
    assert call.runs == 1, "a second call started beside the first"
    assert ("k", 1) not in _off_main._keyed


def test_the_request_that_waits_sees_the_error_of_the_call_it_waited_for():
    call = Blocked(fails=True)
    _interrupted(call, ("k", 2))
    threading.Timer(0.2, call.release.set).start()
    with pytest.raises(RuntimeError, match="the build failed"):
        call_off_main(call, key=("k", 2))
    assert call.runs == 1


def test_another_thread_asking_for_it_waits_for_it_too(monkeypatch):
    call, got, waits = Blocked(), [], threading.Event()
    _interrupted(call, ("k", 6))
    real = _off_main._outcome
    monkeypatch.setattr(_off_main, "_outcome", lambda c: (waits.set(), real(c))[1])
    worker = threading.Thread(target=lambda: got.append(call_off_main(call, key=("k", 6))))
    worker.start()
    assert waits.wait(HANG_S)
    call.release.set()
    worker.join(HANG_S)
    assert got == ["program"] and call.runs == 1


def test_another_key_or_a_call_that_ended_is_not_waited_for():
    call = Blocked()
    _interrupted(call, ("k", 3))
    other = Blocked()
    other.release.set()
    assert call_off_main(other, key=("k", 4)) == "program" and other.runs == 1  # not the running one
    call.release.set()
    _off_main._left_running[-1].join(HANG_S)
    assert ("k", 3) not in _off_main._keyed  # ended: a later request makes the call anew
    assert call_off_main(call, key=("k", 3)) == "program" and call.runs == 2


def test_a_failed_call_keeps_nothing_alive_through_a_cycle():
    """The failure's traceback (the build's frames: its program, its context) is freed with the
    exception, not at the next collection."""

    class Held:
        pass

    alive: list = []

    def fails():
        held = Held()
        alive.append(weakref.ref(held))
        raise RuntimeError("the build failed")

    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            call_off_main(fails, key=("k", 5))
        assert alive[0]() is None, "a cycle keeps the failed call's frames until a collection"
    finally:
        gc.enable()


def test_an_opencl_build_left_running_by_a_ctrl_c_is_joined_not_built_again():
    """backends/_opencl_devices.py's build names its program (context, devices, source, options)."""
    builds = Blocked()

    class Program:
        def __init__(self, ctx, src):
            pass

        def build(self, devices, **kw):
            return builds()

    cl = types.SimpleNamespace(Program=Program, _PYOPENCL_NO_CACHE=True)
    ctx, dev = object(), object()
    threading.Thread(target=lambda: builds.started.wait(HANG_S) and _thread.interrupt_main(), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        od.build(cl, ctx, "kernel source", [dev])
    threading.Timer(0.2, builds.release.set).start()
    assert od.build(cl, ctx, "kernel source", [dev]) == "program"
    assert builds.runs == 1
    assert od.build(cl, ctx, "kernel source", [dev], ["-DX"]) == "program" and builds.runs == 2  # another program


def test_a_call_whose_thread_never_started_is_waited_for_by_no_request(monkeypatch):
    """A Ctrl-C inside ``Thread.start`` before the thread exists: the call never runs, so no key
    names it and a later request of that key makes the call itself (a call named before its
    thread started would have kept a request waiting for ever)."""
    real_start = threading.Thread.start

    def interrupted(thread):
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        call_off_main(lambda: "program", key="k2")
    assert "k2" not in _off_main._keyed, "a call that never started is named by its key"
    monkeypatch.setattr(threading.Thread, "start", real_start)
    assert call_off_main(lambda: "again", key="k2") == "again"
