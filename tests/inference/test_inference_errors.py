"""Bad input gets a clear error, and nothing is lost."""

from __future__ import annotations

import dataclasses
import io
import pickle

import pytest
import torch

import portable as pk
from alpyka_testing.errors import raises_name, raises_root
from alpyka_testing.inference import MLP, Particles, TwoHeads
from inference import Model, ModelFileError, ModelMetadata, SoAMetadata, load_state_dict

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")


def test_mixed_dtypes_name_the_columns():
    coll = pk.PortableCollection(Particles, 10, pk.host())
    with pytest.raises(TypeError, match=r"one dtype.*w: float64, charge: int32"):
        SoAMetadata(coll).append_block("bad", "w", "charge")
    with pytest.raises(TypeError, match=r"one dtype.*cov2: float32, w: float64"):
        SoAMetadata(coll).append_block("bad", "cov2", "w")


def test_mixed_kinds_and_non_adjacent_columns():
    coll = pk.PortableCollection(Particles, 10, pk.host())
    with pytest.raises(TypeError, match=r"one kind.*z: column, p: vector3"):
        SoAMetadata(coll).append_block("bad", "z", "p")
    with pytest.raises(ValueError, match=r"\['x', 'z'\] are not adjacent"):
        SoAMetadata(coll).append_block("bad", "x", "z")
    with pytest.raises(ValueError, match=r"\['y', 'x'\] are not adjacent"):
        SoAMetadata(coll).append_block("bad", "y", "x")


def test_unknown_column_lists_the_layout():
    coll = pk.PortableCollection(Particles, 10, pk.host())
    with raises_name(r"no column\(s\) \['energy'\].*'x', 'y', 'z', 'p'"):
        SoAMetadata(coll).append_block("bad", "x", "energy")
    meta = SoAMetadata(coll).append_block("f", "x")
    with pytest.raises(ValueError, match="already defined"):
        meta.append_block("f", "y")
    with raises_name(r"no block 'g'; the blocks are \['f'\]"):
        meta.tensor("g")
    with pytest.raises(ValueError, match="permutation"):
        meta.change_order(["f", "f"])


def test_scalar_blocks_are_inputs_only(queue, make_particles):
    coll, _ = make_particles(10)
    meta = SoAMetadata(coll).append_block("s", "scale")
    with pytest.raises(ValueError, match="scalars"):
        ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), meta)


def test_wrong_output_leaves_the_collection_unchanged(queue, make_particles, make_preds):
    n = 100
    coll, _ = make_particles(n)
    out = make_preds(n)
    inputs = SoAMetadata(coll).append_block("f", "x", "y", "z")
    outputs = SoAMetadata(out).append_block("preds", "m", "n").append_block("score", "score")

    class WrongSecond(torch.nn.Module):  # the first output fits, the second does not
        def forward(self, x):
            return x[:, :2] * 1, x

    model = Model(WrongSecond()).to(queue)
    model.forward(ModelMetadata(inputs, outputs))
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert "'score'" in str(err.value) and "[100, 3]" in str(err.value) and "nothing was written" in str(err.value)
    cols = out.to_dict(queue)
    assert all((cols[k] == -7).all() for k in ("m", "n", "score", "extra"))

    class WrongLastBatch(torch.nn.Module):  # only the last (partial) mini-batch is wrong
        def forward(self, x):
            return x[:, :2] * 1 if x.shape[0] == 32 else x[:, :1] * 1

    Model(WrongLastBatch()).to(queue).forward(
        ModelMetadata(inputs, SoAMetadata(out).append_block("preds", "m", "n")), batch_size=32
    )
    with pytest.raises(pk.AsyncError, match="mini-batch of 4"):
        queue.wait()
    cols = out.to_dict(queue)
    assert (cols["m"] == -7).all() and (cols["n"] == -7).all()

    for result, match in (
        (lambda x: x[:, :2], "dtype"),
        (lambda x: (x[:, :2],), "returned 1 outputs"),
        (lambda x: {"preds": x[:, :2]}, "missing \\['score'\\]"),
        (lambda x: 3, "int"),
    ):

        class Bad(torch.nn.Module):
            def forward(self, x, _r=result):
                r = _r(x)
                return r.double() if match == "dtype" else r

        Model(Bad()).to(queue).forward(
            ModelMetadata(inputs, outputs if match != "dtype" else SoAMetadata(out).append_block("preds", "m", "n"))
        )
        with pytest.raises(pk.AsyncError, match=match):
            queue.wait()
    cols = out.to_dict(queue)
    assert all((cols[k] == -7).all() for k in ("m", "n", "score", "extra"))


def test_collection_on_another_device(queue, make_particles, make_preds):
    coll, _ = make_particles(10)
    inputs = SoAMetadata(coll).append_block("f", "x", "y", "z")
    outputs = SoAMetadata(make_preds(10)).append_block("preds", "m", "n")
    # the same collection, seen as memory of a device with another memory space than the queue's
    elsewhere = dataclasses.replace(queue.device, name="elsewhere", memory_space="another-device")
    inputs.collection = type("CollectionElsewhere", (), {"device": elsewhere})()
    with pytest.raises(pk.DeviceMismatch, match=r"input collection is on .*elsewhere.*Copy it there"):
        Model(MLP()).to(queue).forward(ModelMetadata(inputs, outputs))


def test_real_device_mismatch(queue, make_particles, make_preds):
    others = [b for b in pk.available_backends() if pk.device(b).memory_space != queue.device.memory_space]
    if not others:
        pytest.skip("needs a second backend with its own memory space")
    coll, _ = make_particles(10)
    other_q = pk.Queue(pk.device(others[0]))
    outputs = SoAMetadata(make_preds(10)).append_block("preds", "m", "n")
    with pytest.raises(pk.DeviceMismatch, match=str(queue.device.backend_name)):
        Model(MLP()).to(other_q).forward(ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), outputs))


def test_no_queue_bound():
    coll = pk.PortableCollection(Particles, 10, pk.host())
    meta = ModelMetadata(SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(coll).append_block("w", "w"))
    with pytest.raises(RuntimeError, match=r"model.to\(queue\)"):
        Model(MLP()).forward(meta)


# ----------------------------------------------------------------------------- model files
def test_missing_empty_truncated_and_foreign_files(tmp_path):
    with raises_root(pk.FileNotFound, FileNotFoundError, r"model file .*nope\.pt' does not exist; give the path of a"):
        Model(str(tmp_path / "nope.pt"))
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty"):
        Model(str(tmp_path / "empty.pt"))
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(MLP()), buf)
    data = buf.getvalue()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        Model(str(tmp_path / "cut.pt"))
    (tmp_path / "model.tf").write_bytes(b"\x0a\x07\x12\x07pytorch")
    with pytest.raises(ModelFileError, match="neither a zip"):
        Model(str(tmp_path / "model.tf"))
    with pytest.raises(TypeError, match="TorchScript file"):
        Model(42)


def test_pickled_module_is_refused_and_state_dicts_load_weights_only(tmp_path):
    module = MLP()
    torch.save(module, tmp_path / "module.pt")
    with pytest.raises(ModelFileError, match="arbitrary Python objects"):
        Model(str(tmp_path / "module.pt"))
    with pytest.raises(ModelFileError, match="objects other than tensors"):
        load_state_dict(tmp_path / "module.pt")
    with open(tmp_path / "legacy.pkl", "wb") as fh:
        pickle.dump({"a": 1}, fh)
    with pytest.raises(ModelFileError, match="plain pickle"):
        Model(str(tmp_path / "legacy.pkl"))
    torch.save(module.state_dict(), tmp_path / "weights.pt")
    with pytest.raises(ModelFileError, match="state dict"):
        Model(str(tmp_path / "weights.pt"))
    fresh = TwoHeads().mlp
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(load_state_dict(tmp_path / "weights.pt"))
    x = torch.randn(5, 3)
    torch.testing.assert_close(fresh(x), module(x))


def test_aot_package_for_another_device(aot_package, monkeypatch):
    model = Model(aot_package)
    assert model.kind == "aot" and model.aot_device == "cpu"
    with pytest.raises(ModelFileError, match="compiled for cpu.*device='cuda'"):
        model.module_for(torch.device("cuda", 0))
    assert "aot" in repr(model) and "compiled for cpu" in repr(model)
