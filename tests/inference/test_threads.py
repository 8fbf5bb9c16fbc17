"""One Model shared by several threads, each with its own queue; torch's thread settings."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import Particles, Preds, TwoHeads, features, fill_particles
from alpyka_testing.threads import run_threads
from inference import Model, ModelMetadata, SoAMetadata, set_torch_threads, torch_threads


@pytest.mark.parametrize("kind", ["eager", "jit", "onnx"])
def test_four_threads_four_queues_one_model(device, kind, request):
    """ONNX too: the model's workspace (gather buffers, I/O binding, outputs) serves one pass at
    a time, the others run on fresh tensors."""
    module = TwoHeads()
    if kind == "onnx":
        model = Model(request.getfixturevalue("exported_files")["heads.onnx"])
    elif kind == "jit":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model = Model(torch.jit.trace(module, torch.randn(16, 3)))
    else:
        model = Model(module)
    results: dict[int, list[bool]] = {}
    barrier = threading.Barrier(4)

    def work(t: int) -> None:
        q = pk.Queue(device)
        model.to(q)  # binds for this thread
        ok = []
        barrier.wait()
        for it in range(5):
            n = 64 * (t + 1) + 7 * it
            data = fill_particles(n, seed=100 * t + it)
            coll = pk.PortableCollection.from_dict(Particles, data, q)
            out = pk.PortableCollection(Preds, n, q)
            model.forward(
                ModelMetadata(
                    SoAMetadata(coll).append_block("f", "x", "y", "z"),
                    SoAMetadata(out).append_block("p", "m", "n").append_block("s", "score"),
                )
            )
            assert model.queue is q
            cols = out.to_dict(q)
            with torch.no_grad():
                preds, score = module(features(data))
            ok.append(
                np.allclose(np.stack([cols["m"], cols["n"]], 1), preds.numpy(), atol=1e-5)
                and np.allclose(cols["score"], score.numpy(), atol=1e-5)
            )
        results[t] = ok

    run_threads(work, 4)
    assert sorted(results) == [0, 1, 2, 3] and all(all(v) for v in results.values()), results


def test_torch_threads_default_to_one_and_are_configurable():
    Model(TwoHeads())  # applies the defaults
    assert torch_threads()["intra_op"] == 1
    seen = {}

    def in_worker():  # threads started later (queue workers) see the setting too
        seen["n"] = torch.get_num_threads()

    q = pk.Queue(pk.host())
    q.enqueue(in_worker)
    q.wait()
    assert seen["n"] == 1
    set_torch_threads(2)
    try:
        assert torch.get_num_threads() == 2
    finally:
        set_torch_threads(1)
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="positive"):
        set_torch_threads(0)
