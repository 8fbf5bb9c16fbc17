"""kernel -> model -> kernel with real @pk.kernel kernels on one non-blocking queue, one wait."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from inference import Model, ModelMetadata, SoAMetadata
from inference_testmodels import MLP, Particles, Preds

@pk.kernel
def produce(acc, coll, n):
    for i in acc.uniform_elements(n):
        coll.x[i] = i * 0.01
        coll.y[i] = 1.0 - i * 0.02
        coll.z[i] = (i % 7) * 0.25


@pk.kernel
def consume(acc, out, n):
    for i in acc.uniform_elements(n):
        out.score[i] = out.m[i] + 2.0 * out.n[i]


@pytest.mark.parametrize("n", [300, 2049])
def test_kernel_model_kernel(device, n):
    q = pk.Queue(device)  # non-blocking
    coll = pk.PortableCollection(Particles, n, q)
    out = pk.PortableCollection(Preds, n, q)
    module = MLP()
    model = Model(module).to(q)
    meta = ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"),
                         SoAMetadata(out).append_block("preds", "m", "n"))
    wd = pk.valid_workdiv(device, n)
    pk.exec(q, wd, produce, coll.view(), np.int32(n))
    model.forward(meta)
    pk.exec(q, wd, consume, out.view(), np.int32(n))
    cols = out.to_dict(q)  # the only wait
    i = np.arange(n)
    x = np.stack([i * 0.01, 1.0 - i * 0.02, (i % 7) * 0.25], axis=1).astype(np.float32)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols["score"], ref[:, 0] + 2 * ref[:, 1], rtol=1e-5, atol=1e-5)
