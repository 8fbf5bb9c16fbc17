"""Six threads share one non-blocking queue with an ONNX and an exported model, each forward over
a new collection of another size (1-3000 rows): more geometries than the models' caches keep, so
their caches are cleared while other threads use them. Reported once (1 run in 9): "dictionary
changed size during iteration"; not reproduced here in 9 runs of this test, and no dict shared
between threads is iterated in alpyka's code (the caches are read and written by key, and cleared
whole); kept as the regression test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Particles, Preds, features, fill_particles
from alpyka_testing.threads import run_threads
from inference import Model, ModelMetadata, SoAMetadata

pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")
THREADS, FORWARDS = 6, 25


@pytest.mark.alpyka_backends("cpu_threads")
def test_six_threads_share_a_queue_with_two_models_over_changing_sizes(queue, exported_files):
    models = [Model(exported_files["mlp.onnx"]), Model(exported_files["mlp.pt2"])]
    ref = MLP()

    def work(t: int) -> None:
        rng = np.random.default_rng(100 + t)
        kept = []
        for i in range(FORWARDS):
            n = int(rng.integers(1, 3000))
            data = fill_particles(n, seed=1000 * t + i)
            coll = pk.PortableCollection.from_dict(Particles, data, queue)
            out = pk.PortableCollection(Preds, n, queue)
            models[(t + i) % 2].forward(
                ModelMetadata(
                    SoAMetadata(coll).append_block("features", "x", "y", "z"),
                    SoAMetadata(out).append_block("preds", "m", "n"),
                ),
                queue,
            )
            kept.append((data, out))
        queue.wait()
        with torch.no_grad():
            for data, out in kept[-3:]:
                cols = out.to_dict(queue)
                want = ref(features(data)).numpy()
                np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), want, rtol=1e-4, atol=1e-4)

    run_threads(work, THREADS, timeout=200)
