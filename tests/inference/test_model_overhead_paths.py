"""The caches that keep Model.forward and SoAMetadata near the floor: they never change an answer
(checks still raise, blocks added later are seen, collections are freed)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Particles, TwoHeads, features
from inference import Model, ModelMetadata, SoAMetadata
from inference._block import make_block


def test_cached_geometry_still_refuses_bad_blocks():
    make_block(Particles, 10, 0, "f", ("x", "y", "z"))
    for _ in range(2):  # the second time from the caches
        with pytest.raises(ValueError, match="not adjacent"):
            make_block(Particles, 10, 0, "f", ("x", "z"))
        with pytest.raises(TypeError, match="one kind and component shape"):
            make_block(Particles, 10, 0, "f", ("z", "p"))
        with pytest.raises(TypeError, match="share one dtype"):
            make_block(Particles, 10, 0, "f", ("z", "w"))
        with pytest.raises(TypeError, match="non-empty string"):
            make_block(Particles, 10, 0, "", ("x", "y", "z"))
    a = make_block(Particles, 10, 0, "f", ("x", "y", "z"))
    b = make_block(Particles, 1000, 0, "f", ("x", "y", "z"))
    assert a.shape == (10, 3) and b.shape == (1000, 3) and a.strides != b.strides


def test_blocks_added_after_a_forward_are_seen(queue, make_particles, make_preds):
    coll, data = make_particles(64, seed=2)
    out = make_preds(64)
    outputs = SoAMetadata(out).append_block("preds", "m", "n")
    meta = ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), outputs)
    Model(MLP()).to(queue).forward(meta)
    queue.wait()  # the pass reads the metadata when it runs
    outputs.append_block("score", "score")
    Model(TwoHeads()).to(queue).forward(meta)
    preds, score = TwoHeads()(features(data))
    cols = out.to_dict(queue)
    np.testing.assert_allclose(cols["score"], score.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_shared_flat_tensor_does_not_keep_a_collection_alive():
    q = pk.Queue(pk.host(), blocking=True)
    coll = pk.PortableCollection(Particles, 100, q)
    t = SoAMetadata(coll).append_block("f", "x", "y", "z").tensor("f")
    assert SoAMetadata(coll).append_block("f", "x", "y", "z").tensor("f").data_ptr() == t.data_ptr()
    ref = weakref.ref(coll)
    del coll
    gc.collect()
    assert ref() is None  # the tensor keeps the memory, not the collection
    assert t.shape == (100, 3)


def test_device_checks_are_cached_per_device_combination(make_particles, make_preds, queue):
    coll, _ = make_particles(16)
    out = make_preds(16)
    model = Model(MLP()).to(queue)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    model.forward(meta)
    model.forward(meta)
    queue.wait()
    assert len(model._access_ok) == 1
    features = (
        SoAMetadata(coll).append_block("f", "x", "y", "z").tensor("f")
        if meta.inputs.zero_copy
        else meta.inputs.tensor("f")
    )
    with torch.no_grad():  # the reference on the CPU (a zero-copy tensor lies on the queue's device)
        torch.testing.assert_close(
            torch.from_numpy(np.stack([out.to_dict(queue)[k] for k in "mn"], 1)),
            MLP()(features.cpu()),
            rtol=1e-5,
            atol=1e-5,
        )
