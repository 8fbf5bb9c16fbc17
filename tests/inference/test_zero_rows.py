"""Zero rows on every local route: an event with no candidates is routine, so a forward over a
0-row collection must work (and write nothing) for an ONNX file, an exported program, an
AOTInductor package and an eager module, whole-collection and in mini-batches."""

from __future__ import annotations

import numpy as np
import pytest

from alpyka_testing.inference import MLP
from inference import Model, ModelMetadata, SoAMetadata

pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")


@pytest.mark.parametrize("route", ["onnx", "pt2", "aot", "eager"])
@pytest.mark.parametrize("batch_size", [None, 32])
def test_a_forward_over_zero_rows_works_and_writes_nothing(
    queue, make_particles, make_preds, exported_files, request, route, batch_size
):
    if route == "aot":  # compiled for the queue's device type (built on first use, then cached)
        source = request.getfixturevalue("queue_aot_package")
    else:
        source = {"onnx": exported_files["mlp.onnx"], "pt2": exported_files["mlp.pt2"], "eager": MLP()}[route]
    model = Model(source).to(queue)
    for n in (0, 3, 0):  # zero rows, rows, and zero again (a cached pass must not assume rows)
        coll, _ = make_particles(n)
        out = make_preds(n)
        meta = ModelMetadata(
            SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
        )
        model.forward(meta, batch_size=batch_size)
        cols = out.to_dict(queue)
        assert all(len(v) == n for v in cols.values())
        if n:
            assert np.isfinite(cols["m"]).all() and (cols["score"] == -7).all()
