"""An error in asynchronous work is never lost: across queues, to every waiter, on drop; and a
wait that would wait for itself raises instead of hanging. The same on every backend."""

from __future__ import annotations

import gc
import threading
import time
import warnings

import pytest

import portable as pk

# the rocm stand-in runs this file too: host tasks on a device queue (no host functions on HIP)
pytestmark = pytest.mark.hip_differs


def _fail() -> None:
    raise ValueError("task failed on purpose")


def test_error_travels_across_queues_through_an_event(device):
    qa, qb = pk.Queue(device), pk.Queue(device)
    ev = pk.Event(device)
    ran = []
    qa.enqueue_host(_fail)
    qa.record(ev)
    qb.wait_for(ev)
    qb.enqueue_host(lambda: ran.append("dependent"))
    with pytest.raises(pk.AsyncError, match="on purpose"):
        qb.wait()
    assert ran == [], "the task depending on failed work ran"
    with pytest.raises(pk.AsyncError, match="on purpose"):
        qa.wait()
    qb.enqueue_host(lambda: ran.append("later"))  # both queues are usable again
    qb.wait()
    qa.wait()
    assert ran == ["later"]


def test_error_across_queues_on_a_blocking_waiter(device):
    qa, qb = pk.Queue(device), pk.Queue(device, blocking=True)
    ev = pk.Event(device)
    qa.enqueue_host(_fail)
    qa.record(ev)
    with pytest.raises(pk.AsyncError, match="on purpose"):
        qb.wait_for(ev)  # a blocking queue waits at once, and sees the error at once
        qb.wait()
    with pytest.raises(pk.AsyncError):
        qa.wait()


def test_every_concurrent_waiter_sees_the_error(device):
    q = pk.Queue(device)
    release = threading.Event()
    q.enqueue_host(lambda: release.wait(60))
    q.enqueue_host(_fail)
    seen: list[str] = []
    started = threading.Barrier(3)

    def waiter():
        started.wait()
        try:
            q.wait()
            seen.append("returned")
        except pk.AsyncError:
            seen.append("raised")

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.2)  # both are inside wait() before the work finishes
    release.set()
    for t in threads:
        t.join(20)
    assert seen == ["raised", "raised"]
    q.wait()  # reported: a wait that starts now has nothing to raise


def test_a_wait_from_the_queues_own_task_raises_instead_of_hanging(device):
    q = pk.Queue(device)
    caught: list[BaseException] = []

    def task():
        try:
            q.wait()
        except RuntimeError as exc:  # pk.StateError, a RuntimeError
            caught.append(exc)

    q.enqueue_host(task)
    done = threading.Event()
    threading.Thread(target=lambda: (q.wait(), done.set()), daemon=True).start()
    assert done.wait(20), "q.wait() inside its own task deadlocked"
    assert caught and "wait for itself" in str(caught[0]) and "record an event instead" in str(caught[0])
    assert isinstance(caught[0], pk.StateError)


def test_a_dropped_queue_with_an_unseen_error_warns(device):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        q = pk.Queue(device)
        q.enqueue_host(_fail)
        del q
        gc.collect()
        deadline = time.monotonic() + 10  # the queue's worker warns as it stops
        while time.monotonic() < deadline and not any("no wait() reported" in str(w.message) for w in got):
            time.sleep(0.02)
    messages = [str(w.message) for w in got]
    assert any("no wait() reported" in m and "on purpose" in m for m in messages), messages
