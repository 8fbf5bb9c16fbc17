"""Wrong input on the serving side (serve's model arguments, an ONNX file Triton cannot batch, a
model's results against its declared outputs, a pipeline request's tensors, a remote pipeline's
call) raises alpyka's error root, still the builtin it was, with the fix in the message."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_name, raises_type, raises_value
from inference._pipeline import _wire
from inference._tensor_desc import TensorDesc

from . import pipeline_support as S

torch = pytest.importorskip("torch")


def _specs(models, tmp_path, name=None):
    from inference.serving._spec import model_specs

    return model_specs(models, name=name, workdir=tmp_path, inputs=None, outputs=None)


def test_serve_model_arguments(tmp_path):
    mlp = tmp_path / "mlp.pt"
    torch.jit.script(torch.nn.Linear(3, 2)).save(str(mlp))
    (tmp_path / "sub").mkdir()
    torch.jit.script(torch.nn.Linear(3, 2)).save(str(tmp_path / "sub" / "mlp.pt"))
    (tmp_path / "notes.txt").write_text("no model")
    with raises_value(r"name= names one model; 2 were given \(use a mapping \{name: model\}\)"):
        _specs([str(mlp), str(mlp)], tmp_path, name="m")
    with raises_value(r"serve needs at least one model: a path, an nn\.Module or \{name: model\}"):
        _specs([], tmp_path)
    with raises_value(r"model name 'a b': use letters, digits, '_', '\.', '-'"):
        _specs({"a b": str(mlp)}, tmp_path)
    with raises_value(r"model names must be unique, got \['mlp', 'mlp'\]; name them with a mapping"):
        _specs([str(mlp), str(tmp_path / "sub" / "mlp.pt")], tmp_path)
    with raises_value(r"notes\.txt': serve hosts TorchScript \(\.pt\), torch\.export"):
        _specs(str(tmp_path / "notes.txt"), tmp_path)
    with raises_type(r"model 'model': serve takes a \.pt/\.pt2/\.onnx path or a torch\.nn\.Module, got int"):
        _specs(3, tmp_path)

    class Unscriptable(torch.nn.Module):
        def forward(self, x):
            return {1, 2} if x is None else x  # a set: TorchScript does not take it

    with raises_type(
        r"(?s)an nn\.Module is served as TorchScript and torch\.jit\.script failed .*save it as \.pt or \.pt2"
    ):
        _specs(Unscriptable(), tmp_path)


def test_onnx_fixed_batch_axis(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from inference.serving._spec import onnx_declarations

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "fixed", [x], [y])
    path = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with raises_value(r"has a fixed first axis of 2, and Triton batches .*export it with a dynamic batch axis"):
        onnx_declarations(str(path), batching=True)
    assert [d.name for d in onnx_declarations(str(path), batching=False)[0]] == ["X"]


def test_served_model_results_against_the_declared_outputs():
    from inference.serving._child import make_infer
    from inference.serving._spec import ModelSpec

    spec = ModelSpec("m", "m.pt", [TensorDesc("x", np.float32, (3,))], max_batch_size=0)
    spec.outputs = [TensorDesc("y", np.float32, (3,)), TensorDesc("z", np.float32, (3,))]
    x = [{"x": np.ones((2, 3), np.float32)}]  # one request (a model served unbatched)
    with raises_value(r"model 'm' returned 1 outputs, 2 declared \['y', 'z'\]; declare as many outputs as it returns"):
        make_infer(lambda t: (t,), spec, "cpu")(x)
    with raises_name(r"the model returned outputs \['y', 'w'\], not the declared \['z'\]; return a dict with keys"):
        make_infer(lambda t: {"y": t, "w": t}, spec, "cpu")(x)
    (out,) = make_infer(lambda t: {"z": t * 2, "y": t}, spec, "cpu")(x)
    assert out["z"][0, 0] == 2 and out["y"][0, 0] == 1


def test_a_request_missing_a_tensor_or_with_ragged_rows():
    q = pk.Queue(pk.device("cpu_serial"))
    slot = S.chain.inputs[0]
    arrays = _wire.pack(slot, S.make_tracks(5, q, seed=1))
    missing = {k: v for k, v in arrays.items() if k != "tracks__charge"}
    with raises_value(r"tensor 'tracks__charge' is missing; send every column of Tracks, named collection__column"):
        _wire.collection_from(slot, missing, q)
    ragged = {**arrays, "tracks__x": arrays["tracks__x"][:4]}
    with raises_value(r"collection 'tracks': its columns disagree on the rows: .*send every column with the same rows"):
        _wire.collection_from(slot, ragged, q)


def test_remote_pipeline_call_checks():
    """Without a declaration, a remote pipeline's call is checked against what the server said."""
    from inference.remote import RemotePipeline

    rp = RemotePipeline.__new__(RemotePipeline)
    rp.name, rp.declaration = "chain", None
    rp._inputs = [("tracks", _wire.slot_decls(S.chain.inputs[0]))]
    rp._outputs = [("scored", _wire.slot_decls(S.chain.outputs[0]))]
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(4, q)
    with raises_type(r"the first argument is the queue \(pk\.Queue\), got PortableCollection"):
        rp._prepare(tracks, [tracks, tracks])
    with raises_type(r"on the server takes \(q, tracks, scored\): 2 collections, got 1; pass the inputs, then"):
        rp._prepare(q, [tracks])
    with raises_type(r"'scored' must be a PortableCollection, got dict"):
        rp._prepare(q, [tracks, {}])
