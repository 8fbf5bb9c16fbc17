"""RemoteModel against an in-test KServe v2 double: round trips, batching, queue order, faults,
timeouts, wrong metadata and retries to a second server."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import portable as pk
from inference import ModelMetadata, SoAMetadata
from inference.remote import MetadataMismatch, ModelNotFound, RemoteModel, RemoteTimeout, ServerUnavailable
from inference.serving import free_port

from .conftest import Preds, hits_matrix, make_hits, make_out, metadata, out_matrix

# the doubles serve small batch limits on purpose (a forward split over requests is what these tests
# exercise); the advice alpyka gives users then is asserted by test_rectangular_batching_splits_...
pytestmark = pytest.mark.filterwarnings("ignore::inference.remote.BatchSplitWarning")


@pytest.mark.parametrize("mode", ["sync", "async", "pseudo_async"])
def test_round_trip_into_soa(double, mode):
    srv = double()
    hits, out = make_hits(20, seed=1), make_out(Preds, 20)
    with RemoteModel(srv.url, "double", mode=mode, timeout=5) as model:
        model.forward(metadata(hits, out))
        np.testing.assert_array_equal(out_matrix(out), 2 * hits_matrix(hits))
        out2 = make_out(Preds, 20)
        fut = model.forward_async(metadata(hits, out2))
        fut.wait(10)
        np.testing.assert_array_equal(out_matrix(out2), 2 * hits_matrix(hits))
        assert model.statistics().client.events == 2


def test_rectangular_batching_splits_over_max_batch_size(double):
    import warnings

    from inference.remote import BatchSplitWarning

    srv = double(max_batch_size=8)
    hits, out = make_hits(20, seed=2), make_out(Preds, 20)
    with RemoteModel(srv.url, "double", timeout=5) as model:
        with pytest.warns(BatchSplitWarning, match=r"a forward of 20 rows went out as 3 requests \(batch limit 8"):
            model.forward(metadata(hits, out))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once per client
            model.forward(metadata(hits, out))
    np.testing.assert_array_equal(out_matrix(out), 2 * hits_matrix(hits))
    assert sorted(srv.behaviour.rows) == [4, 4, 8, 8, 8, 8]


def test_the_default_batch_limit_comes_from_the_message_size():
    from inference.serving._spec import AUTO_BATCH_ROWS, TensorDecl, auto_batch_size

    three_floats = [TensorDecl("x", "float32", (3,))]
    assert auto_batch_size(three_floats, [TensorDecl("y", "float32", (2,))]) == AUTO_BATCH_ROWS[1]  # 20 B a row
    big = [TensorDecl("img", "float32", (3, 224, 224))]  # 602 kB a row: the floor
    assert auto_batch_size(big, []) == AUTO_BATCH_ROWS[0]
    mid = [TensorDecl("f", "float64", (512,))]  # 4 kB in, outputs unknown (counted as the inputs)
    assert auto_batch_size(mid, []) == (32 << 20) // 8192


def test_ragged_batching_many_events_in_one_request(double):
    srv = double(max_batch_size=64)
    sizes = [3, 10, 1, 7]
    hits = [make_hits(n, seed=10 + n) for n in sizes]
    outs = [make_out(Preds, n) for n in sizes]
    with RemoteModel(srv.url, "double", timeout=5) as model:
        model.forward_many([metadata(h, o) for h, o in zip(hits, outs)])
        assert srv.behaviour.rows == [sum(sizes)]
        for h, o in zip(hits, outs):
            np.testing.assert_array_equal(out_matrix(o), 2 * hits_matrix(h))
        more = [make_out(Preds, n) for n in sizes]
        model.forward_many_async([metadata(h, o) for h, o in zip(hits, more)]).wait(10)
        for h, o in zip(hits, more):
            np.testing.assert_array_equal(out_matrix(o), 2 * hits_matrix(h))


def test_forward_runs_in_queue_order_and_chains_async(double):
    srv = double(delay=0.05)
    q = pk.Queue(pk.host())
    hits, out = make_hits(16, seed=3), make_out(Preds, 16)
    x = hits_matrix(hits)
    v = hits.view()
    with RemoteModel(srv.url, "double", timeout=5).to(q) as model:
        q.enqueue_host(lambda: v.a.__imul__(3))  # a producer: must run before the request
        model.forward(metadata(hits, out))
        q.wait()
        x[:, 0] *= 3
        np.testing.assert_array_equal(out_matrix(out), 2 * x)
        # async: the queue returns at once; a consumer chained with wait_for sees the outputs
        out2, seen = make_out(Preds, 16), []
        fut = model.forward_async(metadata(hits, out2))
        q2 = pk.Queue(pk.host())
        q2.wait_for(fut.event)
        q2.enqueue_host(lambda: seen.append(out_matrix(out2)))
        q2.wait()
        assert fut.done()
        np.testing.assert_array_equal(seen[0], 2 * x)


def test_async_requests_overlap(double):
    srv = double(delay=0.2)
    hits = make_hits(8, seed=4)
    outs = [make_out(Preds, 8) for _ in range(6)]
    with RemoteModel(srv.url, "double", timeout=5, mode="async") as model:
        futs = [model.forward_async(metadata(hits, o)) for o in outs]
        # every request was sent before the first answer (each takes 0.2 s on the server)
        pending = sum(not f.done() for f in futs)
        for f in futs:
            f.wait(10)
    assert pending >= 1
    for o in outs:
        np.testing.assert_array_equal(out_matrix(o), 2 * hits_matrix(hits))


def test_slow_server_times_out_and_leaves_outputs_unchanged(double):
    srv = double(delay=1.5)
    hits, out = make_hits(8, seed=5), make_out(Preds, 8)
    with RemoteModel(srv.url, "double", timeout=0.3, retries=1, retry_delay=0.01) as model:
        with pytest.raises(RemoteTimeout, match="timed out after 0.3 s"):
            model.forward(metadata(hits, out))
        fut = model.forward_async(metadata(hits, out))
        with pytest.raises(RemoteTimeout):
            fut.wait(10)
        assert model.statistics().client.timeouts >= 2
    np.testing.assert_array_equal(out_matrix(out), np.full((8, 3), -7.0, np.float32))
    assert srv.behaviour.requests == 4  # two attempts each, never more


def test_wrong_metadata_names_the_block(double):
    srv = double(wrong_dtype=True)
    hits, out = make_hits(8), make_out(Preds, 8)
    with RemoteModel(srv.url, "double", timeout=5) as model:
        with pytest.raises(MetadataMismatch, match="input block 'x' has dtype float32.*int32"):
            model.forward(metadata(hits, out))
    good = double()
    with RemoteModel(good.url, "double", timeout=5) as model:
        # a partial name match is an error, never a silent mix of names and order
        partial = ModelMetadata(
            SoAMetadata(hits).append_block("x", "a", "b").append_block("extra", "c"),
            SoAMetadata(out).append_block("y", "p", "q", "r"),
        )
        with pytest.raises(
            MetadataMismatch,
            match=r"input blocks \['x', 'extra'\] match the inputs of "
            r"model 'double' \['x'\] only in part \(\['extra'\] is not one\)",
        ):
            model.forward(partial)
        # no name matches and the counts differ: no order to map in either
        two = ModelMetadata(
            SoAMetadata(hits).append_block("x", "a", "b", "c"),
            SoAMetadata(out).append_block("u", "p", "q").append_block("v", "r"),
        )
        with pytest.raises(
            MetadataMismatch,
            match=r"output blocks \['u', 'v'\] are not outputs of model "
            r"'double'; its outputs are \['y'\]",
        ):
            model.forward(two)
    np.testing.assert_array_equal(out_matrix(out), np.full((8, 3), -7.0, np.float32))
    assert good.behaviour.requests == 0


def test_blocks_named_otherwise_map_in_order(double):
    """The metadata of a local Model (block names of the user's choice) works remotely: with as
    many blocks as tensors and no name in common, blocks map to the tensors in order."""
    srv = double()
    hits, out = make_hits(8, seed=11), make_out(Preds, 8)
    with RemoteModel(srv.url, "double", timeout=5) as model:
        md = metadata(hits, out, in_block="features", out_block="preds")
        assert model.check(md) == {"inputs": {"features": "x"}, "outputs": {"preds": "y"}}
        model.forward(md)
        np.testing.assert_array_equal(out_matrix(out), 2 * hits_matrix(hits))
        out2 = make_out(Preds, 8)
        result = model.forward_async(metadata(hits, out2, in_block="features", out_block="preds")).result(10)
        assert list(result) == ["preds"]  # the future's outputs are named after the blocks
        np.testing.assert_array_equal(out_matrix(out2), 2 * hits_matrix(hits))
        # dtype/shape errors still name the block and the tensor it maps to
        bad = ModelMetadata(
            SoAMetadata(hits).append_block("features", "a", "b", "c"),
            SoAMetadata(make_hits(8)).append_block("scores", "flag"),
        )  # int32
        with pytest.raises(MetadataMismatch, match="output block 'scores' has dtype int32, the model's output 'y'"):
            model.forward(bad)


def test_missing_model_lists_the_models_it_has(double):
    srv = double()
    with pytest.raises(ModelNotFound, match=r"no ready model 'gnn'; it has \['double'\]"):
        RemoteModel(srv.url, "gnn", timeout=5, retries=0)


def test_no_server_is_a_bounded_clear_error():
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnavailable, match="3 attempt"):
        RemoteModel(dead, "double", timeout=1, retries=2, retry_delay=0.01)


def test_retries_on_the_same_server(double):
    srv = double(fail_first=2)
    hits, out = make_hits(8, seed=6), make_out(Preds, 8)
    with RemoteModel(srv.url, "double", timeout=5, retries=2, retry_delay=0.01) as model:
        model.forward(metadata(hits, out))
        assert model.statistics().client.retries == 2
    np.testing.assert_array_equal(out_matrix(out), 2 * hits_matrix(hits))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_retries_go_to_the_second_server(double, mode):
    bad, good = double(fail_first=1000), double()
    hits, out = make_hits(8, seed=7), make_out(Preds, 8)
    with RemoteModel(bad.url, "double", servers=[good.url], timeout=5, retries=1, retry_delay=0.01, mode=mode) as model:
        model.forward_async(metadata(hits, out)).wait(10)
        assert model.url == good.url
        assert model.statistics().client.failovers == 1
    assert bad.behaviour.requests == 2 and good.behaviour.requests == 1
    np.testing.assert_array_equal(out_matrix(out), 2 * hits_matrix(hits))


def test_server_killed_mid_run(double, double_process):
    port = free_port()
    proc = double_process(port)
    backup = double()
    hits = make_hits(8, seed=8)
    q = pk.Queue(pk.host())
    lone = RemoteModel(f"127.0.0.1:{port}", "double", timeout=2, retries=1, retry_delay=0.01).to(q)
    model = RemoteModel(f"127.0.0.1:{port}", "double", servers=[backup.url], timeout=2, retries=1, retry_delay=0.01)
    try:
        first = make_out(Preds, 8)
        model.forward(metadata(hits, first))
        lone.forward(metadata(hits, make_out(Preds, 8)))
        q.wait()
        np.testing.assert_array_equal(out_matrix(first), 2 * hits_matrix(hits))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # with a server list: the request moves to the backup
        after = make_out(Preds, 8)
        model.forward(metadata(hits, after))
        np.testing.assert_array_equal(out_matrix(after), 2 * hits_matrix(hits))
        assert model.url == backup.url
        # alone: a bounded, clear error at the queue's wait, outputs unchanged
        lost = make_out(Preds, 8)
        lone.forward(metadata(hits, lost))
        with pytest.raises(pk.AsyncError, match="unreachable|not live"):
            q.wait()
        np.testing.assert_array_equal(out_matrix(lost), np.full((8, 3), -7.0, np.float32))
    finally:
        model.close()
        lone.close()


def test_statistics_count_client_side(double):
    srv = double(max_batch_size=4)
    with RemoteModel(srv.url, "double", timeout=5) as model:
        out = model.infer({"x": np.ones((10, 3), np.float32)})
        np.testing.assert_array_equal(out["y"], np.full((10, 3), 2, np.float32))
        st = model.statistics().client
        assert st.requests == 3 and st.bytes_sent == 10 * 3 * 4 and st.failures == 0
        srv.stop()  # the server goes away: the client's counters stay readable
        gone = model.statistics()
        assert gone.client.requests == 3 and gone.server is None and gone.server_error, gone
        assert "server counters unavailable" in str(gone)


def test_async_retry_sends_the_inputs_as_they_were_at_enqueue(double):
    """An async request that is retried must re-send the inputs read in queue order, not the
    collection as later queue work left it."""
    srv = double(fail_first=1)
    q = pk.Queue(pk.host())
    hits, out = make_hits(8, seed=9), make_out(Preds, 8)
    x = hits_matrix(hits)
    v = hits.view()
    with RemoteModel(srv.url, "double", timeout=5, retries=1, retry_delay=0.3, mode="async") as model:
        fut = model.forward_async(metadata(hits, out), q)
        q.enqueue_host(lambda: v.a.__setitem__(slice(None), 1000.0))  # later work reuses the inputs
        q.wait()
        fut.wait(10)
        assert model.statistics().client.retries == 1
    np.testing.assert_array_equal(out_matrix(out), 2 * x)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_concurrent_requests_spread_over_two_servers(double, mode):
    """Requests that choose a server at the same moment from several threads see each other (a
    request counts as in flight from its choice), so two servers share concurrent work evenly;
    once it chose, a server that was idle is not taken by all of them at once."""
    from concurrent.futures import ThreadPoolExecutor

    a, b = double(delay=0.2, max_batch_size=1024), double(delay=0.2, max_batch_size=1024)
    with RemoteModel([a.url, b.url], "double", timeout=10, mode=mode) as model:
        model.infer({"x": np.ones((4, 3), np.float32)})  # connected to both before the burst
        model.infer({"x": np.ones((4, 3), np.float32)})
        before = (a.behaviour.requests, b.behaviour.requests)
        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda i: model.infer({"x": np.full((16, 3), i, np.float32)}), range(16)))
        got = (a.behaviour.requests - before[0], b.behaviour.requests - before[1])
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(
            out["output__0" if "output__0" in out else next(iter(out))], np.full((16, 3), 2 * i, np.float32)
        )
    assert sum(got) == 16 and min(got) >= 6, f"16 concurrent requests went {got[0]} / {got[1]}"


def test_a_server_that_went_away_is_set_aside_for_a_while(monkeypatch):
    """A server that failed with ServerUnavailable is tried last for DOWN_S seconds (still
    tried: it may be the only one), although it has fewer requests in flight than the others.
    No server needed: the attempts go to a stand-in for one request on one server."""
    from inference.remote import _requests

    model = RemoteModel(["127.0.0.1:1", "127.0.0.1:2"], "double", retries=0, connect=False)
    gone, alive = model._servers
    sent = []

    def send(srv, inputs, specs, callback, reserved=False):
        if reserved:
            srv.end()  # the plan counted it in flight
        sent.append(srv.url)
        if srv is gone:
            err = ServerUnavailable(f"server {srv.url} went away")
            err.retryable = True  # as the transport marks a connection refused or reset
            raise err
        return {"y": inputs["x"] * 2}

    monkeypatch.setattr(model, "_send", send)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(model._request_sync({"x": x}, {})["y"], 2 * x)
    assert sent == [gone.url, alive.url] and gone.down_until > time.monotonic()
    # a request in flight on the live server: least-outstanding alone would pick the one that
    # went away, whichever server was in use last
    alive.begin()
    for current in (0, 1):
        model._current = current
        assert model._balanced_order() == [1, 0]
    monkeypatch.setattr(_requests, "DOWN_S", 0.0)  # once the time is up it is chosen again
    model._note_failure(gone, ServerUnavailable("once more"))
    assert model._balanced_order()[0] == 0
    alive.end()
    model.close()
