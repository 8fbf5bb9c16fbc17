"""Non-blocking CPU queues whose ``wait()`` runs the queued tasks itself when nobody runs them
(portable/_hostqueue.py): order, exactly-once execution, Ctrl-C in the waiting thread, several
waiters and submitters at once, and asynchronous progress without any wait."""

from __future__ import annotations

import threading
import time

import pytest

import portable as pk
from portable._errors import AsyncError
from portable._hostqueue import HostQueue


def _quiet_worker(q: HostQueue) -> None:
    """Start the worker, then keep it asleep: tasks submitted from now on wait for a waiter (the
    worker is woken only by the token a submit sends while it sleeps)."""
    q.enqueue_host(lambda: None)
    q.wait()
    # the worker woke for that task (a waiter may have run it): let it finish its turn and go
    # back to sleep first, or it would mark itself asleep after the line below
    deadline = time.monotonic() + 10
    while not (q._state.asleep and q._worker.tasks.empty()) and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.02)  # past its last look at the tasks, back on its wake-up queue
    q._state.asleep = False  # no token: the tasks stay for the waiter


def test_a_waiter_runs_the_tasks_in_order_on_its_own_thread():
    q = HostQueue(blocking=False)
    _quiet_worker(q)
    ran: list[tuple[int, int]] = []
    for i in range(20):
        q.enqueue_call(lambda i: ran.append((i, threading.get_ident())), i)
    assert not q.is_idle()
    q.wait()
    assert [i for i, _ in ran] == list(range(20))
    assert {t for _, t in ran} == {threading.get_ident()}
    assert q.is_idle()


def test_ctrl_c_in_a_task_the_waiter_runs_loses_nothing_and_runs_nothing_twice():
    q = HostQueue(blocking=False)
    _quiet_worker(q)
    ran: list[str] = []

    def interrupted() -> None:
        ran.append("interrupted")
        raise KeyboardInterrupt

    q.enqueue_call(ran.append, "before")
    q.enqueue_host(interrupted)
    q.enqueue_call(ran.append, "after")
    with pytest.raises(KeyboardInterrupt):
        q.wait()
    assert ran == ["before", "interrupted"]
    # the interrupted task left the queue in an unknown state: the next wait says so, and the
    # task after it was skipped (as after any failed task), not lost and not run twice
    with pytest.raises(AsyncError, match="KeyboardInterrupt.*1 later task"):
        q.wait()
    assert ran == ["before", "interrupted"]
    q.enqueue_call(ran.append, "usable again")
    q.wait()
    assert ran == ["before", "interrupted", "usable again"]
    assert q.is_idle()


def test_a_task_that_waits_on_its_own_queue_is_refused():
    q = HostQueue(blocking=False)
    _quiet_worker(q)
    q.enqueue_host(q.wait)  # run by this thread's wait below
    with pytest.raises(AsyncError, match="wait for itself"):
        q.wait()


def test_tasks_queued_past_a_waiters_target_go_back_to_the_worker():
    """A waiter runs tasks up to what was queued when it started waiting; a task queued while it
    runs them (here by one of those tasks) is handed back to the worker, which runs it with no
    further wait (the submit sent no token: the worker counted as awake)."""
    q = HostQueue(blocking=False)
    _quiet_worker(q)
    later = threading.Event()
    ran_on: list[int] = []

    def queue_another() -> None:
        q.enqueue_host(lambda: (ran_on.append(threading.get_ident()), later.set()))

    q.enqueue_host(queue_another)
    q.wait()  # runs queue_another on this thread; the task it queued is past this wait's target
    assert later.wait(10), "a task left behind by a waiter never ran without another wait()"
    assert ran_on == [q._worker.ident]


def test_work_progresses_with_no_wait():
    q = HostQueue(blocking=False)
    done = threading.Event()
    q.enqueue_host(done.set)
    assert done.wait(10), "a non-blocking queue's task never ran without a wait()"
    deadline = time.monotonic() + 10
    while not q.is_idle() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert q.is_idle()


def test_several_submitters_and_waiters_on_one_queue_each_task_once_in_order():
    q = HostQueue(blocking=False)
    log: list[tuple[int, int]] = []
    lock = threading.Lock()  # one submitter at a time: their tasks keep a global order
    expected: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def client(c: int) -> None:
        try:
            for i in range(300):
                with lock:
                    expected.append((c, i))
                    q.enqueue_call(log.append, (c, i))
                if i % 7 == c % 7:
                    q.wait()
            q.wait()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    q.wait()
    assert log == expected  # each task once, in submission order, whoever ran it


@pk.kernel
def _axpy(acc, y, x, a, n):
    for i in acc.uniform_elements(n):
        y[i] = a * x[i] + y[i]


@pytest.mark.alpyka_backends("cpu_serial", "cpu_threads")
def test_launch_then_wait_many_times_results_checked(device):
    import numpy as np

    q = pk.Queue(device)
    n = 1000
    x = pk.Buffer(device, (n,), np.float32)
    y = pk.Buffer(device, (n,), np.float32)
    pk.memcpy(q, x, np.arange(n, dtype=np.float32))
    pk.memset(q, y, 0)
    wd = pk.valid_workdiv(device, n)
    for _ in range(200):
        pk.exec(q, wd, _axpy, y, x, np.float32(0.5), n)
        q.wait()
    out = np.empty(n, np.float32)
    pk.memcpy(q, out, y)
    q.wait()
    np.testing.assert_allclose(out, 100 * np.arange(n, dtype=np.float32), rtol=1e-6)
