"""Model files are checked before anything in them is read: a ``.pt2`` archive from which
``torch.export.load`` or ``aoti_load_package`` would unpickle something (running the code it
holds) is refused, for ``Model(...)`` and for ``alpyka serve``'s loader, and an ONNX model's
external data is read from the model's own folder (never the working directory, never outside
the folder)."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from alpyka_testing.inference import skip_unless_onnx_runs_on
from inference import Model, ModelFileError, ModelMetadata, SoAMetadata


class _Payload:
    """Unpickling it creates the directory ``marker`` (the code an attacker would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _rewrite(src: str, dst: Path, change) -> Path:
    """``dst``: the archive ``src`` with its ``[(name, bytes)]`` entries passed through ``change``."""
    with zipfile.ZipFile(src) as zi:
        entries = [(n, zi.read(n)) for n in zi.namelist()]
    with zipfile.ZipFile(dst, "w") as zo:
        for name, data in change(entries):
            zo.writestr(name, data)
    return dst


def _root(entries) -> str:
    return entries[0][0].split("/", 1)[0]


def _pickled_weight(marker):
    """The weights config marks the first weight ``use_pickle`` and points it at the payload."""

    def change(entries):
        out = []
        for name, data in entries:
            if name.endswith("/data/weights/model_weights_config.json"):
                config = json.loads(data)
                meta = next(iter(config["config"].values()))
                meta.update(use_pickle=True, path_name="weight_evil")
                data = json.dumps(config).encode()
                out.append((f"{_root(entries)}/data/weights/weight_evil", pickle.dumps(_Payload(marker))))
            out.append((name, data))
        return out

    return change, "model_weights_config.json", "use_pickle"


def _pickled_constant(marker, use_pickle=True):
    """A constant stored as a pickled object (torch.export's "opaque object" constants, which
    torch unpickles by their name whether or not ``use_pickle`` is set; without it torch first
    maps the file as a tensor, so it gets a weight's tensor metadata and a float32-sized length)."""

    def change(entries):
        weights = json.loads(dict(entries)[f"{_root(entries)}/data/weights/model_weights_config.json"])
        meta = None if use_pickle else next(iter(weights["config"].values()))["tensor_meta"]
        payload = pickle.dumps(_Payload(marker))
        payload += b"." * (-len(payload) % 4)  # unpickling stops at the first STOP opcode
        out = []
        for name, data in entries:
            if name.endswith("/data/constants/model_constants_config.json"):
                config = json.loads(data)
                config["config"]["evil"] = {
                    "path_name": "opaque_obj_0",
                    "is_param": False,
                    "use_pickle": use_pickle,
                    "tensor_meta": meta,
                }
                data = json.dumps(config).encode()
                out.append((f"{_root(entries)}/data/constants/opaque_obj_0", payload))
            out.append((name, data))
        return out

    return change, "model_constants_config.json", "use_pickle" if use_pickle else "a pickled object"


def _pickled_sample_inputs(marker, upper=False):
    """The example inputs replaced by the payload (the weights-only loader refuses it, and torch
    then unpickles it fully); ``upper``: under an upper-case name, which torch's zip reader finds."""

    def change(entries):
        out = []
        for name, data in entries:
            if "/data/sample_inputs/" in name:
                data = pickle.dumps(_Payload(marker))
                if upper:
                    root, rel = name.split("/", 1)
                    name = f"{root}/{rel.upper()}"
            out.append((name, data))
        return out

    return change, "SAMPLE_INPUTS/MODEL.PT" if upper else "sample_inputs/model.pt", "not plain tensors"


def _in_aot_package(marker):
    """An AOTInductor package (told by its data/aotinductor/ entries) that also holds a program
    with a pickled weight: aoti_load_package loads the programs a package holds too."""
    change, _, _ = _pickled_weight(marker)

    def package(entries):
        root = _root(entries)
        meta = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
        return change(entries) + [(f"{root}/data/aotinductor/model/x.wrapper_metadata.json", meta)]

    return package, "model_weights_config.json", "use_pickle"


CASES = {
    "weight": _pickled_weight,
    "constant": _pickled_constant,
    "constant_without_use_pickle": lambda m: _pickled_constant(m, use_pickle=False),
    "sample_inputs": _pickled_sample_inputs,
    "sample_inputs_upper_case": lambda m: _pickled_sample_inputs(m, upper=True),
    "aot_package": _in_aot_package,
}


def _torch_loads(path: Path) -> None:
    """What torch itself does with the archive (the control: the payload runs there)."""
    with zipfile.ZipFile(path) as zf:
        aot = any("/data/aotinductor/" in n for n in zf.namelist())
    load = torch._inductor.aoti_load_package if aot else torch.export.load
    try:
        load(str(path))
    except Exception:
        pass


@pytest.mark.parametrize("case", sorted(CASES))
def test_pickled_pt2_entries_are_refused_before_torch_reads_them(tmp_path, exported_files, case):
    marker = tmp_path / "ran"
    change, entry, why = CASES[case](marker)
    path = _rewrite(exported_files["mlp.pt2"], tmp_path / "evil.pt2", change)
    with pytest.raises(ModelFileError) as err:
        Model(str(path))
    text = str(err.value)
    assert str(path) in text and entry in text and why in text, text
    assert "inference.export" in text and "inference.aot.compile" in text, text
    assert not marker.exists(), "the archive's pickle ran"
    _torch_loads(path)  # the control: torch.export.load / aoti_load_package run it
    assert marker.exists(), f"{case}: torch did not unpickle the entry; the test archive is not malicious"


def test_serve_loader_refuses_pickled_pt2(tmp_path, exported_files):
    """``alpyka serve x.pt2``: the child's loader and the parent's reading of input declarations."""
    from inference.serving._child import load_model
    from inference.serving._spec import inputs_from_model

    marker = tmp_path / "ran"
    for name, case in (("weight", _pickled_weight), ("aot", _in_aot_package)):
        path = _rewrite(exported_files["mlp.pt2"], tmp_path / f"{name}.pt2", case(marker)[0])
        with pytest.raises(ModelFileError, match=r"use_pickle.*re-export"):
            load_model(str(path), "cpu")
        decls, why = inputs_from_model(str(path), batching=True)
        assert decls == [] and "use_pickle" in why, why
        assert not marker.exists(), f"{name}: the archive's pickle ran"


def test_read_exported_checks_on_its_own(tmp_path, exported_files):
    """The loader of programs refuses the archive without detect_format having been asked first."""
    from inference._loading import read_exported

    marker = tmp_path / "ran"
    path = _rewrite(exported_files["mlp.pt2"], tmp_path / "evil.pt2", _pickled_weight(marker)[0])
    with pytest.raises(ModelFileError, match="use_pickle"):
        read_exported(path)
    assert not marker.exists(), "the archive's pickle ran"


def test_legacy_and_duplicate_entries_are_refused(tmp_path, exported_files):
    legacy = _rewrite(
        exported_files["mlp.pt2"],
        tmp_path / "legacy.pt2",
        lambda es: es + [(f"{_root(es)}/data/weights/model.pt", b"\x80\x02N.")],
    )
    with pytest.raises(ModelFileError, match=r"/data/weights/model.pt' is a pickle"):
        Model(str(legacy))

    def twice(entries):
        root = _root(entries)
        name = f"{root}/data/weights/model_weights_config.json"
        return entries + [(name.replace("/weights/", "/WEIGHTS/"), dict(entries)[name])]

    dup = _rewrite(exported_files["mlp.pt2"], tmp_path / "dup.pt2", twice)
    with pytest.raises(ModelFileError, match="name the same file for torch"):
        Model(str(dup))


def test_clean_archives_still_load(exported_files, aot_package):
    assert Model(exported_files["mlp.pt2"]).kind == "exported"
    assert Model(aot_package).kind == "aot"


# --------------------------------------------------------------------------- ONNX external data
onnx = pytest.importorskip("onnx", reason="pip install 'alpyka[onnx]'")
pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")


def _external_model(folder: Path, scale: float, location: str = "model.onnx.data") -> Path:
    """``Y = X @ W`` (X ``[n, 3]``, W ``[3, 2]`` filled with ``scale``), W kept in ``location``."""
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.full((3, 2), scale, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "scaled_sum",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    if location != "model.onnx.data":  # point W elsewhere (the proto only; the data stays)
        saved = onnx.load(str(path), load_external_data=False)
        for entry in saved.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        path.write_bytes(saved.SerializeToString())
    return path


@pytest.fixture
def two_versions(tmp_path, monkeypatch):
    """The same model in two folders (weights 1 and 2), the working directory a third folder."""
    v1, v2 = _external_model(tmp_path / "v1", 1.0), _external_model(tmp_path / "v2", 2.0)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return v1, v2


def test_onnx_external_data_comes_from_the_models_folder(
    queue, make_particles, make_preds, tmp_path, two_versions, monkeypatch
):
    skip_unless_onnx_runs_on(queue.device)
    coll, data = make_particles(24)
    expected = data["x"] + data["y"] + data["z"]
    for cwd in (tmp_path / "elsewhere", tmp_path / "v1"):  # another folder, the other version's folder
        monkeypatch.chdir(cwd)
        for scale, path in zip((1.0, 2.0), two_versions):
            out = make_preds(24)
            Model(str(path)).to(queue).forward(
                ModelMetadata(
                    SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
                )
            )
            got = out.to_dict(queue)
            for col in ("m", "n"):
                np.testing.assert_allclose(got[col], scale * expected, rtol=1e-5, err_msg=f"{path} from {cwd}")


def test_serve_reads_onnx_external_data_from_the_models_folder(two_versions):
    from inference.serving._child import load_model
    from inference.serving._spec import onnx_declarations

    x = np.ones((4, 3), np.float32)  # the server runs an ONNX model on the CPU on numpy arrays
    for scale, path in zip((1.0, 2.0), two_versions):
        (y,) = load_model(str(path), "cpu")(x)
        np.testing.assert_allclose(y, np.full((4, 2), 3 * scale, np.float32))
        ins, outs = onnx_declarations(str(path), batching=True)
        assert [d.name for d in ins] == ["X"] and [d.name for d in outs] == ["Y"]


@pytest.mark.parametrize(
    "location, why",
    [
        ("../v1/model.onnx.data", "outside the model's folder"),
        ("/etc/hostname", "outside the model's folder"),
        ("sub/../../v1/model.onnx.data", "outside the model's folder"),
        ("missing.data", "missing from the model's folder"),
        ("model.onnx.data\x00.bak", "a name with a NUL or another control character"),
        ("model.onnx\n.data", "a name with a NUL or another control character"),
    ],
)
def test_onnx_external_data_outside_the_folder_is_refused(tmp_path, two_versions, location, why):
    path = _external_model(tmp_path / "v3", 3.0, location=location)
    with pytest.raises(ModelFileError, match=f"tensor 'W' keeps its data in external file .*{why}"):
        Model(str(path))


def test_onnx_external_data_link_out_of_the_folder_is_refused(tmp_path, two_versions):
    path = _external_model(tmp_path / "v3", 3.0)
    data = path.parent / "model.onnx.data"
    data.unlink()
    data.symlink_to(two_versions[0].parent / "model.onnx.data")
    with pytest.raises(ModelFileError, match="a link to .*v1/model.onnx.data' outside the model's folder"):
        Model(str(path))
