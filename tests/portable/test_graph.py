"""Captured graphs (pk.capture): a block records, runs nothing; graph.launch() replays it with the
buffers and scalars of the capture; what a graph cannot hold is a CaptureError naming it."""

import gc
import threading

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_type
from portable import _graph

# the rocm stand-in runs this file too: HIP has no cupy stream capture, its graphs replay prepared calls
pytestmark = pytest.mark.hip_differs

N = 100


@pk.kernel
def add_scaled(acc, out, x, a, n):
    for i in acc.uniform_elements(n):
        out[i] += a * x[i]


def _host(q, buf, dtype=np.float32):
    out = np.zeros(buf.nbytes // np.dtype(dtype).itemsize, dtype)
    pk.memcpy(q, out, buf)
    q.wait()
    return out


def _setup(q, device):
    x = pk.Buffer(device, N, np.float32)
    total, copy, flags = (pk.Buffer(device, N, np.float32) for _ in range(3))
    pk.memcpy(q, x, np.arange(N, dtype=np.float32))
    pk.memset(q, total, 0)
    pk.memset(q, copy, 0xFF)  # NaNs until the graph's copy ran
    pk.memset(q, flags, 0)
    q.wait()
    return x, total, copy, flags


def _record_chain(q, device, x, total, copy, flags):
    wd = pk.valid_workdiv(device, N)
    with pk.capture(q) as graph:
        pk.exec(q, wd, add_scaled, total, x, np.float32(2), N)
        pk.exec(q, wd, add_scaled, total, x, np.float32(0.5), N)
        pk.memcpy(q, copy, total)
        pk.memset(q, flags, 1)
    return graph


def test_capture_runs_nothing_and_each_launch_replays(queue, device):
    x, total, copy, flags = _setup(queue, device)
    graph = _record_chain(queue, device, x, total, copy, flags)
    assert graph.operations == 4
    assert (_host(queue, total) == 0).all()  # nothing ran during the capture
    assert np.isnan(_host(queue, copy)).all() and (_host(queue, flags, np.uint8) == 0).all()
    xs = np.arange(N, dtype=np.float32)
    for launches in (1, 2, 3):
        graph.launch()  # the scalars 2 and 0.5 as captured: 2.5 x per launch
        queue.wait()
        np.testing.assert_array_equal(_host(queue, total), 2.5 * launches * xs)
        np.testing.assert_array_equal(_host(queue, copy), 2.5 * launches * xs)
    assert (_host(queue, flags, np.uint8) == 1).all()


def test_launches_without_waits_keep_queue_order(queue, device):
    x, total, copy, flags = _setup(queue, device)
    graph = _record_chain(queue, device, x, total, copy, flags)
    for _ in range(5):
        graph.launch()
    pk.exec(queue, pk.valid_workdiv(device, N), add_scaled, total, x, np.float32(1), N)  # after the 5 replays
    np.testing.assert_array_equal(_host(queue, total), 13.5 * np.arange(N, dtype=np.float32))


def test_blocking_queue_replays_before_launch_returns(device):
    q = pk.Queue(device, blocking=True)
    x, total, copy, flags = _setup(q, device)
    graph = _record_chain(q, device, x, total, copy, flags)
    assert (_host(q, total) == 0).all()
    graph.launch()
    graph.launch()
    np.testing.assert_array_equal(_host(q, copy), 5 * np.arange(N, dtype=np.float32))


def test_each_refused_call_names_itself(queue, device):
    x, total, copy, flags = _setup(queue, device)
    other = pk.Queue(device)
    host = pk.Buffer(pk.host(), N, np.float32)
    event = pk.Event(device)
    wd = pk.valid_workdiv(device, N)
    with pk.capture(queue) as graph:
        pk.exec(queue, wd, add_scaled, total, x, np.float32(1), N)
        pk.memcpy(queue, host, total)
        with pytest.raises(pk.CaptureError, match=r"q\.wait\(\) inside pk\.capture.*after graph\.launch"):
            queue.wait()
        with pytest.raises(pk.CaptureError, match=r"q\.enqueue_host\(\) inside pk\.capture"):
            queue.enqueue(lambda: None)
        with pytest.raises(pk.CaptureError, match=r"q\.enqueue_native\(\) inside"):
            queue.enqueue_native(lambda: None)
        with pytest.raises(pk.CaptureError, match=r"q\.record\(\) inside"):
            queue.record(event)
        with pytest.raises(pk.CaptureError, match=r"q\.wait_for\(\) inside"):
            queue.wait_for(event)
        with pytest.raises(pk.CaptureError, match=r"a host read \(np\.asarray.*inside pk\.capture"):
            np.asarray(host)
        with pytest.raises(pk.CaptureError, match=r"pk\.exec of 'add_scaled' on <Queue.*inside pk\.capture"):
            pk.exec(other, wd, add_scaled, total, x, np.float32(1), N)
        with pytest.raises(pk.CaptureError, match=r"pk\.memcpy on <Queue"):
            pk.memcpy(other, copy, total)
        with pytest.raises(pk.CaptureError, match=r"pk\.memset on <Queue"):
            pk.memset(other, copy, 0)
        with pytest.raises(pk.CaptureError, match=r"q\.wait\(\) on <Queue"):
            other.wait()
        with pytest.raises(pk.CaptureError, match="captures do not nest"):
            with pk.capture(other):
                pass
        with pytest.raises(pk.CaptureError, match="still being captured"):
            graph.launch()
        assert queue.is_idle()  # allowed: the work before the block
    assert graph.operations == 2  # the refused calls recorded nothing
    graph.launch()
    queue.wait()
    np.testing.assert_array_equal(np.asarray(host), np.arange(N, dtype=np.float32))
    assert (_host(queue, copy, np.uint32) == 0xFFFFFFFF).all()  # nothing of the other queue ran
    other.wait()


def test_errors_of_the_recorded_calls_are_raised_at_capture(queue, device):
    x, total, copy, flags = _setup(queue, device)
    small = pk.Buffer(device, N // 2, np.float32)
    with pk.capture(queue) as graph:
        with pytest.raises(pk.WorkDivError):
            pk.exec(queue, "not a work division", add_scaled, total, x, np.float32(1), N)
        with pytest.raises(ValueError, match="destination has 200 bytes, source has 400"):
            pk.memcpy(queue, small, total)
        with pytest.raises(ValueError, match="memset value is a byte"):
            pk.memset(queue, total, 300)
        with pytest.raises((pk.KernelArgumentError, TypeError)):
            pk.exec(queue, pk.valid_workdiv(device, N), add_scaled, total, x)
    assert graph.operations == 0


def test_an_exception_in_the_block_discards_the_recording(queue, device):
    x, total, copy, flags = _setup(queue, device)
    with pytest.raises(ZeroDivisionError):
        with pk.capture(queue) as graph:
            pk.exec(queue, pk.valid_workdiv(device, N), add_scaled, total, x, np.float32(1), N)
            1 / 0
    assert not _graph.active
    with pytest.raises(pk.CaptureError, match="raised ZeroDivisionError: its recording was discarded"):
        graph.launch()
    pk.exec(queue, pk.valid_workdiv(device, N), add_scaled, total, x, np.float32(3), N)  # the queue works
    np.testing.assert_array_equal(_host(queue, total), 3 * np.arange(N, dtype=np.float32))


def test_the_graph_keeps_its_buffers(queue, device):
    x, total, copy, flags = _setup(queue, device)
    graph = _record_chain(queue, device, x, total, copy, flags)
    del x
    gc.collect()
    reuse = [pk.Buffer(device, N, np.float32, queue=queue) for _ in range(4)]  # would reuse x's block if freed
    for b in reuse:
        pk.memset(queue, b, 0xFF)
    graph.launch()
    np.testing.assert_array_equal(_host(queue, total), 2.5 * np.arange(N, dtype=np.float32))


def test_another_thread_uses_the_queue_as_usual(queue, device):
    x, total, copy, flags = _setup(queue, device)
    errors = []

    def other_thread():
        try:
            pk.memset(queue, flags, 7)  # not recorded: this thread does not capture
            queue.wait()
        except Exception as exc:
            errors.append(exc)

    with pk.capture(queue) as graph:
        pk.exec(queue, pk.valid_workdiv(device, N), add_scaled, total, x, np.float32(1), N)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert errors == [] and graph.operations == 1
    assert (_host(queue, flags, np.uint8) == 7).all() and (_host(queue, total) == 0).all()


def test_cuda_replays_one_cuda_graph_launch(queue, device):
    """On cuda the recording is a CUDA graph (cupy's stream capture): a launch is one graph launch,
    not the kernels one by one. The emulator counts both."""
    rt = getattr(device.native, "rt", None)
    if device.backend_name != "cuda" or rt is None:
        pytest.skip("checks the emulated cuda's stream capture (a real GPU runs the same calls)")
    x, total, copy, flags = _setup(queue, device)
    graph = _record_chain(queue, device, x, total, copy, flags)
    kernels, graphs = len(rt.launches), rt.graph_launches
    for _ in range(3):
        graph.launch()
    queue.wait()
    assert rt.graph_launches == graphs + 3 and len(rt.launches) == kernels
    np.testing.assert_array_equal(_host(queue, total), 7.5 * np.arange(N, dtype=np.float32))


def test_capture_needs_a_queue():
    with raises_type(r"pk.capture needs a pk.Queue, got str: pk.capture\(pk.Queue\(pk.device"):
        pk.capture("q")


@pk.kernel
def write_past(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i + n] = 1.0


def test_range_checks_report_through_a_replayed_graph(queue, device):
    """The emulator's checks (a device flag read by a host check) stay on in a graph: an index out
    of range in a replayed kernel is raised by the next wait, and the queue stays usable."""
    from portable import env

    if getattr(device.native, "rt", None) is None or not env.emulate_checks():
        pytest.skip("range checks run on the emulated cuda/rocm (and under ALPYKA_DEBUG=1)")
    out = pk.Buffer(device, N, np.float32)
    with pk.capture(queue) as graph:
        pk.exec(queue, pk.valid_workdiv(device, N), write_past, out, N)
    queue.wait()  # nothing ran: no error yet
    graph.launch()
    with pytest.raises(pk.AsyncError) as info:
        queue.wait()
    assert "write_past" in str(info.value.__cause__) or "write_past" in str(info.value)
    pk.memset(queue, out, 0)
    queue.wait()


def test_a_replay_is_the_buffers_last_queue_for_host_reads(queue, device):
    """``graph.launch()`` notes its queue on the graph's buffers: a host read (``np.asarray``)
    after it waits for the replayed work, even when another queue used the buffer since the
    capture (the capture noted the graph's queue; the other queue's work made itself the last)."""
    if not device.capabilities.host_addressable:
        pytest.skip("np.asarray of device memory is a copy that the queue orders itself")
    x, total, copy, flags = _setup(queue, device)
    graph = _record_chain(queue, device, x, total, copy, flags)
    other = pk.Queue(device)
    pk.memset(other, flags, 0)  # the buffer's last queue is now `other` (done at once)
    other.wait()
    gate = threading.Event()
    queue.enqueue_host(lambda: gate.wait(60))  # the replay waits behind this until the gate opens
    graph.launch()
    seen = []
    reader = threading.Thread(target=lambda: seen.append(np.asarray(flags).copy()))
    reader.start()
    reader.join(0.5)  # a read that does not wait for the replay is done by now
    gate.set()
    reader.join(60)
    assert not reader.is_alive()
    assert (seen[0].view(np.uint8) == 1).all(), "the host read did not wait for the replayed memset"


def test_one_capture_per_queue_at_a_time(queue, device):
    """A second thread's pk.capture of a queue that another thread captures is refused (the two
    recordings would interleave); the first capture is unaffected, and the queue can be captured
    again once it ended."""
    x, total, copy, flags = _setup(queue, device)
    inside, release = threading.Event(), threading.Event()
    errors: list = []

    def first() -> None:
        try:
            with pk.capture(queue) as graph:
                pk.memset(queue, flags, 3)
                inside.set()
                release.wait(60)
            errors.append(graph.operations)
        except Exception as exc:
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(60)
    try:
        with pytest.raises(_graph.CaptureError, match="another thread is capturing this queue"):
            with pk.capture(queue):
                pk.memset(queue, flags, 4)
    finally:
        release.set()
        t.join(60)
    assert errors == [1], errors
    with pk.capture(queue) as again:
        pk.memset(queue, flags, 5)
    again.launch()
    assert (_host(queue, flags, np.uint8) == 5).all()
