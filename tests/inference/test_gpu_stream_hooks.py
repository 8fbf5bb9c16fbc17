"""Issue 15 items 2 and 6 through the real call paths, on the kernel-running cupy stand-in in
both personalities (backends/emulator/fake_cupy.py + fake_cupy_kernels.py):

- (6) ``Model.forward`` on the cuda memory path runs in the queue's order (after host tasks
  still outstanding), on the queue's stream, keeps its input and output collections alive while
  the stream may still read them, and returns on a blocking queue only once the stream is done;
- (2) on HIP, block tensors come through DLPack without cupy's stream handshake: no event of
  cupy's current (null) stream is waited on, and the tensors alias the buffers.

torch here has no CUDA: its device and stream are the host's (alpyka_testing/backends/standin_torch.py);
Model.forward, the tensor path and the queue are the real code.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.backends.standin_torch import TorchOnStream, patch_torch
from alpyka_testing.inference import MLP, Particles, Preds, features, fill_particles
from backends._cupy_common import CupyBackend
from backends.emulator.fake_cupy import make_fake_cupy
from backends.emulator.fake_cupy_kernels import enable_execution
from inference import Model, ModelMetadata, SoAMetadata
from portable import _registry


@pytest.fixture(params=["cuda", "rocm"])
def standin(request, monkeypatch) -> tuple[CupyBackend, TorchOnStream]:
    """A kernel-running stand-in as the cuda (CUDA personality) or rocm (HIP) backend, with
    the inference layer's torch device and stream routed onto it."""
    name = request.param
    backend = CupyBackend(name, enable_execution(make_fake_cupy(n_devices=2, is_hip=name == "rocm")))
    monkeypatch.setitem(_registry._loaded, name, backend)
    monkeypatch.delitem(_registry._reasons, name, raising=False)
    return backend, patch_torch(monkeypatch)


def _model_io(queue: pk.Queue, n: int, seed: int = 3):
    data = fill_particles(n, seed)
    coll = pk.PortableCollection.from_dict(Particles, data, queue)
    out = pk.PortableCollection.from_dict(
        Preds, {k: np.full(n, -7.0, Preds.field(k).dtype) for k in Preds.field_names()}, queue
    )
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    return coll, out, meta, data


class _Recording(MLP):
    """The test MLP, noting when it ran and whether torch's stream block was active."""

    def __init__(self, log: list, torch_stream: TorchOnStream) -> None:
        super().__init__()
        self.log, self.torch_stream = log, torch_stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append(("model", self.torch_stream.active))
        return super().forward(x)


def test_6_forward_runs_after_outstanding_host_tasks_on_the_queue_stream(standin):
    backend, torch_stream = standin
    q = pk.Queue(pk.device(backend.name))
    n = 64
    coll, out, meta, data = _model_io(q, n)
    log: list = []
    model = Model(_Recording(log, torch_stream)).to(q)
    q.enqueue_host(lambda: (time.sleep(0.1), log.append(("host", 0))))
    model.forward(meta)
    assert log == [], "forward ran the model before the host task enqueued ahead of it"
    q.wait()
    assert log == [("host", 0), ("model", 1)]  # after the host task, inside the stream block
    assert torch_stream.streams == [q.native_handle]  # torch's current stream: the queue's
    cols = out.to_dict(q)
    with torch.no_grad():
        ref = MLP()(features(data)).numpy()
    np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-6)
    assert (cols["score"] == -7).all()


def test_6_forward_keeps_its_collections_alive_while_the_stream_reads_them(standin):
    backend, torch_stream = standin
    q = pk.Queue(pk.device(backend.name))
    coll, out, meta, _ = _model_io(q, 32)
    model = Model(MLP()).to(q)
    q.wait()
    gate = threading.Event()
    torch_stream.device_work = lambda: gate.wait(60)  # torch's kernels still on the GPU
    model.forward(meta)
    refs = [weakref.ref(coll), weakref.ref(out)]
    del coll, out, meta
    gc.collect()
    try:
        assert all(r() is not None for r in refs), "a collection died while the model's work could read it"
        assert not q.is_idle()
    finally:
        gate.set()
    q.wait()


def test_6_blocking_queue_returns_once_the_models_work_is_done(standin):
    backend, torch_stream = standin
    qb = pk.Queue(pk.device(backend.name), blocking=True)
    coll, out, meta, _ = _model_io(qb, 32)
    done = threading.Event()
    torch_stream.device_work = lambda: (time.sleep(0.1), done.set())
    Model(MLP()).to(qb).forward(meta)
    assert done.is_set(), "a blocking queue returned before the model's stream work finished"
    assert qb._impl.stream.done


def test_2_block_tensors_alias_the_buffers_without_a_null_stream_sync(standin):
    """cuda: through __cuda_array_interface__; rocm (no CAI on HIP): through DLPack with
    stream=-1, so cupy records no event on its current (null) stream for torch to wait on."""
    backend, _ = standin
    q = pk.Queue(pk.device(backend.name))
    coll, out, meta, data = _model_io(q, 48)
    q.wait()
    arr = coll.buffer.device.backend.array_factory(coll.buffer, False)(0, np.dtype(np.float32), (4,), (4,))
    assert hasattr(arr, "__cuda_array_interface__") == (backend.name == "cuda")
    rt = backend.cupy.rt
    x = meta.inputs.device_tensor("features")
    assert x.untyped_storage().data_ptr() == coll.buffer.ptr  # zero copies: the buffer's own memory
    np.testing.assert_array_equal(x.numpy(), features(data).numpy())
    Model(MLP()).to(q).forward(meta)
    q.wait()
    assert rt.dlpack_syncs == []  # no handshake with cupy's current stream, on either path
    assert np.isfinite(out.to_dict(q)["m"]).all()
