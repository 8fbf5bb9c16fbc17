"""RemoteModel against a real Triton server hosted by ``inference.serve`` (PyTriton)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import portable as pk
from inference.remote import MetadataMismatch, RemoteModel

from .conftest import Preds, Scores, hits_matrix, make_hits, make_out, metadata, out_matrix
from .triton_support import pytriton_reason, serve_cli, settled

torch = pytest.importorskip("torch")
from inference._loading import jit_load  # noqa: E402 - needs torch

pytestmark = [
    pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason())),
    # these servers' small batch limits are on purpose (requests split and joined): alpyka's advice
    # to users (BatchSplitWarning) is not what they test; test_double.py asserts it
    pytest.mark.filterwarnings("ignore::inference.remote.BatchSplitWarning"),
]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l1 = torch.nn.Linear(3, 16)
        self.l2 = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    torch.jit.script(Identity()).save(str(d / "identity.pt"))
    torch.jit.script(MLP()).save(str(d / "mlp.pt"))
    return d


@pytest.fixture(scope="module")
def server(models):
    from inference.serving import serve

    handle = serve(
        {
            "identity": {"path": str(models / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]},
            "mlp": {"path": str(models / "mlp.pt"), "inputs": ["x:float32:3"]},  # outputs probed
        },
        max_batch_size=64,
        max_queue_delay_us=2000,
        http_port=0,  # HTTP is off unless asked for: the round trips run on both protocols
    )
    try:
        yield handle
    finally:
        handle.stop()
    assert handle.process.poll() is not None


def mlp_reference(models, x: np.ndarray) -> np.ndarray:
    m = jit_load(models / "mlp.pt", "cpu")  # the project's loader: no deprecation warning per call
    with torch.no_grad():
        return m(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("shm", [None, "system"])
def test_identity_round_trip(server, protocol, shm):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    hits, out = make_hits(37, seed=1), make_out(Preds, 37)
    with RemoteModel(url, "identity", protocol=protocol, shared_memory=shm, timeout=20) as model:
        before = model.server_statistics()  # the module's server: earlier tests' requests counted too
        model.forward(metadata(hits, out))
        st = model.statistics()
        served = settled(lambda: model.server_statistics().minus(before), lambda d: d.requests >= 1)
    np.testing.assert_array_equal(out_matrix(out), hits_matrix(hits))
    assert st.client.shm_requests == (1 if shm else 0)
    # at least: a request of the test before can still be counted after `before` was read
    assert served.requests >= 1 and served.inferences >= 37


def test_torch_model_round_trip_on_a_queue(server, models):
    n = 300  # over max_batch_size 64: five requests
    hits, out = make_hits(n, seed=2), make_out(Scores, n)
    q = pk.Queue(pk.host())
    with RemoteModel(server.grpc_url, "mlp", timeout=20).to(q) as model:
        info = model.model_info
        assert info.max_batch_size == 64 and info.output("output__0").shape == (-1, 2)
        model.forward(metadata(hits, out, out_block="output__0"))
        q.wait()
        assert model.statistics().client.requests == 5
    np.testing.assert_allclose(out_matrix(out), mlp_reference(models, hits_matrix(hits)), rtol=1e-5, atol=1e-6)


def test_wrong_shape_names_the_block(server):
    hits, out = make_hits(8), make_out(Preds, 8)  # mlp gives 2 columns, Preds has 3
    with RemoteModel(server.grpc_url, "mlp", timeout=20) as model:
        with pytest.raises(MetadataMismatch, match="output block 'output__0' has shape \\[8, 3\\]"):
            model.forward(metadata(hits, out, out_block="output__0"))


def test_dynamic_batching_merges_concurrent_requests(server, models):
    """64 requests of 4 rows in flight at once: every one counted by the server, and at least one
    execution took several of them (more than 4 rows)."""
    hits = [make_hits(4, seed=s) for s in range(64)]
    outs = [make_out(Scores, 4) for _ in hits]
    with RemoteModel(server.grpc_url, "mlp", timeout=30, mode="async") as model:
        before = model.server_statistics()
        futs = [model.forward_async(metadata(h, o, out_block="output__0")) for h, o in zip(hits, outs)]
        for f in futs:
            f.wait(60)
        delta = settled(lambda: model.server_statistics().minus(before), lambda d: d.requests >= 64)
    assert delta.requests == 64 and delta.inferences == 256
    assert delta.executions < delta.requests  # the server merged requests into larger batches
    assert delta.mean_executed_batch > 4
    for h, o in zip(hits, outs):
        np.testing.assert_allclose(out_matrix(o), mlp_reference(models, hits_matrix(h)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["async", "pseudo_async"])
def test_async_overlap_from_many_clients(server, models, mode):
    """16 producer threads each keep their request in flight while producing the next event."""

    def producer(seed):
        hits, out = make_hits(16, seed=seed), make_out(Scores, 16)
        fut = model.forward_async(metadata(hits, out, out_block="output__0"))
        x = hits_matrix(hits)  # work done while the request is in flight
        fut.wait(60)
        return x, out_matrix(out)

    with RemoteModel(server.grpc_url, "mlp", timeout=30, mode=mode, workers=8) as model:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(producer, range(100, 132)))
    for x, got in results:
        np.testing.assert_allclose(got, mlp_reference(models, x), rtol=1e-5, atol=1e-6)


def test_shared_memory_round_trip_ragged(server):
    sizes = [5, 64, 1, 30]
    hits = [make_hits(n, seed=n) for n in sizes]
    outs = [make_out(Preds, n) for n in sizes]
    with RemoteModel(server.grpc_url, "identity", shared_memory="system", timeout=20) as model:
        model.forward_many([metadata(h, o) for h, o in zip(hits, outs)])  # 100 rows: 2 requests
        st = model.statistics()
        regions = model.server.shm_pool().regions
    assert st.client.shm_requests == 2 and st.client.bytes_sent == 0 and regions >= 1
    for h, o in zip(hits, outs):
        np.testing.assert_array_equal(out_matrix(o), hits_matrix(h))


def test_fallback_server_started_and_stopped(models):
    from inference.serving import free_port

    hits, out = make_hits(10, seed=3), make_out(Scores, 10)
    model = RemoteModel(
        f"127.0.0.1:{free_port()}",
        "mlp",
        timeout=2,
        retries=0,
        fallback=str(models / "mlp.pt"),
        fallback_options={"inputs": ["x:float32:3"], "outputs": ["scores:float32:2"]},
    )
    try:
        fb = model.fallback_server
        assert fb is not None and fb.is_running() and model.url == fb.grpc_url
        model.forward(metadata(hits, out, out_block="scores"))
    finally:
        model.close()
    assert fb.process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(fb.pid, 0)  # the whole process group (Triton, its stubs) is gone
    np.testing.assert_allclose(out_matrix(out), mlp_reference(models, hits_matrix(hits)), rtol=1e-5, atol=1e-6)


def test_serve_cli(models):
    with serve_cli(
        str(models / "identity.pt"),
        "--name",
        "ident",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--input",
        "x:float32:3",
        "--max-batch-size",
        "8",
        "--no-dynamic-batching",
    ) as (_, _lines, url):
        with RemoteModel(url, "ident", timeout=20) as model:
            assert model.model_info.max_batch_size == 8 and not model.model_info.dynamic_batching
            x = np.arange(30, dtype=np.float32).reshape(10, 3)
            np.testing.assert_array_equal(model.infer({"x": x})["output__0"], x)


def test_cli_error_is_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "inference.serving", str(tmp_path / "missing.pt")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("shm", [None, "system"])
def test_zero_rows_work_and_send_nothing(server, protocol, shm):
    """An event with no candidates: 0 rows in, 0 rows out, no request (Triton refuses empty
    tensors: "input byte size mismatch", "Invalid offset + byte size"), then rows again."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with RemoteModel(url, "identity", protocol=protocol, shared_memory=shm, timeout=20, retries=0) as model:
        model.forward(metadata(make_hits(0), make_out(Preds, 0)))
        assert model.statistics().client.requests == 0
        hits, out = make_hits(5, seed=2), make_out(Preds, 5)
        model.forward(metadata(hits, out))
        model.forward(metadata(make_hits(0), make_out(Preds, 0)))
        np.testing.assert_array_equal(out_matrix(out), hits_matrix(hits))
        assert model.statistics().client.requests == 1
