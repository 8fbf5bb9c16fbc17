"""The backend interface (portable.spi): every backend's queues and events meet its protocols,
and the public Queue/Event methods that outside code uses (enqueue_native, record_external)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import portable as pk
from portable import spi


def test_backend_objects_meet_the_protocols(device):
    q = pk.Queue(device)
    ev = pk.Event(device)
    assert isinstance(q._impl, spi.QueueImpl)
    assert isinstance(ev._impl, spi.EventImpl) and isinstance(ev._impl, spi.Waitable)
    assert isinstance(device.backend, spi.Backend)
    assert isinstance(device.backend.allocator(device), spi.Allocator)


def test_the_users_surface_leaves_the_backend_interface_to_spi():
    for name in ("Backend", "MemRef", "CachingAllocator"):
        assert name not in pk.__all__ and name in spi.__all__
        with pytest.warns(DeprecationWarning, match="import it from portable.spi"):
            assert getattr(pk, name) is getattr(spi, name)


def test_backends_reach_a_queues_implementation_through_spi(device):
    q = pk.Queue(device)
    assert spi.queue_impl(q) is q._impl
    assert spi.queue_impl(None) is None
    with pytest.raises(TypeError, match="needs a pk.Queue, got object"):
        spi.queue_impl(object())


def test_enqueue_native_runs_in_queue_order(queue):
    order = []
    gate = threading.Event()
    keep = np.zeros(4)
    queue.enqueue_host(lambda: (gate.wait(5), order.append("host")))
    queue.enqueue_native(lambda: order.append("native"), keep)
    gate.set()
    queue.wait()
    if queue.device.backend_name in ("opencl",):  # fn enqueues on the in-order command queue at once
        assert sorted(order) == ["host", "native"]
    else:
        assert order == ["host", "native"]


def test_external_event_completes_and_fails():
    ev = pk.Event(pk.host())
    token = ev.record_external()
    assert not ev.is_complete()
    q = pk.Queue(pk.device("cpu_serial"))
    q.wait_for(ev)
    ran = []
    q.enqueue_host(lambda: ran.append(1))
    threading.Timer(0.05, ev.complete_external, (token,)).start()
    q.wait()
    assert ran == [1] and ev.is_complete()
    token = ev.record_external()
    ev.complete_external(token, ValueError("request failed"))
    with pytest.raises(pk.AsyncError, match="request failed"):
        ev.wait()


def test_record_external_needs_a_host_event():
    gpu = [d for b in pk.available_backends() for d in pk.devices(b) if not d.is_host_memory]
    if not gpu:
        pytest.skip("no device backend here")
    with pytest.raises(TypeError, match="cannot be completed by outside code"):
        pk.Event(gpu[0]).record_external()


def test_pinned_host_memory_comes_from_the_registry():
    alloc = spi.pinned_host_allocator()
    assert alloc is None or isinstance(alloc, spi.Allocator)
