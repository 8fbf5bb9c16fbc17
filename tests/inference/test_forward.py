"""Model.forward on SoA collections: results against the model on copied tensors, several
inputs and outputs, mini-batches, dtype casts, JIT/AOT/eager agreement, queue ordering."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

import portable as pk
from inference import Model, ModelMetadata, SoAMetadata
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")

from inference_testmodels import MLP, TwoHeads, UsesEverything, features


def _preds(cols) -> np.ndarray:
    return np.stack([cols["m"], cols["n"]], 1)


def _reference(module, *tensors) -> np.ndarray:
    with torch.no_grad():
        return module(*tensors).numpy()


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_forward_matches_the_model_on_copies(queue, make_particles, make_preds, n):
    coll, data = make_particles(n, seed=3)
    out = make_preds(n)
    module = MLP()
    model = Model(module).to(queue)
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(out).append_block("preds", "m", "n")
    model.forward(ModelMetadata(inputs, outputs))
    cols = out.to_dict(queue)
    np.testing.assert_allclose(_preds(cols), _reference(module, features(data)), rtol=1e-5, atol=1e-6)
    assert (cols["score"] == -7).all() and (cols["extra"] == -7).all()  # other columns untouched


def test_vector_matrix_and_scalar_inputs(queue, make_particles, make_preds):
    n = 300
    coll, data = make_particles(n, seed=5)
    out = make_preds(n)
    module = UsesEverything()
    inputs = (SoAMetadata(coll).append_block("f", "x", "y", "z").append_block("p", "p")
              .append_block("cov", "cov").append_block("scale", "scale"))
    outputs = SoAMetadata(out).append_block("preds", "m", "n")
    Model(module).to(queue).forward(ModelMetadata(inputs, outputs))
    ref = _reference(module, features(data), torch.from_numpy(data["p"]), torch.from_numpy(data["cov"]),
                     torch.full((n, 1), 1.5))
    np.testing.assert_allclose(_preds(out.to_dict(queue)), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("as_dict", [False, True], ids=["tuple", "dict"])
def test_several_outputs(queue, make_particles, make_preds, as_dict):
    n = 200
    coll, data = make_particles(n, seed=7)
    out = make_preds(n)
    module = TwoHeads(as_dict=as_dict)
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(out).append_block("preds", "m", "n").append_block("score", "score")
    Model(module).to(queue).forward(ModelMetadata(inputs, outputs))
    with torch.no_grad():
        res = module(features(data))
    preds, score = (res["preds"], res["score"]) if as_dict else res
    cols = out.to_dict(queue)
    np.testing.assert_allclose(_preds(cols), preds.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cols["score"], score.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_size", [32, 64, 96, 512])
def test_mini_batches_equal_the_full_batch(queue, make_particles, make_preds, batch_size):
    n = 1000  # not a multiple of any batch size: the last mini-batch is partial
    coll, data = make_particles(n, seed=11)
    full, batched = make_preds(n), make_preds(n)
    model = Model(TwoHeads()).to(queue)
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outs_full = SoAMetadata(full).append_block("preds", "m", "n").append_block("score", "score")
    outs_b = SoAMetadata(batched).append_block("preds", "m", "n").append_block("score", "score")
    model.forward(ModelMetadata(inputs, outs_full))
    model.forward(ModelMetadata(inputs, outs_b), batch_size=batch_size)
    a, b = full.to_dict(queue), batched.to_dict(queue)
    for k in ("m", "n", "score"):
        np.testing.assert_allclose(b[k], a[k], atol=1e-5)
    # ModelMetadata(batch_size=...) is the same thing
    again = make_preds(n)
    model.forward(ModelMetadata(inputs, SoAMetadata(again).append_block("preds", "m", "n")
                                .append_block("score", "score"), batch_size=batch_size))
    np.testing.assert_allclose(again.to_dict(queue)["m"], a["m"], atol=1e-5)


def test_mini_batch_alignment_rule(queue, make_particles, make_preds):
    coll, _ = make_particles(100)
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(make_preds(100)).append_block("preds", "m", "n")
    with pytest.raises(ValueError, match="multiple of 32"):
        ModelMetadata(inputs, outputs, batch_size=48)
    ModelMetadata(inputs, outputs, batch_size=32)
    wide_in = SoAMetadata(coll).append_block("w", "w")  # float64: multiples of 16
    wide_out = SoAMetadata(make_preds(100)).append_block("extra", "extra")
    with pytest.raises(ValueError, match="'w'.*multiple of 16"):
        Model(MLP()).to(queue).forward(ModelMetadata(wide_in, wide_out), batch_size=8)
    ModelMetadata(wide_in, wide_out, batch_size=16)
    with pytest.raises(ValueError, match="one size"):
        ModelMetadata(inputs, SoAMetadata(make_preds(64)).append_block("preds", "m", "n"), batch_size=32)


def test_output_cast_and_input_dtype(queue, make_particles, make_preds):
    n = 128
    coll, data = make_particles(n, seed=13)
    out = make_preds(n)
    module = MLP()
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(out).append_block("extra", "extra")  # float64 column
    class FirstColumn(torch.nn.Module):
        def forward(self, x):
            return module(x)[:, :1]

    model = Model(FirstColumn()).to(queue)
    model.forward(ModelMetadata(inputs, outputs))
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert "'extra'" in str(err.value.__cause__) and "cast" in str(err.value.__cause__)
    assert (out.to_dict(queue)["extra"] == -7).all()
    model.forward(ModelMetadata(inputs, outputs, cast_outputs=True))
    ref = _reference(module, features(data))[:, 0]
    np.testing.assert_allclose(out.to_dict(queue)["extra"], ref, rtol=1e-6, atol=1e-6)
    # float64 inputs converted for a float32 model; a [n] result fills a one-column block
    wide = SoAMetadata(coll).append_block("w", "w")
    one = SoAMetadata(out).append_block("score", "score")
    lin = torch.nn.Linear(1, 1)
    Model(torch.nn.Sequential(lin, torch.nn.Flatten(0))).to(queue).forward(
        ModelMetadata(wide, one, input_dtype=np.float32))
    with torch.no_grad():
        ref = lin(torch.from_numpy(data["w"].astype(np.float32)).unsqueeze(1))[:, 0].numpy()
    np.testing.assert_allclose(out.to_dict(queue)["score"], ref, rtol=1e-5, atol=1e-6)


def _script_bytes(module) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buf)
    return buf.getvalue()


def test_jit_aot_and_eager_agree(queue, make_particles, make_preds, aot_package, tmp_path):
    n = 1000
    coll, data = make_particles(n, seed=17)
    jit_path = tmp_path / "mlp.pt"
    jit_path.write_bytes(_script_bytes(MLP()))
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    results = {}
    for kind, source in (("eager", MLP()), ("jit", str(jit_path)), ("aot", aot_package)):
        model = Model(source).to(queue)
        assert model.kind == kind
        out = make_preds(n)
        try:
            model.forward(ModelMetadata(inputs, SoAMetadata(out).append_block("preds", "m", "n")))
        except Exception as exc:  # an AOT package compiled for the CPU on a GPU queue
            assert kind == "aot" and "compiled for cpu" in str(exc)
            continue
        results[kind] = _preds(out.to_dict(queue))
        if kind != "eager":  # mini-batches through the compiled paths as well
            out2 = make_preds(n)
            model.forward(ModelMetadata(inputs, SoAMetadata(out2).append_block("preds", "m", "n")), batch_size=256)
            np.testing.assert_allclose(_preds(out2.to_dict(queue)), results[kind], atol=1e-5)
    ref = _reference(MLP(), features(data))
    for kind, res in results.items():
        np.testing.assert_allclose(res, ref, rtol=1e-5, atol=1e-5, err_msg=kind)


def test_aot_runner_reads_the_calling_convention_once(aot_package):
    """``aot.load``: the package's own call (specs parsed per call) and the runner's boxed call give
    the same outputs; another input count goes through the package's call and its error."""
    from inference import aot

    runner = aot.load(aot_package)
    assert runner._run is not None and runner._count == 1  # the fast path applies to this package
    x = torch.randn(300, 3)
    expected = runner.package(x)
    assert torch.equal(runner(x), expected)
    with pytest.raises(Exception):
        runner(x, x)


def test_kernel_model_kernel_on_one_queue_without_waiting(device, make_particles, make_preds):
    """producer -> model -> consumer, all enqueued on one non-blocking queue, one wait at the end."""
    q = pk.Queue(device)  # non-blocking
    n = 500
    coll, _ = make_particles(n, seed=0)
    out = make_preds(n)
    q.wait()
    rng = np.random.default_rng(23)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    host_in = pk.PortableCollection.from_dict(coll.layout, {**coll.to_dict(q), "x": x[:, 0], "y": x[:, 1], "z": x[:, 2]}, pk.host())
    host_out = pk.PortableCollection(out.layout, n, pk.host())
    module = MLP()
    model = Model(module).to(q)
    inputs = SoAMetadata(coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(out).append_block("preds", "m", "n")

    def slow_producer():  # a producer step that takes a while: the model must wait for it
        time.sleep(0.05)

    q.enqueue(slow_producer)
    pk.memcpy(q, coll, host_in)  # the producer's data lands in the input collection
    model.forward(ModelMetadata(inputs, outputs))
    pk.memcpy(q, host_out, out)  # the consumer reads the model's outputs

    doubled = {}

    def consumer():
        doubled["m"] = host_out.m * 2

    q.enqueue(consumer)
    q.wait()
    ref = _reference(module, torch.from_numpy(x))
    np.testing.assert_allclose(doubled["m"], 2 * ref[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_preds(host_out.to_dict()), ref, rtol=1e-5, atol=1e-5)
