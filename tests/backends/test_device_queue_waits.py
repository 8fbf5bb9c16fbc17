"""Device queues wait no more than they must (issue 33 item 4): a blocking launch or copy waits for
its own command (an in-order queue has finished when its last command has), ``q.wait()`` puts no
marker behind the work it waits for; the objects that work uses stay alive until it finished,
also when the wait is interrupted. (Ctrl-C during these waits: tests/backends/test_ctrl_c.py.)"""

import gc
import weakref

import numpy as np
import pytest

import portable as pk
from portable.spi import queue_impl

pytestmark = pytest.mark.hip_differs

gpu = pytest.mark.alpyka_backends(kind="gpu")


@pk.kernel
def add_one(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] += 1.0


def _count_markers(monkeypatch, queue):
    """How many native markers the queue records from now on (a list holding the count)."""
    impl, count = queue_impl(queue), [0]
    real = impl.marker

    def counting():
        count[0] += 1
        return real()

    monkeypatch.setattr(impl, "marker", counting)
    return count


@gpu
def test_a_blocking_launch_waits_for_its_own_command(device, monkeypatch):
    q = pk.Queue(device, blocking=True)
    out = pk.Buffer(device, 4, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.valid_workdiv(device, 4)
    pk.exec(q, wd, add_one, out, 4)  # compiled before counting
    markers = _count_markers(monkeypatch, q)
    for _ in range(5):  # checked launches, then the fast path
        pk.exec(q, wd, add_one, out, 4)
    host = np.empty(4, np.float32)
    pk.memcpy(q, host, out)  # blocking: the copy finished when memcpy returned
    np.testing.assert_array_equal(host, 6)
    assert markers[0] == 0, "a blocking launch or copy recorded a marker to wait for"


@gpu
def test_wait_records_no_marker_behind_the_launches(device, monkeypatch):
    q = pk.Queue(device)
    out = pk.Buffer(device, 4, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.valid_workdiv(device, 4)
    q.wait()
    markers = _count_markers(monkeypatch, q)
    q.wait()  # an idle queue: what finishing itself records (OpenCL: one marker to wait for)
    alone = markers[0]
    for _ in range(5):
        pk.exec(q, wd, add_one, out, 4)
    markers[0] = 0
    q.wait()
    assert markers[0] == alone, "wait() put the launches' objects behind a marker of their own"
    host = np.empty(4, np.float32)
    pk.memcpy(q, host, out)
    q.wait()
    np.testing.assert_array_equal(host, 5)


@gpu
def test_an_interrupted_wait_keeps_what_the_work_uses(device, monkeypatch):
    """A KeyboardInterrupt while wait() polls leaves the work running: its buffers stay alive
    until a later wait saw the work finish."""
    q = pk.Queue(device)
    wd = pk.valid_workdiv(device, 4)
    keep = pk.Buffer(device, 4, np.float32, queue=q)
    pk.memset(q, keep, 0)
    pk.exec(q, wd, add_one, keep, 4)
    q.wait()
    out = pk.Buffer(device, 4, np.float32, queue=q)
    pk.memset(q, out, 0)
    pk.exec(q, wd, add_one, out, 4)
    alive = weakref.ref(out)
    del out
    impl = queue_impl(q)

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(impl, "finish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        q.wait()
    gc.collect()
    assert alive() is not None, "an interrupted wait let go of a buffer its work may still use"
    monkeypatch.undo()
    q.wait()
    gc.collect()
    assert alive() is None, "the buffer outlived the wait that saw its work finish"
