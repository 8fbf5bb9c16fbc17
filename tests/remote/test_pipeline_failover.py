"""Two real Triton servers on 127.0.0.1 (one from Python, one from the ``alpyka serve`` command
line): least-outstanding balancing for pipelines and models, a server killed during a run (its
requests finish on the other one, each event written once), then the last one killed (a clear
error, no outputs written)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from inference import RemotePipeline
from inference.remote import RemoteModel, ServerUnavailable

from . import pipeline_support as S
from .triton_support import pytriton_reason, serve_cli

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

SLOW_S = 0.3
ROOT = Path(__file__).resolve().parents[2]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


def _children(pid: int) -> list[int]:
    kids = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                stat = Path(f"/proc/{e}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(e))
    return kids


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from inference.serving import free_port, serve

    d = tmp_path_factory.mktemp("failover")
    torch.jit.script(Identity()).save(str(d / "identity.pt"))
    os.environ["ALPYKA_TEST_SLOW_S"] = str(SLOW_S)
    a = serve(
        {
            "slow": S.slow,
            "identity": {"path": str(d / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]},
        },
        device="cpu_serial",
    )
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    try:
        with serve_cli(
            "remote.pipeline_support:slow",
            str(d / "identity.pt"),
            "--input",
            "x:float32:3",
            "--output",
            "y:float32:3",
            "--device",
            "cpu_threads",
            "--grpc-port",
            str(port),
            "--http-port",
            "0",
            env=env,
            cwd=str(d),
            check_exit=False,
        ) as (cli, lines, _url):
            assert any("pipeline slow (remote.pipeline_support:slow)" in ln for ln in lines), lines
            yield a, f"127.0.0.1:{port}", cli  # the tests kill this one: no exit status to check
    finally:
        os.environ.pop("ALPYKA_TEST_SLOW_S", None)
        a.stop()


def expected(seed: int, n: int = 12) -> dict[str, np.ndarray]:
    q = pk.Queue(pk.device("cpu_serial"))
    out = pk.PortableCollection(S.Scored, n, q)
    S.chain(q, S.make_tracks(n, q, seed), out)
    return out.to_dict(q)


def test_model_requests_balance_over_two_servers(servers):
    a, b_url, _ = servers
    x = np.ones((4, 3), np.float32)
    with RemoteModel([a.grpc_url, b_url], "identity", timeout=30) as model:
        futs = [model.infer_async({"x": x * i}) for i in range(16)]
        for i, f in enumerate(futs):
            np.testing.assert_array_equal(f.result(30)["y"], x * i)
        per = model.server_counters()
    assert per[a.grpc_url].requests > 0 and per[b_url].requests > 0, per
    assert per[a.grpc_url].requests + per[b_url].requests == 16


def test_server_killed_during_a_run(servers):
    """Twelve events in flight over two servers; one server is SIGKILLed: every event completes
    on the other with the right columns, and is counted (written) once."""
    a, b_url, _ = servers
    n_events = 12
    q = pk.Queue(pk.device("cpu_serial"))
    events = [(S.make_tracks(12, q, seed), pk.PortableCollection(S.Scored, 12, q)) for seed in range(n_events)]
    # a timeout far above the run's time (10-17 s at loads of 10-19 on 2 cores): a request left
    # waiting on the killed server would take all of it
    remote = RemotePipeline([a.grpc_url, b_url], "slow", declaration=S.slow, mode="async", timeout=90, retries=1)
    try:
        t0 = time.monotonic()
        futs = [remote.call_async(q, t, o) for t, o in events]
        time.sleep(2 * SLOW_S)
        os.kill(a.pid, signal.SIGKILL)  # the server process; its watchdog kills Triton at once
        for f in futs:
            f.wait(120)
        wall = time.monotonic() - t0
        stats, per = remote.statistics(), remote.server_counters()
    finally:
        remote.close()
    for seed, (_, out) in enumerate(events):
        got, want = out.to_dict(q), expected(seed)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"event {seed} column {k}")
    assert stats.client.events == n_events
    assert per[a.grpc_url].requests + per[b_url].requests == n_events, per  # none lost, none twice
    assert per[a.grpc_url].failures > 0 and stats.client.failovers > 0
    # not the 90 s timeout of the killed server's requests: half of it (it was 28.6 s against a
    # 30 s timeout, with 16.5 s measured at a load of 19)
    assert wall < 45, f"the run took {wall:.1f} s: a request waited for the killed server's timeout"


def test_last_server_killed_is_a_clear_error(servers):
    _, b_url, cli = servers
    q = pk.Queue(pk.device("cpu_serial"))
    tracks, out = S.make_tracks(12, q, 1), pk.PortableCollection(S.Scored, 12, q)
    pk.memset(q, out, 0x22)
    remote = S.slow.remote(b_url, timeout=30, retries=1)
    try:
        remote(q, tracks, out)
        time.sleep(SLOW_S / 3)
        for pid in _children(cli.pid):  # the server process under the command line
            os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(Exception, match=r"pipeline 'slow': .*unreachable") as info:
            q.wait()
        assert time.monotonic() - t0 < 25  # not the 30 s timeout (headroom: a busy machine)
        assert isinstance(info.value.__cause__, ServerUnavailable)
    finally:
        remote.close()
    got = out.to_dict(q)
    assert all(np.all(np.ascontiguousarray(v).view(np.uint8) == 0x22) for v in got.values())
