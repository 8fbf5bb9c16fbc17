"""A Ctrl-C raised as an OpenCL enqueue returns (Python raises a signal's KeyboardInterrupt at its
next check, the call's result then lost): the queue is told of the command it never saw, so that
no wait takes the queue for idle or its work for known, and joins behind a command that may run
for long (a reviewer's reproducer: a 2.4 s kernel joined, uninterruptibly, behind such a launch,
a graph replay and a q.wait())."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.opencl_launches import add_v
from portable.spi import queue_impl

pytestmark = pytest.mark.alpyka_backends("opencl")

_ENQUEUES = ("enqueue_nd_range_kernel", "enqueue_copy", "enqueue_fill_buffer")


class _Lost(BaseException):
    """Stands for the KeyboardInterrupt (not caught by a handler for Exception)."""


@pytest.mark.parametrize("blocking", [False, True], ids=["non_blocking", "blocking"])
@pytest.mark.parametrize("what", ["fast_launch", "checked_launch", "replay", "copy", "fill"])
def test_a_command_whose_event_was_lost_leaves_the_queue_not_idle_and_its_work_unknown(what, blocking, monkeypatch):
    import pyopencl as cl

    from backends import _opencl_launch

    armed = [False]

    def raising_after(real):
        def enqueue(*args, **kwargs):
            got = real(*args, **kwargs)
            if armed[0]:
                raise _Lost
            return got

        return enqueue

    for name in _ENQUEUES:  # (before the launchers are made: they take the enqueue then)
        monkeypatch.setattr(cl, name, raising_after(getattr(cl, name)))
    monkeypatch.setattr(_opencl_launch, "blocking_launch", lambda *a: None)  # (the Python launcher's enqueue)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=blocking)
    impl = queue_impl(q)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    host = np.zeros(8, np.float32)
    wd, one = pk.WorkDiv(1, 1, 8), np.float32(1)
    pk.memset(q, out, 0)
    for _ in range(3):  # the checked path twice, then the fast launcher
        pk.exec(q, wd, add_v, out, one)
    with pk.capture(q) as graph:
        pk.exec(q, wd, add_v, out, one)
    for _ in range(2):  # known work from here on
        graph.launch()
        pk.memcpy(q, out, host)
        pk.memset(q, out, 0)
        pk.exec(q, wd, add_v, out, one)
        q.wait()
    ops = {
        "fast_launch": lambda: pk.exec(q, wd, add_v, out, one),
        "checked_launch": lambda: pk.exec(q, pk.WorkDiv(1, 1, 4), add_v, out, one),
        "replay": graph.launch,
        "copy": lambda: pk.memcpy(q, out, host),
        "fill": lambda: pk.memset(q, out, 0),
    }
    armed[0] = True
    with pytest.raises(_Lost):
        ops[what]()
    armed[0] = False
    assert impl.last_event is not None, "the queue took itself for idle behind a command it was not told of"
    assert impl._pending is None, "q.wait() would take the queue's work for known"
    q.wait()  # (waits for the lost command)
    assert q.is_idle()


@pytest.mark.parametrize("blocking", [False, True], ids=["non_blocking", "blocking"])
def test_native_work_keeps_the_queue_busy_until_it_completed(blocking):
    """``q.enqueue_native(fn)``: what ``fn`` enqueues on the native queue is the queue's work (a
    user event stands for a long command: before, ``is_idle()`` was True at once)."""
    import threading

    import pyopencl as cl

    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=blocking)
    user = cl.UserEvent(dev.native.context)
    keep = object()
    if blocking:  # (the blocking queue waits for the work: the event completes meanwhile)
        threading.Timer(0.2, user.set_status, (cl.command_execution_status.COMPLETE,)).start()
    q.enqueue_native(lambda: cl.enqueue_marker(q.native_handle, wait_for=[user]), keep)
    if not blocking:
        assert not q.is_idle(), "the queue took itself for idle while native work ran"
        user.set_status(cl.command_execution_status.COMPLETE)
        q.wait()
    assert q.is_idle()
    with pytest.raises(_Lost):  # fn raising after it enqueued: that work unknown, the queue told
        q.enqueue_native(lambda: (cl.enqueue_marker(q.native_handle), (_ for _ in ()).throw(_Lost())))
    assert queue_impl(q).last_event is not None
    q.wait()
