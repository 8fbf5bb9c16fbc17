"""Device backends' runtime (OpenCL here; CUDA/ROCm where a GPU exists): devices, queues,
events, host tasks in queue order, async copies and their ordering, errors, memory safety."""

import threading
import time

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_root

# the rocm stand-in runs this file too: device properties, host functions (HIP refuses them), no CUDA array interface
pytestmark = pytest.mark.hip_differs

gpu = pytest.mark.alpyka_backends(kind="gpu")


class Hits(soa.Layout):
    x = soa.column(np.float32)
    p = soa.vector(np.float64, 3)
    n = soa.scalar(np.int32)


@gpu
def test_device_description(device):
    assert device.kind == "gpu"
    assert device.memory_space == f"{device.backend_name}:{device.index}"
    lim = device.limits
    assert lim.max_threads_per_block > 1
    assert lim.max_threads_per_block >= max(lim.max_block_dims[2], 1) or lim.max_block_dims[2] >= 1
    assert lim.shared_memory_per_block > 0
    assert not device.can_access(pk.host()) and not pk.host().can_access(device)
    if device.backend_name == "opencl":
        import pyopencl as cl

        d = device.native.device
        assert lim.max_threads_per_block == d.max_work_group_size
        assert lim.max_block_dims == tuple(reversed(d.max_work_item_sizes[:3]))
        assert lim.shared_memory_per_block == d.local_mem_size
        assert isinstance(pk.Queue(device).native_handle, cl.CommandQueue)
    else:
        assert isinstance(pk.Queue(device).native_handle, int)


@gpu
def test_roundtrip_copies_and_fill(device, queue):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(10_001).astype(np.float32)
    buf = pk.Buffer(device, a.shape, np.float32, queue=queue)
    pk.memcpy(queue, buf, a)
    dev2 = pk.Buffer(device, a.shape, np.float32, queue=queue)
    pk.memcpy(queue, dev2, buf)  # device to device
    out = np.empty_like(a)
    pk.memcpy(queue, out, dev2)
    queue.wait()
    np.testing.assert_array_equal(out, a)
    pk.memset(queue, dev2, 0x3F)
    pk.memcpy(queue, out, dev2)
    queue.wait()
    assert (out.view(np.uint8) == 0x3F).all()


@gpu
def test_collection_roundtrip_and_views(device, queue):
    n = 1000
    rng = np.random.default_rng(2)
    data = {"x": rng.random(n).astype(np.float32), "p": rng.random((n, 3)), "n": np.int32(7)}
    dev_coll = pk.PortableCollection.from_dict(Hits, data, queue)
    back = dev_coll.to_host(queue)
    queue.wait()
    np.testing.assert_array_equal(back.x, data["x"])
    np.testing.assert_array_equal(back.p, data["p"])
    assert int(back.n) == 7
    view = dev_coll.view()
    if device.backend_name == "opencl":
        with raises_root(pk.StateError, RuntimeError, r"not addressable from Python; copy the collection to the host"):
            view.x
        with raises_root(pk.StateError, RuntimeError, r"not addressable from Python; memcpy it into a host buffer"):
            dev_coll.buffer.array
        with pytest.raises(AttributeError):
            dev_coll.__cuda_array_interface__
    elif device.backend_name == "rocm":  # cupy on HIP has no CUDA array interface
        assert not hasattr(dev_coll, "__cuda_array_interface__")
        np.testing.assert_array_equal(view.x.get(), data["x"])
    else:
        assert dev_coll.__cuda_array_interface__["shape"] == (dev_coll.nbytes,)
        np.testing.assert_array_equal(view.x.get(), data["x"])


@gpu
def test_host_tasks_keep_fifo_order_with_device_work(device):
    q = pk.Queue(device)
    n = 1 << 16
    src = np.arange(n, dtype=np.int64)
    buf = pk.Buffer(device, n, np.int64, queue=q)
    out = np.zeros(n, np.int64)
    seen = []
    pk.memcpy(q, buf, src)
    pk.memcpy(q, out, buf)
    q.enqueue(lambda: seen.append(out.sum()))  # runs after the copy into ``out``
    pk.memset(q, buf, 0)
    pk.memcpy(q, out, buf)
    q.enqueue(lambda: seen.append(out.sum()))
    q.wait()
    assert seen == [src.sum(), 0]


@gpu
def test_host_tasks_from_several_threads(device):
    q = pk.Queue(device)
    seen = []
    barrier = threading.Barrier(3)

    def producer(t):
        barrier.wait()
        for i in range(50):
            q.enqueue(lambda t=t, i=i: seen.append((t, i)))

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    q.wait()
    for t in range(3):
        assert [i for tt, i in seen if tt == t] == list(range(50))


@gpu
def test_nonblocking_enqueue_host_does_not_block_the_caller(device):
    q = pk.Queue(device)
    gate = threading.Event()
    done = []
    q.enqueue(lambda: (gate.wait(60), done.append(1)))
    assert done == [] and not q.is_idle()
    gate.set()  # had the enqueue blocked, we would never get here before the timeout
    q.wait()
    assert done == [1] and q.is_idle()


@gpu
def test_blocking_queue_finishes_each_enqueue(device):
    q = pk.Queue(device, blocking=True)
    a = np.arange(1000, dtype=np.float64)
    buf = pk.Buffer(device, a.shape, np.float64)
    out = np.zeros_like(a)
    pk.memcpy(q, buf, a)
    pk.memcpy(q, out, buf)
    np.testing.assert_array_equal(out, a)  # no wait needed
    assert q.is_idle()


@gpu
def test_async_error_surfaces_at_wait_and_on_later_events(device):
    q = pk.Queue(device)
    ev = pk.Event(device)
    q.enqueue(lambda: 1 / 0)
    q.record(ev)
    with pytest.raises(pk.AsyncError, match="ZeroDivisionError"):
        ev.wait()
    with pytest.raises(pk.AsyncError, match="ZeroDivisionError"):
        q.wait()
    q.wait()  # cleared; the queue stays usable
    out = np.zeros(4)
    buf = pk.Buffer(device, 4, np.float64)
    pk.memcpy(q, buf, np.ones(4))
    pk.memcpy(q, out, buf)
    q.wait()
    assert out.sum() == 4


@gpu
def test_event_rerecord_waits_for_the_latest_record_before_the_wait(device):
    q = pk.Queue(device)
    ev = pk.Event(device)
    assert ev.is_complete()  # never recorded
    gate1, gate2 = threading.Event(), threading.Event()
    q.enqueue(lambda: gate1.wait(60))
    q.record(ev)
    assert not ev.is_complete()
    gate1.set()
    ev.wait()
    assert ev.is_complete()
    other = pk.Queue(device)
    other.enqueue(lambda: gate2.wait(60))
    other.record(ev)  # re-record on another queue: now pending again
    assert not ev.is_complete()
    gate2.set()
    ev.wait()


@gpu
def test_async_copy_ordering_across_two_queues_with_events(device):
    """Queue A uploads then records; queue B waits for the event and downloads: B always sees
    A's data even though A's upload is held back on the host."""
    qa, qb = pk.Queue(device), pk.Queue(device)
    n = 1 << 18
    for trial in range(3):
        data = np.full(n, trial + 1, np.int32)
        buf = pk.Buffer(device, n, np.int32, queue=qa)
        pk.memset(qa, buf, 0)
        gate = threading.Event()
        qa.enqueue(lambda: gate.wait(60))  # holds A back
        pk.memcpy(qa, buf, data)
        ev = pk.Event(device)
        qa.record(ev)
        qb.wait_for(ev)
        out = np.zeros(n, np.int32)
        pk.memcpy(qb, out, buf)
        time.sleep(0.05)
        assert out.sum() == 0  # B has not copied yet: it waits for A's event
        gate.set()
        qb.wait()
        assert (out == trial + 1).all()
        qa.wait()


@gpu
def test_cross_backend_events(device):
    """A CPU queue waits for a device event and a device queue waits for a CPU event."""
    dq, hq = pk.Queue(device), pk.Queue(pk.host())
    n = 4096
    buf = pk.Buffer(device, n, np.float32, queue=dq)
    host = pk.Buffer(pk.host(), n, np.float32)
    gate = threading.Event()
    dq.enqueue(lambda: gate.wait(60))
    pk.memcpy(dq, buf, np.full(n, 3, np.float32))
    pk.memcpy(dq, host, buf)
    dev_ev = pk.Event(device)
    dq.record(dev_ev)
    hq.wait_for(dev_ev)
    seen = []
    hq.enqueue(lambda: seen.append(float(host.array.sum())))
    gate.set()
    hq.wait()
    assert seen == [3 * n]
    # and the other way round
    host_ev = pk.Event(pk.host())
    gate2 = threading.Event()
    hq.enqueue(lambda: gate2.wait(60))
    hq.enqueue(lambda: host.array.fill(5))
    hq.record(host_ev)
    dq.wait_for(host_ev)
    pk.memcpy(dq, buf, host)
    out = np.zeros(n, np.float32)
    pk.memcpy(dq, out, buf)
    gate2.set()
    dq.wait()
    assert (out == 5).all()


@gpu
def test_host_memory_of_an_async_copy_stays_alive(device):
    q = pk.Queue(device)
    n = 1 << 20
    buf = pk.Buffer(device, n, np.float32, queue=q)
    gate = threading.Event()
    q.enqueue(lambda: gate.wait(60))
    pk.memcpy(q, buf, np.full(n, 2, np.float32))  # the temporary is only referenced by the queue
    for _ in range(8):  # churn the host allocator while the copy is pending
        pk.Buffer(pk.host(), n, np.float32).array.fill(9)
    gate.set()
    out = np.zeros(n, np.float32)
    pk.memcpy(q, out, buf)
    q.wait()
    assert (out == 2).all()


@gpu
def test_memory_of_another_device_is_refused(device, queue):
    other = pk.Buffer(pk.host(), 16, np.float32)
    dev_buf = pk.Buffer(device, 16, np.float32)
    host_q = pk.Queue(pk.host())
    with pytest.raises(pk.DeviceMismatch):
        pk.memcpy(host_q, other, dev_buf)  # a host queue cannot touch device memory
    with pytest.raises(ValueError):
        pk.Buffer(device, 16, np.float32, queue=host_q)
