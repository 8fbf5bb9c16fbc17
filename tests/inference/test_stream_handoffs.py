"""Issue 32 item 4: memory handed to torch, numpy and other GPU code is ordered after the queue
work that writes it (portable/_handoff.py, portable/_buffer.py, inference/_metadata.py).

- on every backend with addressable memory, ``torch.from_dlpack(buf)``, ``np.asarray(buf)``
  and ``SoAMetadata.numpy()`` right after a long kernel on a non-blocking queue see its results
  (the consumer waits for the buffer's last queue); from a host function of that queue nothing
  is waited for (no deadlock);
- on the cupy stand-in (both personalities), ``__dlpack__(stream=s)`` makes the consumer's
  stream ``s`` wait for the queue's work (a stream of the stand-in reads only after it), also
  when that work is still held behind a host function; the CUDA array interface (v3) names the
  queue's stream in ``stream``; ``write_outputs`` on a queue makes the queue's stream wait for
  the stream that made the values and ``record_stream``s them for it.

A real-GPU counterpart: benchmarks/gpu_checks/stream_handoffs.py.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.backends.standin_torch import TorchOnStream, patch_torch
from alpyka_testing.inference import MLP, Preds, features
from alpyka_testing.stream_cases import expected, launch_slow_fill
from backends._cupy_common import CupyBackend
from backends.emulator.fake_cupy import make_fake_cupy
from backends.emulator.fake_cupy_kernels import enable_execution
from inference import Model, ModelMetadata, SoAMetadata
from inference._torch_queue import memory_path
from portable import _registry

N = 16
REPS = 3_000_000  # per element: a dependent chain of multiply-adds, tens of ms in all


@pk.kernel
def slow_fill_preds(acc, preds, reps, n):
    for i in acc.uniform_elements(n):
        v = 1.0
        for _ in range(reps):
            v = v * 1.0000001 + 1e-9
        preds.extra[i] = v
        preds.m[i] = 2.0 * i + 1.0


def _addressable(queue: pk.Queue) -> None:
    if memory_path(queue.device) == "copy":
        pytest.skip(f"memory of {queue.device} is not addressable from Python (no DLPack, no numpy view)")


def _zeroed(queue: pk.Queue, shape, dtype=np.float32) -> pk.Buffer:
    buf = pk.Buffer(queue.device, shape, dtype)
    pk.memset(queue, buf, 0)
    queue.wait()
    return buf


def _slow_fill(queue: pk.Queue, out: pk.Buffer, sink: pk.Buffer) -> None:
    launch_slow_fill(queue, out, sink, REPS, N)


def test_from_dlpack_right_after_a_long_kernel_sees_its_results(queue):
    _addressable(queue)
    out, sink = _zeroed(queue, (N,)), _zeroed(queue, (N,), np.float64)
    _slow_fill(queue, out, sink)
    got = torch.from_dlpack(out).numpy().copy()  # the consumer reads at once
    np.testing.assert_array_equal(got, expected(N))
    assert np.isfinite(torch.from_dlpack(sink).numpy()).all()


def test_numpy_of_a_host_buffer_right_after_a_long_kernel_sees_its_results(queue):
    if not queue.device.is_host_memory:
        pytest.skip(f"buffers of {queue.device} are device memory: np.asarray refuses them")
    out, sink = _zeroed(queue, (N,)), _zeroed(queue, (N,), np.float64)
    _slow_fill(queue, out, sink)
    np.testing.assert_array_equal(np.asarray(out).copy(), expected(N))


def test_a_host_function_of_the_queue_reads_the_buffer_without_waiting_for_itself(queue):
    if not queue.device.is_host_memory:
        pytest.skip(f"buffers of {queue.device} are device memory: np.asarray refuses them")
    out, sink = _zeroed(queue, (N,)), _zeroed(queue, (N,), np.float64)
    _slow_fill(queue, out, sink)
    seen: list = []
    queue.enqueue_host(lambda: seen.append((np.asarray(out).copy(), torch.from_dlpack(out).numpy().copy())))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (queue.wait(), done.set()), daemon=True)
    waiter.start()
    assert done.wait(60), "a host function reading its own queue's buffer waited for itself"
    np.testing.assert_array_equal(seen[0][0], expected(N))
    np.testing.assert_array_equal(seen[0][1], expected(N))


def test_soa_metadata_numpy_right_after_a_long_kernel_sees_its_results(queue):
    """Every path: the host view, the stand-in's device tensor, the copy path's staging (opencl)."""
    coll = pk.PortableCollection(Preds, N, queue)
    pk.memset(queue, coll, 0)
    queue.wait()
    meta = SoAMetadata(coll).append_block("m", "m")
    pk.exec(queue, pk.valid_workdiv(queue.device, N), slow_fill_preds, coll.view(), np.int64(REPS), np.int64(N))
    got = np.array(meta.numpy("m"))
    np.testing.assert_array_equal(got.reshape(-1), expected(N))


def test_model_outputs_handed_out_right_after_forward_wait_for_the_pass(queue, make_particles):
    """The output collection was never used on the queue before: forward itself marks it (on
    CPU queues the pass is a host task, invisible to alpyka otherwise)."""
    if not queue.device.is_host_memory:
        pytest.skip(f"{queue.device}: the CPU pass (a host task) is what this checks")
    coll, data = make_particles(N)
    out = pk.PortableCollection(Preds, N, queue.device)  # no queue work on it
    out.view().m[:] = -7
    queue.wait()
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    model = Model(MLP()).to(queue)
    queue.enqueue_host(lambda: time.sleep(0.3))  # the pass runs behind it
    model.forward(meta)
    got = np.array(meta.outputs.numpy("preds"))
    with torch.no_grad():
        ref = MLP()(features(data)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- the cupy stand-in
@pytest.fixture(params=["cuda", "rocm"])
def standin(request, monkeypatch) -> tuple[CupyBackend, TorchOnStream]:
    """The kernel-running stand-in as the cuda (CUDA personality) or rocm (HIP) backend, with
    the inference layer's torch device and stream routed onto it (as test_gpu_stream_hooks.py)."""
    name = request.param
    backend = CupyBackend(name, enable_execution(make_fake_cupy(n_devices=2, is_hip=name == "rocm")))
    monkeypatch.setitem(_registry._loaded, name, backend)
    monkeypatch.delitem(_registry._reasons, name, raising=False)
    return backend, patch_torch(monkeypatch)


def _held_stream(q: pk.Queue) -> threading.Event:
    """Hold the queue's stream (a long kernel still running) until the returned gate is set."""
    gate = threading.Event()
    q._impl.stream.ex.submit(lambda: gate.wait(60))
    return gate


def _read_on(stream, buf: pk.Buffer, seen: list) -> None:
    """Enqueue a read of ``buf``'s bytes on a stand-in stream (a consumer's kernel)."""
    arr = buf.array
    stream.ex.submit(lambda: seen.append(np.array(arr, copy=True)))


def test_dlpack_consumer_stream_waits_for_the_queue(standin):
    backend, _ = standin
    cp = backend.cupy
    q = pk.Queue(pk.device(backend.name))
    buf = _zeroed(q, (N,), np.uint8)
    consumer = cp.cuda.Stream(non_blocking=True)
    gate = _held_stream(q)
    pk.memset(q, buf, 7)  # behind the held stream
    buf.__dlpack__(stream=consumer.ptr)
    seen: list = []
    _read_on(consumer, buf, seen)
    time.sleep(0.05)
    assert seen == [], "the consumer's stream read while the queue's work was still running"
    gate.set()
    consumer.synchronize()
    np.testing.assert_array_equal(seen[0], np.full(N, 7, np.uint8))
    assert cp.rt.dlpack_syncs == []  # no handshake with cupy's current stream: alpyka ordered it


def test_dlpack_waits_for_work_held_behind_a_host_function(standin):
    """CUDA/HIP queues keep work enqueued after a host function on the host until it ran: the
    hand-off puts it into the stream first, then the consumer's stream waits for it."""
    backend, _ = standin
    cp = backend.cupy
    q = pk.Queue(pk.device(backend.name))
    buf = _zeroed(q, (N,), np.uint8)
    consumer = cp.cuda.Stream(non_blocking=True)
    q.enqueue_host(lambda: time.sleep(0.2))
    pk.memset(q, buf, 9)  # not in the stream yet
    buf.__dlpack__(stream=consumer.ptr)
    seen: list = []
    _read_on(consumer, buf, seen)
    consumer.synchronize()
    np.testing.assert_array_equal(seen[0], np.full(N, 9, np.uint8))


def test_dlpack_without_a_stream_orders_the_legacy_default_stream(standin):
    """``stream=None`` is the legacy default stream; on the stand-in it is the host (torch reads
    the stand-in's memory on the CPU), so the call returns once the queue's work finished."""
    backend, _ = standin
    q = pk.Queue(pk.device(backend.name))
    buf = _zeroed(q, (N,), np.uint8)
    gate = _held_stream(q)
    pk.memset(q, buf, 5)
    threading.Timer(0.2, gate.set).start()
    t = torch.from_dlpack(buf)  # no stream: torch sees a CPU device here
    np.testing.assert_array_equal(t.numpy(), np.full(N, 5, np.uint8))


def test_collection_cuda_array_interface_names_the_queue_stream(standin):
    backend, _ = standin
    cp = backend.cupy
    q = pk.Queue(pk.device(backend.name))
    coll = pk.PortableCollection(Preds, N, q)
    pk.memset(q, coll, 0)
    q.wait()
    if backend.name == "rocm":  # cupy on HIP has no CUDA array interface
        assert not hasattr(coll, "__cuda_array_interface__")
        return
    assert coll.__cuda_array_interface__["stream"] is None  # nothing outstanding: no sync needed
    q.enqueue_host(lambda: time.sleep(0.2))
    pk.memset(q, coll, 3)  # held behind the host function
    cai = coll.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["stream"] == q.native_handle
    # the consumer synchronises on that stream (CAI v3): the work must be in it by now
    cp.cuda.ExternalStream(cai["stream"]).synchronize()
    raw = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * coll.nbytes).from_address(cai["data"][0]))
    assert (raw == 3).all()


def test_write_outputs_waits_for_the_producing_stream_and_keeps_the_values(standin):
    backend, torch_stream = standin
    q = pk.Queue(pk.device(backend.name))
    out = pk.PortableCollection(Preds, N, q)
    pk.memset(q, out, 0)
    q.wait()
    meta = SoAMetadata(out).append_block("preds", "m", "n")
    values = torch.arange(2 * N, dtype=torch.float32).reshape(N, 2)  # made on torch's current stream
    meta.write_outputs({"preds": values}, queue=q)
    handle = q.native_handle
    # the queue's stream waits for an event of the stream the values were made on (the default, 0)
    assert torch_stream.stream_waits == [(handle, 0)]
    # and the values' memory is not reused before the queue's stream passed the copy
    assert [(t is values, s) for t, s in torch_stream.kept_for] == [(True, handle)]
    assert out.buffer._last.queue() is q  # the collection counts as written by q (DLPack waits for it)
    cols = out.to_dict(q)
    np.testing.assert_array_equal(np.stack([cols["m"], cols["n"]], 1), values.numpy())


def test_write_outputs_on_the_current_stream_needs_no_hand_off(standin):
    backend, torch_stream = standin
    q = pk.Queue(pk.device(backend.name))
    out = pk.PortableCollection(Preds, N, q)
    q.wait()
    meta = SoAMetadata(out).append_block("preds", "m", "n")
    values = torch.ones(N, 2)
    meta.write_outputs({"preds": values})  # no queue: on the stream the values were made on
    assert torch_stream.stream_waits == [] and torch_stream.kept_for == []
    np.testing.assert_array_equal(np.asarray(out.view().m), np.ones(N, np.float32))
