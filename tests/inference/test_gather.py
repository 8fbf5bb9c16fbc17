"""The gather of column-major SoA blocks into row-major tensors (ONNX Runtime, AOTInductor):
chunked copies equal ``contiguous()``, and the buffers a prepared pass keeps are refilled on
every forward (issue 11: the DeepMET-shaped benchmark)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from inference import Model, ModelMetadata, SoAMetadata
from inference._plan import GATHER_SPAN, gather
from inference_testmodels import MLP, Particles, Preds, features, fill_particles


def _column_major(n: int, inner: tuple[int, ...], padded: int, dtype=torch.float32) -> torch.Tensor:
    """A block like a SoA matrix/vector column: the event axis has stride 1, columns ``padded`` apart."""
    count = int(np.prod(inner))
    flat = torch.arange(count * padded, dtype=torch.float64).to(dtype)
    strides = tuple(padded * int(np.prod(inner[:i])) for i in range(len(inner)))  # first inner axis fastest
    return flat.as_strided((n,) + inner, (1,) + strides)


@pytest.mark.parametrize("inner", [(3,), (GATHER_SPAN * 3 + 5,), (700, 8), (5, 4, 3), (1000, 1), (2, 600)])
@pytest.mark.parametrize("n,padded", [(2, 32), (37, 64), (128, 128)])
def test_gather_equals_contiguous(inner, n, padded):
    t = _column_major(n, inner, padded)
    assert not t.is_contiguous()
    expected = t.contiguous()
    assert torch.equal(gather(t), expected)
    out = torch.full(t.shape, -1.0)
    assert gather(t, out) is out and torch.equal(out, expected)
    as_double = gather(t, torch.empty(t.shape, dtype=torch.float64))  # converted into the buffer's dtype
    assert torch.equal(as_double, expected.double())
    assert gather(expected) is expected  # row-major already: no copy


def test_kept_buffers_are_refilled_each_forward(exported_files):
    q = pk.Queue(pk.device("cpu_serial"))
    n = 300
    data = fill_particles(n, seed=1)
    coll = pk.PortableCollection.from_dict(Particles, data, q)
    out = pk.PortableCollection.from_dict(Preds, {k: np.zeros(n, Preds.field(k).dtype) for k in Preds.field_names()}, q)
    model = Model(exported_files["mlp.onnx"]).to(q)
    meta = ModelMetadata(SoAMetadata(coll).append_block("features", "x", "y", "z"),
                         SoAMetadata(out).append_block("preds", "m", "n"))
    for seed in (1, 2, 3):  # the same prepared pass, new input values each time
        data = fill_particles(n, seed=seed)
        q.wait()
        view = coll.view()
        for k in ("x", "y", "z"):
            getattr(view, k)[...] = data[k]
        model.forward(meta)
        cols = out.to_dict(q)
        with torch.no_grad():
            ref = MLP()(features(data)).numpy()
        np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)
    assert "gathered" in repr(model) and "'features'" in repr(model)
