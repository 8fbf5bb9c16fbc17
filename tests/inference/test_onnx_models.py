"""Bad input to ONNX and torch.export models gets one clear error, and nothing is lost:
corrupt files, blocks that do not match the model's inputs, outputs of the wrong shape (the
collection untouched), a missing execution provider or ONNX Runtime (named, with the extra)."""

from __future__ import annotations

import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import portable as pk
from inference import Model, ModelFileError, ModelMetadata, SoAMetadata
from inference._onnx import choose_provider

# the rocm stand-in runs this file too: ONNX Runtime on a HIP queue
pytestmark = pytest.mark.hip_differs

pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")


def _meta(coll, out, *in_columns, out_columns=("m", "n")):
    return ModelMetadata(
        SoAMetadata(coll).append_block("f", *in_columns), SoAMetadata(out).append_block("preds", *out_columns)
    )


def test_corrupt_onnx(tmp_path, exported_files):
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07\x12\x07pytorch")
    with pytest.raises(ModelFileError, match="ONNX Runtime cannot load it.*truncated, damaged or not an ONNX"):
        Model(str(tmp_path / "junk.onnx"))
    data = Path(exported_files["mlp.onnx"]).read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="cut.onnx: ONNX Runtime cannot load it"):
        Model(str(tmp_path / "cut.onnx"))


def test_pt2_of_neither_kind(tmp_path):
    with zipfile.ZipFile(tmp_path / "odd.pt2", "w") as zf:
        zf.writestr("odd/readme.txt", "hello")
    with pytest.raises(ModelFileError, match="neither a torch.export program.*nor an AOTInductor package.*readme"):
        Model(str(tmp_path / "odd.pt2"))


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_input_count_and_dtype_must_match(queue, make_particles, make_preds, exported_files, fmt):
    """Checked before anything runs, as the program declares its inputs (a torch.export program's
    own guards failed inside the queue's work: AssertionError('Guard failed: input.size()[1] == 3'))."""
    coll, _ = make_particles(20)
    out = make_preds(20)
    model = Model(exported_files[f"mlp.{fmt}"]).to(queue)
    two = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z").append_block("p", "p"),
        SoAMetadata(out).append_block("preds", "m", "n"),
    )
    with pytest.raises(ValueError, match=r"takes 1 input\(s\).*the input blocks are 2"):
        model.forward(two)
    with pytest.raises(TypeError, match="gets block 'f' of dtype float64.*input_dtype"):
        model.forward(_meta(coll, out, "w"))
    with pytest.raises(ValueError, match=r"gets block 'f' of shape \[20, 2\]"):
        model.forward(_meta(coll, out, "x", "y"))
    if fmt == "pt2":  # the fix named: as many columns as the program's input has
        with pytest.raises(pk.ArgumentError, match=r"float32\[\?, 3\].*give the block 3 column\(s\), it has 2"):
            model.forward(_meta(coll, out, "x", "y"))
    model.forward(
        ModelMetadata(
            SoAMetadata(coll).append_block("f", "x", "y", "z"),
            SoAMetadata(out).append_block("preds", "m", "n"),
            input_dtype=np.float32,
        )
    )
    queue.wait()


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_wrong_output_shape_leaves_the_collection_untouched(queue, make_particles, make_preds, exported_files, fmt):
    coll, _ = make_particles(40)
    out = make_preds(40)
    before = out.to_dict(queue)
    model = Model(exported_files[f"mlp.{fmt}"]).to(queue)
    with pytest.raises(Exception, match="nothing was written") as err:
        model.forward(_meta(coll, out, "x", "y", "z", out_columns=("m", "n", "score")))
        queue.wait()  # the pass is a host task on CPU queues: the error surfaces at the wait
    assert "preds" in str(err.value)
    after = out.to_dict(queue)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_provider_not_installed_names_the_extra(exported_files, monkeypatch):
    with pytest.raises(ModelFileError, match=r"no CUDAExecutionProvider.*alpyka\[onnx-gpu\].*onnxruntime-gpu"):
        choose_provider("cuda", ["CPUExecutionProvider"])
    with pytest.raises(ModelFileError, match=r"no CPUExecutionProvider.*alpyka\[onnx\]"):
        choose_provider("cpu", ["AzureExecutionProvider"])
    assert choose_provider("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]) == "CUDAExecutionProvider"
    model = Model(exported_files["mlp.onnx"])
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(ModelFileError, match="CUDAExecutionProvider"):
            model.module_for(torch.device("cuda", 0))


def test_onnxruntime_missing_names_the_extra(exported_files, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"alpyka\[onnx\]"):
        Model(exported_files["mlp.onnx"])


def test_export_refuses_unknown_suffixes_and_scripts(tmp_path):
    from alpyka_testing.inference import MLP
    from inference import export

    with pytest.raises(ValueError, match=r"\.pt2 \(torch.export\) or \.onnx"):
        export(MLP(), (torch.randn(4, 3),), tmp_path / "mlp.bin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's own deprecation warning
        scripted = torch.jit.script(MLP())
    with pytest.raises(TypeError, match="eager nn.Module"):
        export(scripted, (torch.randn(4, 3),), tmp_path / "mlp.pt2")


def test_export_cli(tmp_path, capsys):
    import alpyka_testing.inference
    from inference._export import main

    models = alpyka_testing.inference.__file__  # the file.py:attribute form of the spec
    assert main([f"{models}:make_mlp", "--input-shape", "16,3", "--pt2", "-o", str(tmp_path / "m.pt2")]) == 0
    assert Model(str(tmp_path / "m.pt2")).kind == "exported"
    assert main(["no_such_module_here:make", "--input-shape", "3", "--onnx"]) == 2
    assert "the model factory module 'no_such_module_here' does not import" in capsys.readouterr().err
    assert main([f"{models}:make_mlp", "--input-shape", "16,3"]) == 2
    assert "--onnx or --pt2" in capsys.readouterr().err
