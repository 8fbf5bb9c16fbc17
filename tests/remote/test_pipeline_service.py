"""Pipelines served by a real Triton (PyTriton) on 127.0.0.1: one server process for the module,
hosting the same pipeline on cpu_serial, cpu_threads and opencl, the error pipelines and a plain
model, so the whole module pays for one server start."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import portable as pk
from inference import PipelineError, RemotePipeline, pipeline
from inference.remote import MetadataMismatch, RemoteModel, RemoteTimeout

from . import pipeline_support as S
from .triton_support import pytriton_reason, settled

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

SLOW_S = 2.0
#: the backends a server hosts the chain pipeline on, as far as --backends / ALPYKA_BACKENDS select them
SERVED = ("cpu_serial", "cpu_threads", "opencl")


def served_backends(config) -> list[str]:
    from portable.testing.plugin import selected_backends

    chosen = selected_backends(config)
    return [b for b in SERVED if b in chosen and b in pk.available_backends()]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


@pytest.fixture(scope="module")
def server(request):
    from inference.serving import serve

    os.environ["ALPYKA_TEST_SLOW_S"] = str(SLOW_S)  # the server inherits it (pipeline `slow`)
    models = {f"chain_{b}": {"pipeline": S.chain, "device": b} for b in served_backends(request.config)}
    models.update(
        {
            "chain": S.chain,
            "pairs": S.pairs,
            "broken": S.broken,
            "half_done": S.half_done,
            "slow": S.slow,
            "identity": {"path": Identity(), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]},
        }
    )
    handle = serve(models, device="cpu_serial")
    try:
        yield handle
    finally:
        os.environ.pop("ALPYKA_TEST_SLOW_S", None)
        handle.stop()
    assert handle.process.poll() is not None


def local_columns(pipe, backend: str, n: int = 41, seed: int = 5) -> dict[str, np.ndarray]:
    q = pk.Queue(pk.device(backend))
    tracks = S.make_tracks(n, q, seed)
    out = pk.PortableCollection(pipe.outputs[0].layout, pipe.output_rows([n])[0], q)
    pipe(q, tracks, out)
    return out.to_dict(q)


def sentinel(layout, n: int, q) -> pk.PortableCollection:
    coll = pk.PortableCollection(layout, n, q)
    pk.memset(q, coll, 0x11)
    return coll


@pytest.mark.alpyka_backends(*SERVED)  # the plugin's matrix: the selected ones, the others skipped with why
def test_remote_equals_local(server, backend):
    """chain (two kernels and a Model) on a server's cpu_serial/cpu_threads/opencl queue gives
    the columns the local run on that backend gives."""
    want = local_columns(S.chain, backend)
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(41, q, 5)
    out = sentinel(S.Scored, 41, q)
    with S.chain.remote(server.grpc_url, name=f"chain_{backend}", timeout=30) as remote:
        remote(q, tracks, out)
        got = out.to_dict(q)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert float(got["total"]) == 3.0


@pytest.mark.parametrize("mode", ["async", "pseudo_async"])
def test_async_modes_on_a_device_queue(request, server, mode):
    """call_async from an OpenCL (else cpu_threads, else cpu_serial) queue: a future whose event
    chains into the queue; outputs land in device memory."""
    served = served_backends(request.config)
    if not served:
        pytest.skip(f"--backends / ALPYKA_BACKENDS select none of {SERVED}")
    backend = served[-1]
    want = local_columns(S.chain, "cpu_serial", n=23, seed=2)
    q = pk.Queue(pk.device(backend))
    tracks = S.make_tracks(23, q, 2)
    out = sentinel(S.Scored, 23, q)
    remote = RemotePipeline(server.grpc_url, "chain", declaration=S.chain, mode=mode, timeout=30)
    try:
        fut = remote.call_async(q, tracks, out)
        q.wait_for(fut.event)
        got = out.to_dict(q)
        assert fut.done()
    finally:
        remote.close()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)


def test_undeclared_client_and_rows_rule(server):
    """RemotePipeline(url, name) without the declaration takes the layouts from the call."""
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(10, q, 4)
    out = sentinel(S.Summary, 5, q)
    with RemotePipeline([server.grpc_url], "pairs", timeout=30) as remote:
        remote(q, tracks, out)
        got = out.to_dict(q)["s"]
        with pytest.raises(MetadataMismatch, match=r"collection 'pairs' \(Scored\) does not match the server"):
            remote(q, tracks, pk.PortableCollection(S.Scored, 5, q))
    x = tracks.to_dict(q)["x"]
    np.testing.assert_allclose(got, x[0::2] + x[1::2], rtol=1e-6)


def test_layout_mismatch_with_the_server(server):
    other = pipeline(inputs={"tracks": S.Summary}, outputs={"scored": S.Scored})(lambda q, t, s: None)
    with pytest.raises(
        MetadataMismatch,
        match=r"pipeline 'chain': the server's inputs do not match the "
        r"declared layouts \(tracks: Summary\)",
    ):
        other.remote(server.grpc_url, name="chain", timeout=30)


def test_server_exception_names_the_pipeline_and_leaves_outputs(server):
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(8, q)
    out = sentinel(S.Scored, 8, q)
    before = out.to_dict(q)
    with S.broken.remote(server.grpc_url, timeout=30, retries=2) as remote:
        remote(q, tracks, out)
        with pytest.raises(
            Exception,
            match=r"pipeline 'broken' failed on server 127.0.0.1:\d+: "
            r"ValueError: broken pipeline refuses 8 rows",
        ) as info:
            q.wait()
        assert isinstance(info.value.__cause__, PipelineError)
        assert remote.statistics().client.retries == 0  # the same failure everywhere: not retried
        chain, err = [], info.value
        while err is not None:  # what the server sent: the error's type and message, no traceback
            chain.append(str(err))
            err = err.__cause__
        text = "\n".join(chain)
        assert "Traceback" not in text and ".py" not in text and "/tmp" not in text, text
    after = out.to_dict(q)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_unfilled_outputs_are_an_error(server):
    q = pk.Queue(pk.device("cpu_serial"))
    out = sentinel(S.Scored, 6, q)
    with S.half_done.remote(server.grpc_url, timeout=30) as remote:
        remote(q, S.make_tracks(6, q), out)
        with pytest.raises(
            Exception,
            match=r"pipeline 'half_done' failed on server .*OutputsNotFilled: "
            r"pipeline 'half_done' did not fill output column\(s\) "
            r"\['scored.e', 'scored.tag', 'scored.total'\]",
        ):
            q.wait()
    assert np.all(out.to_dict(q)["score"].view(np.uint8) == 0x11)


def test_timeout_fails_fast_and_writes_nothing(server):
    q = pk.Queue(pk.device("cpu_serial"))
    out = sentinel(S.Scored, 4, q)
    t0 = time.monotonic()
    with S.slow.remote(server.grpc_url, timeout=0.5, retries=0) as remote:
        remote(q, S.make_tracks(4, q), out)
        with pytest.raises(Exception, match="pipeline 'slow'.*timed out after 0.5 s") as info:
            q.wait()
    assert isinstance(info.value.__cause__, RemoteTimeout)
    # the error says the client timed out (the server would have answered after SLOW_S); the
    # bound only guards a hang, with headroom for a busy machine
    assert time.monotonic() - t0 < 30
    assert np.all(np.ascontiguousarray(out.to_dict(q)["e"]).view(np.uint8) == 0x11)
    time.sleep(SLOW_S)  # let the server finish that request before the next test


def test_plain_model_beside_pipelines(server):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with RemoteModel(server.grpc_url, "identity", timeout=30) as model:
        np.testing.assert_array_equal(model.infer({"x": x})["y"], x)
    kinds = {m.name: m.kind for m in server.models}
    assert kinds["identity"] == "model" and kinds["chain"] == "pipeline"


def test_statistics_count_events_and_bytes(server):
    q = pk.Queue(pk.device("cpu_serial"))
    tracks, out = S.make_tracks(16, q), pk.PortableCollection(S.Scored, 16, q)
    with S.chain.remote(server.grpc_url, timeout=30, shared_memory=None) as remote:
        before = remote.statistics().server  # the module's server: earlier tests' requests counted too
        for _ in range(3):
            remote(q, tracks, out)
        q.wait()
        st = remote.statistics()
        served = settled(lambda: remote.statistics().server.minus(before), lambda d: d.requests >= 3)
        per = remote.server_counters()
    assert st.client.events == 3 and st.client.requests == 3
    assert st.client.bytes_sent == 3 * 16 * (4 + 12 + 16 + 4) + 3 * 4
    assert per[server.grpc_url].requests == 3
    assert served.requests >= 3  # at least: a request of the test before can be counted late


def test_zero_rows_through_a_pipeline(server):
    """No rows in and out (PyTriton cannot pass empty tensors: they travel as one row, named in
    the request's parameters): the pipeline still runs on the server, its scalars come back."""
    q = pk.Queue(pk.device("cpu_serial"))
    with S.chain.remote(server.grpc_url, timeout=30, retries=0) as remote:
        for n in (0, 6, 0):
            tracks = S.make_tracks(n, q, seed=5)
            out = sentinel(S.Scored, n, q)
            remote(q, tracks, out)
            got, want = out.to_dict(q), local_columns(S.chain, "cpu_serial", n=n, seed=5)
            assert set(got) == set(want)
            for k in want:
                assert np.shape(got[k])[:1] == np.shape(want[k])[:1] and np.allclose(got[k], want[k]), k
