"""``serve`` hosts ONNX models (and torch.export programs) in a real Triton server: the tensors
are the model's declared ones, and RemoteModel against the server gives what the local
``Model`` gives on the same collections (one server for the module, stopped by its pid)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import portable as pk
from inference import Model, ModelMetadata, SoAMetadata
from inference.remote import RemoteModel

from .conftest import Preds, Scores, hits_matrix, make_hits, make_out, metadata, out_matrix
from .triton_support import pytriton_reason, serve_cli, server_child, torch_loaded

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")

pytestmark = [
    pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason())),
    # forwards over the served max_batch_size of 64 on purpose (the split is what they exercise):
    # alpyka's advice to users then (a BatchSplitWarning) is asserted in tests/remote/test_double.py
    pytest.mark.filterwarnings("ignore::inference.remote.BatchSplitWarning"),
]


class MLP(torch.nn.Module):
    """3 features -> 2 outputs, fixed weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.l1 = torch.nn.Linear(3, 16)
        self.l2 = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


class TwoHeads(torch.nn.Module):
    """Features -> (preds [n, 2], score [n, 1])."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        preds = self.mlp(x)
        return preds, torch.sigmoid(preds.sum(dim=1, keepdim=True))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    from inference import export

    d = tmp_path_factory.mktemp("onnx_served")
    example = (torch.randn(8, 3),)
    return {
        "mlp.onnx": export(MLP().eval(), example, d / "mlp.onnx"),
        "heads.onnx": export(TwoHeads().eval(), example, d / "heads.onnx", output_names=["preds", "score"]),
        "mlp.pt2": export(MLP().eval(), example, d / "mlp.pt2"),
        "fixed.onnx": export(MLP().eval(), example, d / "fixed.onnx", dynamic_batch=False),
    }


@pytest.fixture(scope="module")
def server(files):
    from inference.serving import serve

    handle = serve(
        {"mlp": files["mlp.onnx"], "heads": files["heads.onnx"], "mlp_pt2": files["mlp.pt2"]},
        max_batch_size=64,
        max_queue_delay_us=1000,
        http_port=0,  # HTTP is off unless asked for: the round trip runs on both protocols
    )
    try:
        yield handle
    finally:
        handle.stop()
    assert handle.process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(handle.pid, 0)  # Triton and its stubs are gone with the server process


def local(path: str, hits: pk.PortableCollection, out: pk.PortableCollection, *blocks: tuple[str, tuple[str, ...]]):
    """Run ``Model(path)`` on the collections (output blocks as given) and wait."""
    q = pk.Queue(pk.host())
    outs = SoAMetadata(out)
    for name, cols in blocks:
        outs.append_block(name, *cols)
    Model(path).to(q).forward(ModelMetadata(SoAMetadata(hits).append_block("x", "a", "b", "c"), outs))
    q.wait()


def test_tensors_are_the_onnx_models_declared_ones(server):
    specs = {m.name: m for m in server.models}
    mlp, heads = specs["mlp"], specs["heads"]
    assert [(t.name, t.dtype, t.dims) for t in mlp.inputs] == [("x", "float32", (3,))]
    assert [(t.dtype, t.dims) for t in mlp.outputs] == [("float32", (2,))]
    assert [(t.name, t.dims) for t in heads.outputs] == [("preds", (2,)), ("score", (1,))]
    assert mlp.inputs_from == "the ONNX model's declared inputs"
    with RemoteModel(server.grpc_url, "heads", timeout=20) as model:
        info = model.model_info
        assert info.max_batch_size == 64
        assert info.input("x").shape == (-1, 3) and info.output("score").shape == (-1, 1)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_remote_onnx_matches_the_local_model(server, files, protocol):
    n = 300  # over max_batch_size 64: five requests
    hits = make_hits(n, seed=5)
    remote_out, local_out = make_out(Scores, n), make_out(Scores, n)
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with RemoteModel(url, "mlp", protocol=protocol, timeout=20) as model:
        model.forward(metadata(hits, remote_out))  # the output block maps to the model's one output in order
        assert model.statistics().client.requests == 5
    local(files["mlp.onnx"], hits, local_out, ("y", ("s0", "s1")))
    got, want = out_matrix(remote_out), out_matrix(local_out)
    assert not np.all(want == -7.0)  # the local model wrote its outputs
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        eager = MLP()(torch.from_numpy(hits_matrix(hits))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-5)


def test_two_outputs_by_name_match_the_local_model(server, files):
    n = 50
    hits = make_hits(n, seed=6)
    remote_out, local_out = make_out(Preds, n), make_out(Preds, n)
    blocks = (("preds", ("p", "q")), ("score", ("r",)))
    ins = SoAMetadata(hits).append_block("x", "a", "b", "c")
    outs = SoAMetadata(remote_out)
    for name, cols in blocks[::-1]:  # declared in the other order: the names pair them
        outs.append_block(name, *cols)
    with RemoteModel(server.grpc_url, "heads", timeout=20) as model:
        model.forward(ModelMetadata(ins, outs))
    local(files["heads.onnx"], hits, local_out, *blocks)
    np.testing.assert_allclose(out_matrix(remote_out), out_matrix(local_out), rtol=1e-6, atol=1e-6)
    score = out_matrix(remote_out)[:, 2]
    assert np.all((score > 0) & (score < 1))


def test_served_exported_program_matches_the_local_model(server, files):
    n = 70
    hits = make_hits(n, seed=7)
    remote_out, local_out = make_out(Scores, n), make_out(Scores, n)
    with RemoteModel(server.grpc_url, "mlp_pt2", timeout=20) as model:
        model.forward(metadata(hits, remote_out))
    local(files["mlp.pt2"], hits, local_out, ("y", ("s0", "s1")))
    np.testing.assert_allclose(out_matrix(remote_out), out_matrix(local_out), rtol=1e-5, atol=1e-6)


def test_a_fixed_batch_axis_is_refused_before_starting(files):
    from inference.serving import serve

    with pytest.raises(
        ValueError,
        match=r"fixed.onnx: input x float32\[8,3\] has a fixed first axis of 8.*"
        r"max_batch_size=0",
    ):
        serve(files["fixed.onnx"])


def test_serve_cli_hosts_an_onnx_file(files):
    """... on numpy arrays: neither the command nor its server process loads torch."""
    with serve_cli(files["mlp.onnx"], "--name", "m", "--grpc-port", "0", "--http-port", "0") as (cli, lines, url):
        assert any(ln.startswith("model m: x:float32[3] -> ") for ln in lines), "".join(lines)
        assert not torch_loaded(cli.pid) and not torch_loaded(server_child(cli.pid))
        x = make_hits(9, seed=8)
        with RemoteModel(url, "m", timeout=20) as model:
            got = next(iter(model.infer({"x": hits_matrix(x)}).values()))
        with torch.no_grad():
            np.testing.assert_allclose(got, MLP()(torch.from_numpy(hits_matrix(x))).numpy(), rtol=1e-4, atol=1e-5)


def test_an_onnx_model_is_served_on_arrays_as_on_tensors(files, tmp_path):
    """The server process runs an ONNX model on the CPU on numpy arrays (no torch imported): its
    outputs, found by the trial run and returned per request, are bit for bit those of the
    tensor path (``run_tensors``, which a CUDA device takes); a wrong dtype or count is refused
    with the tensor path's words."""
    import subprocess
    import sys

    from inference._onnx import ArgumentError, ArgumentTypeError, OnnxProgram
    from inference.serving import _models
    from inference.serving._spec import ModelSpec, TensorDecl

    x = hits_matrix(make_hits(11, seed=9))
    code = (
        "import sys, numpy as np\n"
        "from inference.serving import _models\n"
        f"model = _models.load_model({files['heads.onnx']!r}, 'cpu')\n"
        f"outs = model(np.load({str(tmp_path / 'x.npy')!r}))\n"
        f"np.savez({str(tmp_path / 'outs.npz')!r}, *outs)\n"
        "assert isinstance(model, _models.ArrayModel) and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    np.save(tmp_path / "x.npy", x)
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=120)
    on_tensors = OnnxProgram(files["heads.onnx"]).runner(torch.device("cpu")).run_tensors(torch.from_numpy(x))
    with np.load(tmp_path / "outs.npz") as got:
        assert len(got.files) == 2
        for i, want in enumerate(on_tensors):
            np.testing.assert_array_equal(got[f"arr_{i}"], want.numpy())
    model = _models.load_model(files["heads.onnx"], "cpu")
    batched = ModelSpec("heads", files["heads.onnx"], inputs=[TensorDecl("x", np.float32, (3,))], max_batch_size=8)
    found = _models.probe_outputs(model, batched, "cpu")  # a trial run on zeros of two samples
    assert [(t.dtype, t.dims) for t in found] == [(np.float32, (2,)), (np.float32, (1,))]
    spec = ModelSpec("heads", files["heads.onnx"], inputs=[TensorDecl("x", np.float32, (11, 3))], max_batch_size=0)
    spec.outputs = [TensorDecl("preds", np.float32, (11, 2)), TensorDecl("score", np.float32, (11, 1))]
    (reply,) = _models.make_infer(model, spec, "cpu")([{"x": x}])
    np.testing.assert_array_equal(reply["preds"], on_tensors[0].numpy())
    np.testing.assert_array_equal(reply["score"], on_tensors[1].numpy())
    with pytest.raises(ArgumentTypeError, match=r"heads.onnx: input x float32\[\?,3\] gets a tensor of dtype float64"):
        model(x.astype(np.float64))
    with pytest.raises(ArgumentError, match=r"heads.onnx takes 1 input\(s\) .*, got 2"):
        model(x, x)


def test_a_scalar_input_stays_a_scalar_on_arrays(tmp_path):
    """``np.ascontiguousarray`` made a 0-d input 1-d: the array path gave ``[-0.]`` where the
    tensor path gives ``-0.`` (and the trial run declared the output ``(1,)``, not ``()``)"""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from inference._onnx import HOST, OnnxProgram

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "scalar.onnx"
    onnx.save(model, path)
    program = OnnxProgram(str(path))
    (on_tensors,) = program.runner(torch.device("cpu")).run_tensors(torch.tensor(2.5))
    (on_arrays,) = program.runner(HOST).run_arrays(np.array(2.5, np.float32))
    assert on_arrays.shape == tuple(on_tensors.shape) == ()
    np.testing.assert_array_equal(on_arrays, on_tensors.numpy())
