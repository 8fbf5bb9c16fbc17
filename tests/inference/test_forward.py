"""Model.forward on SoA collections: results against the model on copied tensors, several
inputs and outputs, mini-batches, dtype casts, JIT/AOT/eager agreement, queue ordering."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.errors import raises_root
from alpyka_testing.inference import MLP, TwoHeads, UsesEverything, features
from inference import Model, ModelMetadata, SoAMetadata

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")


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
    inputs = (
        SoAMetadata(coll)
        .append_block("f", "x", "y", "z")
        .append_block("p", "p")
        .append_block("cov", "cov")
        .append_block("scale", "scale")
    )
    outputs = SoAMetadata(out).append_block("preds", "m", "n")
    Model(module).to(queue).forward(ModelMetadata(inputs, outputs))
    ref = _reference(
        module, features(data), torch.from_numpy(data["p"]), torch.from_numpy(data["cov"]), torch.full((n, 1), 1.5)
    )
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
    model.forward(
        ModelMetadata(
            inputs,
            SoAMetadata(again).append_block("preds", "m", "n").append_block("score", "score"),
            batch_size=batch_size,
        )
    )
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
        def __init__(self):
            super().__init__()
            self.mlp = module  # a submodule: Model moves it to the queue's device

        def forward(self, x):
            return self.mlp(x)[:, :1]

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
        ModelMetadata(wide, one, input_dtype=np.float32)
    )
    with torch.no_grad():
        ref = lin(torch.from_numpy(data["w"].astype(np.float32)).unsqueeze(1))[:, 0].numpy()
    np.testing.assert_allclose(out.to_dict(queue)["score"], ref, rtol=1e-5, atol=1e-6)


def _script_bytes(module) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buf)
    return buf.getvalue()


@pytest.mark.hip_differs  # the rocm stand-in too (smoke): a forward pass through DLPack
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
    assert runner.get_metadata() == runner.package.get_metadata()  # the package's own methods


def test_aot_load_refuses_what_is_not_a_package(tmp_path, exported_files):
    from inference import ModelFileError, aot

    with raises_root(pk.FileNotFound, FileNotFoundError, r"does not exist; give the path of a \.pt2, \.onnx"):
        aot.load(tmp_path / "missing.pt2")
    text = tmp_path / "notes.pt2"
    text.write_text("not a package")
    with pytest.raises(ModelFileError):
        aot.load(text)
    with pytest.raises(ModelFileError, match="not an AOTInductor package .*'exported'"):
        aot.load(exported_files["mlp.pt2"])  # a torch.export program: Model(path) runs it


class _StubLoader:
    """A package loader whose call spec is ``(inputs, {})`` -> ``outputs`` and whose boxed call
    returns (a + b, a - b), clearing its list as torch's does."""

    def __init__(self, inputs, outputs, kwargs=None):
        from torch.utils import _pytree as pytree

        self.spec = (
            pytree.treespec_dumps(pytree.tree_flatten((inputs, kwargs or {}))[1]),
            pytree.treespec_dumps(pytree.tree_flatten(outputs)[1]),
        )
        self.calls = 0

    def get_call_spec(self):
        return self.spec

    def boxed_run(self, flat):
        self.calls += 1
        a, b = flat
        flat.clear()
        return [a + b, a - b]


class _StubPackage:
    def __init__(self, loader):
        self.loader, self.own_calls = loader, 0

    def __call__(self, *args):
        self.own_calls += 1
        return "package's own call"


@pytest.mark.parametrize(
    "outputs,expected",
    [
        ((0, 0), lambda s, d: (s, d)),
        ({"sum": 0, "diff": 0}, lambda s, d: {"sum": s, "diff": d}),
        ([0, {"d": 0}], lambda s, d: [s, {"d": d}]),
    ],
)
def test_aot_runner_gives_the_packages_output_structure(outputs, expected):
    from torch.utils import _pytree as pytree

    from inference.aot import PackageRunner

    a, b = torch.arange(3.0), torch.ones(3)
    loader = _StubLoader((a, b), outputs)
    runner = PackageRunner(_StubPackage(loader))
    got = runner(a, b)
    want = expected(a + b, a - b)
    assert type(got) is type(want) and loader.calls == 1
    (flat_got, spec_got), (flat_want, spec_want) = pytree.tree_flatten(got), pytree.tree_flatten(want)
    assert spec_got == spec_want and all(torch.equal(g, w) for g, w in zip(flat_got, flat_want))
    assert torch.equal(a, torch.arange(3.0)) and torch.equal(b, torch.ones(3))  # inputs untouched
    assert runner(a) == "package's own call" and runner.package.own_calls == 1  # another count: its call


def test_aot_runner_leaves_keyword_packages_to_their_own_call():
    from inference.aot import PackageRunner

    a = torch.ones(2)
    runner = PackageRunner(_StubPackage(_StubLoader((a, a), (0, 0), kwargs={"scale": a})))
    assert runner._run is None and runner(a, a) == "package's own call"


def test_kernel_model_kernel_on_one_queue_without_waiting(device, queue, make_particles, make_preds):
    """producer -> model -> consumer, all enqueued on one non-blocking queue, one wait at the end."""
    q = pk.Queue(device)  # non-blocking
    n = 500
    coll, _ = make_particles(n, seed=0)
    out = make_preds(n)
    queue.wait()  # the fixtures filled coll and out on their queue (the stream check caught q.wait() here)
    rng = np.random.default_rng(23)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    host_in = pk.PortableCollection.from_dict(
        coll.layout, {**coll.to_dict(q), "x": x[:, 0], "y": x[:, 1], "z": x[:, 2]}, pk.host()
    )
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


@pytest.mark.parametrize("module", ["inference.aot", "inference._export"])
def test_command_modules_run_without_a_reimport_warning(module):
    """``python -m inference.aot``: nothing imported by ``inference`` itself may import the module
    first (runpy then warns that it was found in sys.modules and runs it twice)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeWarning" not in proc.stderr and "found in sys.modules" not in proc.stderr, proc.stderr
