"""Model("x.onnx") (ONNX Runtime) and Model("x.pt2") (a torch.export program) give eager's
outputs on every backend (the copy path on opencl): one and several inputs and outputs,
mini-batches, and kernel -> model -> kernel on one non-blocking queue with no wait."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import (
    MLP,
    Totals,
    TwoHeads,
    UsesEverything,
    features,
    kernel_model_kernel,
    onnx_unavailable,
    skip_unless_onnx_runs_on,
)
from inference import Model, ModelMetadata, SoAMetadata

pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")
FORMATS = ["onnx", "pt2"]


def _preds(cols) -> np.ndarray:
    return np.stack([cols["m"], cols["n"]], 1)


def _eager(module, *tensors):
    with torch.no_grad():
        return module(*tensors)


@pytest.mark.hip_differs  # the rocm stand-in too (smoke): exported models on a HIP queue
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", [5, 1000])
def test_matches_eager(queue, make_particles, make_preds, exported_files, fmt, n):
    coll, data = make_particles(n, seed=3)
    out = make_preds(n)
    model = Model(exported_files[f"mlp.{fmt}"]).to(queue)
    assert model.kind == {"onnx": "onnx", "pt2": "exported"}[fmt]
    model.forward(
        ModelMetadata(
            SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
        )
    )
    cols = out.to_dict(queue)
    np.testing.assert_allclose(_preds(cols), _eager(MLP(), features(data)).numpy(), rtol=1e-5, atol=1e-5)
    assert (cols["score"] == -7).all() and (cols["extra"] == -7).all()  # other columns untouched


@pytest.mark.parametrize("fmt", FORMATS)
def test_vector_matrix_and_scalar_inputs(queue, make_particles, make_preds, exported_files, fmt):
    n = 300
    coll, data = make_particles(n, seed=5)
    out = make_preds(n)
    inputs = (
        SoAMetadata(coll)
        .append_block("f", "x", "y", "z")
        .append_block("p", "p")
        .append_block("cov", "cov")
        .append_block("scale", "scale")
    )
    model = Model(exported_files[f"everything.{fmt}"]).to(queue)
    model.forward(ModelMetadata(inputs, SoAMetadata(out).append_block("preds", "m", "n")))
    ref = _eager(
        UsesEverything(),
        features(data),
        torch.from_numpy(data["p"]),
        torch.from_numpy(data["cov"]),
        torch.full((n, 1), 1.5),
    )
    np.testing.assert_allclose(_preds(out.to_dict(queue)), ref.numpy(), rtol=1e-5, atol=1e-5)
    if fmt == "onnx":  # every block here is column-major (or a broadcast): each one gathered, and said so
        assert "gathered" in repr(model) and "'cov'" in repr(model)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("order", [["preds", "score"], ["score", "preds"]])
def test_several_outputs(queue, make_particles, make_preds, exported_files, fmt, order):
    n = 200
    coll, data = make_particles(n, seed=7)
    out = make_preds(n)
    outputs = SoAMetadata(out).append_block("preds", "m", "n").append_block("score", "score").change_order(order)
    if fmt == "pt2" and order[0] == "score":
        # a torch.export program returns a tuple, given to the blocks in their order (ONNX
        # outputs named like the blocks go by name): here [n, 2] meets the 1-column "score"
        before = out.to_dict(queue)
        model = Model(exported_files[f"heads.{fmt}"]).to(queue)
        with pytest.raises(
            (ValueError, pk.AsyncError), match=r"block 'score' has shape \[200, 2\].*nothing was written"
        ):
            model.forward(ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), outputs))
            queue.wait()
        after = out.to_dict(queue)
        for k in before:
            np.testing.assert_array_equal(after[k], before[k])  # nothing written
        return
    Model(exported_files[f"heads.{fmt}"]).to(queue).forward(
        ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), outputs)
    )
    preds, score = _eager(TwoHeads(), features(data))
    cols = out.to_dict(queue)
    np.testing.assert_allclose(_preds(cols), preds.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols["score"], score.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mini_batches(queue, make_particles, make_preds, exported_files, fmt):
    n = 200
    coll, data = make_particles(n, seed=11)
    out = make_preds(n)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"),
        SoAMetadata(out).append_block("preds", "m", "n"),
        batch_size=64,
    )
    Model(exported_files[f"mlp.{fmt}"]).to(queue).forward(meta)
    np.testing.assert_allclose(_preds(out.to_dict(queue)), _eager(MLP(), features(data)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["onnx", "pt2", "module"])
def test_outputs_of_another_size_than_the_inputs(queue, make_particles, make_preds, exported_files, fmt):
    """A model may give fewer rows than it reads (per-candidate inputs, a per-event result): the
    outputs take the output collection's size (ONNX Runtime's bound outputs included)."""
    n = 300
    coll, data = make_particles(n, seed=13)
    out = make_preds(1)
    model = Model(Totals() if fmt == "module" else exported_files[f"totals.{fmt}"]).to(queue)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    for _ in range(2):  # the first forward and the prepared plan's
        model.forward(meta)
        np.testing.assert_allclose(
            _preds(out.to_dict(queue)), _eager(Totals(), features(data)).numpy(), rtol=1e-4, atol=1e-4
        )
    with pytest.raises(ValueError, match="one size"):  # mini-batches need one size in and out
        ModelMetadata(meta.inputs, meta.outputs, batch_size=100)


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_model_kernel_without_wait(device, exported_files, fmt):
    kernel_model_kernel(device, exported_files[f"mlp.{fmt}"], 2049)


def test_one_column_block_is_bound_in_place(queue, make_particles, make_preds, exported_files):
    """A single-column block is dense row-major: ORT reads it where it lies (no gather)."""
    skip_unless_onnx_runs_on(queue.device)
    q = queue
    coll, _ = make_particles(10)
    out = make_preds(10)
    model = Model(exported_files["double.onnx"]).to(q)
    model.forward(
        ModelMetadata(SoAMetadata(coll).append_block("x", "x"), SoAMetadata(out).append_block("score", "score"))
    )
    cols, src = out.to_dict(q), coll.to_dict(q)
    np.testing.assert_allclose(cols["score"], src["x"] * 2 + 1, rtol=1e-6)
    assert "bound in place" in repr(model) and "gathered" not in repr(model)


def test_no_deprecation_warning_from_loading_or_running(queue, make_particles, make_preds, exported_files, tmp_path):
    """torch.export and ONNX models, and a legacy TorchScript file: nothing warns the user (the
    ONNX file where this ONNX Runtime can run it on the queue's device)."""
    from inference._loading import jit_save_bytes

    scripted = tmp_path / "mlp.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted.write_bytes(jit_save_bytes(torch.jit.script(MLP())))
    coll, _ = make_particles(50)
    out = make_preds(50)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnx = [] if onnx_unavailable(queue.device) else [exported_files["mlp.onnx"]]
        for path in (exported_files["mlp.pt2"], *onnx, str(scripted)):
            Model(path).to(queue).forward(meta)
            queue.wait()


def test_the_same_inputs_into_output_blocks_of_another_name(queue, make_particles, make_preds, exported_files):
    """ONNX Runtime's kept binding is reused only for the same outputs too: the same input memory
    written into a block of another name gets its own outputs, not the last pass's."""
    skip_unless_onnx_runs_on(queue.device)
    coll, data = make_particles(64, seed=21)
    out = make_preds(64)
    model = Model(exported_files["mlp.onnx"]).to(queue)
    inputs = SoAMetadata(coll).append_block("f", "x", "y", "z")
    want = _eager(MLP(), features(data)).numpy()
    for name in ("preds", "other", "preds"):
        outputs = SoAMetadata(out).append_block(name, "m", "n")
        model.forward(ModelMetadata(inputs, outputs))
        np.testing.assert_allclose(_preds(out.to_dict(queue)), want, rtol=1e-5, atol=1e-5)
