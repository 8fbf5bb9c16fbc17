"""Regression tests of the remote-inference reliability fixes:

1. ``serve`` finds a model's input shape itself (first Linear, torch.export input specs) or says
   in one line what to declare;
2. blocks named otherwise than the server's tensors map in order (as with a local Model);
3. ``ModelNotFound`` lists the models the server has;
4. a model still loading is waited for (``ready_timeout``), then a clear error;
5. a killed server process takes Triton with it, clients fail fast on a dead server, and the
   shared memory / work directories of killed processes are swept.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_root
from inference.remote import ModelNotFound, ModelNotReady, RemoteModel, ServerUnavailable
from inference.serving import free_port
from inference.serving._leftovers import group_alive, group_members, sweep

from .conftest import hits_matrix, make_hits
from .triton_support import pytriton_reason

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))


class Feats(soa.Layout):
    f0 = soa.column(np.float32)
    f1 = soa.column(np.float32)
    f2 = soa.column(np.float32)
    f3 = soa.column(np.float32)


class One(soa.Layout):
    v = soa.column(np.float32)


class Seq(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class ConvFirst(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 3, 3)
        self.head = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(-1))


def _stub_folders(pgid: int) -> list[str]:
    """The model folders of the Triton Python-backend stubs in process group ``pgid``."""
    found = []
    for pid in group_members(pgid) or []:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"triton_python_backend_stub"):
            found.append(os.path.dirname(os.path.dirname(os.fsdecode(argv[1]))))
    return found


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("reliability")
    torch.manual_seed(0)
    torch.jit.script(torch.nn.Linear(4, 1)).save(str(d / "lin.pt"))  # 4 features, nothing declared
    torch.jit.script(ConvFirst()).save(str(d / "conv.pt"))
    batch = torch.export.Dim("batch", min=1, max=1024)
    ep = torch.export.export(Seq().eval(), (torch.zeros(3, 4),), dynamic_shapes=({0: batch},))
    torch.export.save(ep, str(d / "seq.pt2"))
    return d


@pytest.fixture(scope="module")
def server(files):
    """The module's server: lin and seq (inputs found by serve), and the identity model of the
    shared-memory test, with a sweep of dead clients' regions every second (the server process
    inherits ALPYKA_SERVE_SHM_SWEEP_TICKS; the default is every 5 s)."""
    from inference.serving import serve

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x.clone()

    os.environ["ALPYKA_SERVE_SHM_SWEEP_TICKS"] = "2"
    try:
        handle = serve(
            {
                "lin": str(files / "lin.pt"),
                "seq": str(files / "seq.pt2"),
                "identity": {"path": Identity(), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]},
            },
            http_port=0,  # HTTP is off unless asked for: ModelNotFound is checked on both protocols
        )
    finally:
        del os.environ["ALPYKA_SERVE_SHM_SWEEP_TICKS"]
    try:
        yield handle
    finally:
        handle.stop()


def feats(n: int, seed: int = 0) -> pk.PortableCollection:
    rng = np.random.default_rng(seed)
    coll = pk.PortableCollection(Feats, n, pk.host())
    v = coll.view()
    for name in Feats.field_names():
        getattr(v, name)[:] = rng.standard_normal(n).astype(np.float32)
    return coll


def feats_matrix(coll: pk.PortableCollection) -> np.ndarray:
    v = coll.view()
    return np.stack([getattr(v, n) for n in Feats.field_names()], axis=1).copy()


# ------------------------------------------------------------------ 1. input shapes read from the model
def test_inputs_read_from_the_model(files):
    from inference.serving._spec import inputs_from_model

    decls, where = inputs_from_model(str(files / "lin.pt"), batching=True)
    assert [(t.name, t.dtype, t.dims) for t in decls] == [("input__0", "float32", (4,))]
    assert "in_features 4" in where
    decls, where = inputs_from_model(str(files / "seq.pt2"), batching=True)
    assert [(t.name, t.dtype, t.dims) for t in decls] == [("input__0", "float32", (4,))]
    decls, why = inputs_from_model(str(files / "conv.pt"), batching=True)
    assert decls == [] and "Conv1d" in why


@needs_triton
def test_serve_finds_the_input_shape_itself(server, files):
    specs = {m.name: m for m in server.models}
    assert [(t.name, t.dims) for t in specs["lin"].inputs] == [("input__0", (4,))]
    assert [(t.name, t.dims) for t in specs["seq"].outputs] == [("output__0", (2,))]
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with RemoteModel(server.grpc_url, "seq", timeout=20) as model:
        got = model.infer({"input__0": x})["output__0"]
    ref = torch.export.load(str(files / "seq.pt2")).module()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@needs_triton
def test_cli_says_in_one_line_what_to_declare(files):
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from portable.cli._main import main; sys.exit(main())",
            "serve",
            str(files / "conv.pt"),
            "--name",
            "conv",
            "--grpc-port",
            "0",
            "--http-port",
            "0",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=180,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("alpyka serve: error: model 'conv': a trial run on zeros")
    assert "Conv1d" in r.stderr and "--input input__0:float32:" in r.stderr


# ------------------------------------------------------------------ 2. blocks map in order
@needs_triton
def test_the_metadata_of_a_local_model_works_remotely(server, files):
    """The issue: blocks 'features' -> 'y' work with Model but failed with RemoteModel
    ("output block 'y' is not an output of model 'lin'; its outputs are ['output__0']")."""
    from inference import Model, ModelMetadata, SoAMetadata

    n = 20
    x = feats(n, seed=3)
    local_out = pk.PortableCollection(One, n, pk.host())
    remote_out = pk.PortableCollection(One, n, pk.host())

    def md(out):
        return ModelMetadata(
            SoAMetadata(x).append_block("features", *Feats.field_names()), SoAMetadata(out).append_block("y", "v")
        )

    q = pk.Queue(pk.host())
    Model(str(files / "lin.pt")).to(q).forward(md(local_out))
    q.wait()
    with RemoteModel(server.grpc_url, "lin", timeout=20) as model:
        model.forward(md(remote_out))
    ref = torch.jit.load(str(files / "lin.pt"))(torch.from_numpy(feats_matrix(x))).detach().numpy()[:, 0]
    np.testing.assert_allclose(remote_out.view().v, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(remote_out.view().v, local_out.view().v, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ 3. ModelNotFound lists the models
@needs_triton
def test_model_not_found_lists_the_servers_models(server):
    t0 = time.monotonic()
    with pytest.raises(
        ModelNotFound,
        match=r"no ready model 'nope' \(waited [0-9.]+ s for it to load\); "
        r"it has \['identity', 'lin', 'seq'\]",
    ):
        RemoteModel(server.grpc_url, "nope", timeout=60, ready_timeout=0.5)
    assert time.monotonic() - t0 < 30  # the 0.5 s ready wait, not the 60 s timeout (headroom: a busy machine)
    with pytest.raises(ModelNotFound, match=r"it has \['identity', 'lin', 'seq'\]"):
        RemoteModel(server.http_url, "nope", protocol="http", timeout=10, ready_timeout=0.3)


def test_model_not_found_at_once_when_the_server_lists_its_models(double):
    srv = double()
    t0 = time.monotonic()
    with pytest.raises(ModelNotFound, match=r"no ready model 'gnn'; it has \['double'\]"):
        RemoteModel(srv.url, "gnn", timeout=60)  # the index lists the server's models: no wait
    assert time.monotonic() - t0 < 30  # a wait would take the 60 s (headroom: a busy machine)


# ------------------------------------------------------------------ 4. a loading model is waited for
def test_a_loading_model_is_waited_for(double):
    srv = double(loading=1.0)
    hits = make_hits(6, seed=1)
    t0 = time.monotonic()
    with RemoteModel(srv.url, "double", timeout=60, retries=0) as model:
        waited = time.monotonic() - t0
        out = model.infer({"x": hits_matrix(hits)})["y"]
    assert 0.8 < waited < 30  # the 1 s load, not the 60 s timeout (headroom: a busy machine)
    np.testing.assert_array_equal(out, 2 * hits_matrix(hits))


def test_a_model_that_never_loads_is_a_clear_error(double):
    srv = double(loading=100.0)
    t0 = time.monotonic()
    with pytest.raises(
        ModelNotReady,
        match=r"model 'double' on server 127\.0\.0\.1:\d+ never became ready "
        r"within 0\.[5-9] s \(state LOADING\)",
    ):
        RemoteModel(srv.url, "double", timeout=60, ready_timeout=0.6)
    assert time.monotonic() - t0 < 30  # the 0.6 s ready wait, not the 60 s timeout


def test_unlisted_loading_model_is_waited_for_then_found(double):
    """PyTriton's servers list no repository index: an unknown name is waited for too."""
    srv = double(loading=0.8, list_models=False)
    with RemoteModel(srv.url, "double", timeout=5) as model:
        assert model.model_info.name == "double"


def test_second_server_is_used_while_the_first_loads(double):
    slow, ready = double(loading=100.0), double()
    with RemoteModel(slow.url, "double", servers=[ready.url], timeout=5) as model:
        assert model.url == ready.url


# ------------------------------------------------------------------ 5. dead servers and leftovers
def test_dead_server_fails_fast_with_connection_refused():
    dead = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable, match="connection refused"):
        RemoteModel(dead, "double", timeout=60, retries=2, retry_delay=0.01)
    assert time.monotonic() - t0 < 30  # far below the 60 s timeout (headroom: a busy machine)


@needs_triton
def test_killed_server_process_takes_triton_with_it(files):
    from inference.serving import serve

    # a 30 s queue delay keeps a lone request in flight in Triton's dynamic batcher
    handle = serve({"lin": str(files / "lin.pt")}, max_queue_delay_us=30_000_000)
    try:
        model = RemoteModel(handle.grpc_url, "lin", timeout=60, retries=0, shared_memory=None)
        fut = model.infer_async({"input__0": np.ones((1, 4), np.float32)})
        time.sleep(0.5)
        assert not fut.done()
        folders = _stub_folders(handle.pid)  # Triton's model folders for its stubs (/tmp/folderXXXXXX)
        assert folders and all(Path(f).exists() for f in folders)
        os.kill(handle.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailable):
            fut.result(30)
        assert time.monotonic() - t0 < 30  # not the 60 s timeout (headroom: a busy machine)
        deadline = time.monotonic() + 10
        while group_alive(handle.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_alive(handle.pid), "tritonserver outlived the server process"
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailable, match="connection refused"):
            RemoteModel(handle.grpc_url, "lin", timeout=60, retries=1, retry_delay=0.01)
        assert time.monotonic() - t0 < 30  # not the 60 s timeout
        model.close()
    finally:
        handle.stop()
    assert not handle.workdir.exists()
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"pytrtion{handle.pid}-")]
    assert not any(Path(f).exists() for f in folders)


@needs_triton
@pytest.mark.parametrize("how", ["killed", "ignores_sigterm"])
def test_a_dead_or_deaf_server_is_stopped_without_leftovers(files, how):
    """killed: ``alpyka serve`` stops its handle within 0.5 s of the server process dying, and the
    stop leaves the group's watchdog its time to remove Triton's stub folders (it used to kill it
    first). ignores_sigterm (the process is stopped here): it is SIGKILLed alone first, so that its
    watchdog stops Triton and removes the folders, then what is left of its group."""
    from inference.serving import serve

    handle = serve({"lin": str(files / "lin.pt")})
    try:
        folders = _stub_folders(handle.pid)
        assert folders and all(Path(f).exists() for f in folders)
        os.kill(handle.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    finally:
        handle.stop(timeout=1)
    assert handle.process.returncode == -signal.SIGKILL
    assert not group_alive(handle.pid)
    assert not any(Path(f).exists() for f in folders)


@needs_triton
def test_killed_parent_leaves_nothing_behind(files):
    script = textwrap.dedent(f"""
        import json, sys, time
        from inference.serving import serve
        h = serve({{"lin": {str(files / "lin.pt")!r}}})
        print(json.dumps({{"pid": h.pid, "workdir": str(h.workdir), "url": h.grpc_url}}), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        line = parent.stdout.readline()
        info = json.loads(line)
        assert Path(info["workdir"]).name.startswith(f"alpyka-serve-{parent.pid}-")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while (group_alive(info["pid"]) or Path(info["workdir"]).exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_alive(info["pid"])
        assert not Path(info["workdir"]).exists()
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"pytrtion{info['pid']}-")]
    finally:
        if parent.poll() is None:
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(10)
        parent.stdout.close()


def test_sweep_removes_what_dead_processes_left(tmp_path):
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    dead, dead_server, me = _dead_pid(), _dead_pid(), os.getpid()
    stale = [shm / f"alpyka-remote-{dead}-0-abc123", shm / f"alpyka_{dead}_3", shm / f"pytrtion{dead_server}-ffff-1"]
    kept = [shm / f"alpyka-remote-{me}-0-abc123", shm / f"pytrtion{dead}-not-ours", shm / "something-else"]
    for p in stale + kept:
        p.write_bytes(b"x")
    gone_dir = tmp / f"alpyka-serve-{dead}-abcd"
    serving_dir = tmp / f"alpyka-serve-{dead}-efgh"  # parent dead, server still up: not yet
    mine = tmp / f"alpyka-serve-{me}-ijkl"
    for d, server_pid in ((gone_dir, dead_server), (serving_dir, me), (mine, dead_server)):
        d.mkdir()
        (d / "server.pid").write_text(str(server_pid))
    removed = sweep(shm_dir=shm, tmp_dir=tmp)
    assert not any(p.exists() for p in stale) and not gone_dir.exists()
    assert all(p.exists() for p in kept) and serving_dir.exists() and mine.exists()
    assert len(removed) == len(stale) + 1


def _fake_server():
    calls = []
    return (
        calls,
        (lambda name, key, size: calls.append(("register", name))),
        (lambda name: calls.append(("unregister", name))),
    )


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_client_shared_memory_is_named_and_removed():
    from inference.remote._shm import ShmPool

    x = {"x": np.ones((4, 3), np.float32)}
    outs = {"y": ((4, 3), np.dtype(np.float32))}
    calls, reg, unreg = _fake_server()
    pool = ShmPool(reg, unreg)
    lease = pool.lease(x, outs)
    lease.release()
    name = calls[0][1]
    assert name.startswith(f"alpyka-remote-{os.getpid()}-") and (Path("/dev/shm") / name).exists()
    pool.close()  # explicit: unregistered on the server and unlinked
    assert ("unregister", name) in calls and not (Path("/dev/shm") / name).exists()
    with raises_root(pk.StateError, RuntimeError, r"the shared-memory pool is closed; make a new client"):
        pool.lease(x, outs)
    # garbage-collected without close: unlinked by name, and no call to the server from the GC
    calls2, reg2, unreg2 = _fake_server()
    pool2 = ShmPool(reg2, unreg2)
    pool2.lease(x, outs).release()
    name2 = calls2[0][1]
    del pool2
    gc.collect()
    assert not (Path("/dev/shm") / name2).exists() and calls2 == [("register", name2)]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_killed_client_shared_memory_is_swept_by_the_next_client():
    script = textwrap.dedent("""
        import time
        from inference.remote._shm import ShmPool
        import numpy as np
        names = []
        pool = ShmPool(lambda n, k, s: names.append(n), lambda n: None)
        pool.lease({"x": np.ones((4,), np.float32)}, {}).release()
        print(names[0], flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        name = proc.stdout.readline().strip()
        assert name.startswith(f"alpyka-remote-{proc.pid}-")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert (Path("/dev/shm") / name).exists()  # a killed process cleans nothing up
        from inference.remote._shm import ShmPool

        ShmPool(lambda *a: None, lambda *a: None).close()  # a new client sweeps
        assert not (Path("/dev/shm") / name).exists()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stdout.close()


@needs_triton
def test_a_server_unregisters_the_shared_memory_of_clients_that_are_gone(server):
    """Clients killed (or ended without close()) leave their regions registered and mapped by
    tritonserver; a long-lived server unregisters those of dead processes by itself (the
    module's server sweeps every second)."""
    import tritonclient.grpc as grpcclient

    from inference.serving._access import access_headers

    handle = server
    url = handle.grpc_url.split("://")[-1]
    script = textwrap.dedent(f"""
        import time, numpy as np
        from inference.remote import RemoteModel
        m = RemoteModel({url!r}, "identity", shared_memory="system", timeout=20)
        print(m.infer({{"x": np.ones((4, 3), np.float32)}})["y"].shape, flush=True)
        time.sleep(600)
    """)
    procs = []
    try:
        for _ in range(3):
            proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
            procs.append(proc)
            assert proc.stdout.readline().strip() == "(4, 3)"
        client = grpcclient.InferenceServerClient(url)
        auth = access_headers(handle.token, "grpc")  # the shared-memory endpoints need the token

        def mine() -> list[str]:
            regions = client.get_system_shared_memory_status(as_json=True, headers=auth).get("regions", {})
            return [n for n in regions if any(n.startswith(f"alpyka-remote-{p.pid}-") for p in procs)]

        assert len(mine()) >= 3, mine()
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        deadline = time.monotonic() + 30
        while mine() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert mine() == [], "the server kept the regions of dead clients"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            proc.stdout.close()


def test_the_server_process_polls_for_readiness_every_50_ms(monkeypatch):
    """PyTriton's readiness waits sleep 1 s between questions; in the server process their sleeps
    are capped at 50 ms (each start about 1.4 s sooner), and nothing else of ``time`` changes."""
    utils = pytest.importorskip("pytriton.client.utils", reason=pytriton_reason() or "needs nvidia-pytriton")
    from inference.serving import _child

    slept = []
    clock = SimpleNamespace(sleep=slept.append, time=time.time, monotonic=time.monotonic)  # no real sleep
    monkeypatch.setattr(_child, "time", clock)
    monkeypatch.setattr(utils, "time", clock)  # both undone after the test: this process is no server
    assert _child.prompt_readiness_polls() and _child.prompt_readiness_polls()  # idempotent
    utils.time.sleep(1.0)
    utils.time.sleep(0.01)
    assert slept == [_child.POLL_S, 0.01]
    assert utils.time.time is time.time and utils.time.monotonic is time.monotonic


def test_connect_and_requests_back_off_by_one_policy(monkeypatch):
    """Issue 42 item 6: one backoff object, two caps: connect's rounds at most 0.5 s (0.05 s when
    ``retry_delay`` is 0: it still waits for servers that load), a request's retries at most 2 s
    (no pause when ``retry_delay`` is 0)."""
    from inference.remote import _client, _requests

    connect, request = _requests.CONNECT_BACKOFF, _requests.REQUEST_BACKOFF
    assert [connect.delay(0.05, a) for a in range(6)] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5])
    assert [request.delay(0.05, a) for a in range(8)] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    assert (connect.delay(0.0, 3), request.delay(0.0, 3)) == (0.05, 0.0)
    slept = []
    monkeypatch.setattr(_client.time, "sleep", slept.append)
    model = SimpleNamespace(retry_delay=0.5)
    for attempt in (0, 1, 2, 5):
        _client.RemoteModel._backoff(model, attempt)
    model.retry_delay = 0.0
    _client.RemoteModel._backoff(model, 3)
    assert slept == [0.5, 1.0, 2.0, 2.0]
