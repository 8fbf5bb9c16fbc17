"""How ``alpyka serve`` stops: Ctrl-C or SIGTERM with a request in flight answers it, exits 0 and
leaves no process, port, shared memory or stub folder behind; a second Ctrl-C kills the server at
once (exit 130). The unload the server process does before it signals Triton (``_janitor``), with
a fake Triton. Times are not asserted (docs/remote.md has them), only hang limits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk

from . import pipeline_support as S
from .triton_support import group_pids, pytriton_reason, serve_cli

needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

ROOT = Path(__file__).resolve().parents[2]
#: a hang guard, not a time the tests expect
HANG_S = 120


def _expected(seed: int, n: int = 12) -> dict[str, np.ndarray]:
    q = pk.Queue(pk.device("cpu_serial"))
    out = pk.PortableCollection(S.Scored, n, q)
    S.chain(q, S.make_tracks(n, q, seed), out)
    return out.to_dict(q)


def _port_free(port: int) -> bool:
    """Nothing listens on ``port`` (a server may bind it again: connections of the stopped one
    may linger in TIME_WAIT, which SO_REUSEADDR allows, as Triton sets it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + HANG_S
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the request never started on the server"
        time.sleep(0.02)


def _held_server(tmp_path: Path, hold_s: float):
    """``alpyka serve remote.pipeline_support:held`` whose requests are held ``hold_s`` seconds and
    mark ``tmp_path/started`` when one starts; yields (process, output lines, gRPC url)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
        ALPYKA_TEST_HOLD_S=str(hold_s),
        ALPYKA_TEST_STARTED=str(tmp_path / "started"),
    )
    args = ("remote.pipeline_support:held", "--device", "cpu_serial", "--grpc-port", "0")
    return serve_cli(*args, env=env, cwd=str(tmp_path), check_exit=False)


def _read_until(proc: subprocess.Popen, prefix: str) -> list[str]:
    """The command's output lines up to one that starts with ``prefix`` (asserted to come)."""
    lines = [proc.stdout.readline()]
    while lines[-1] and not lines[-1].startswith(prefix):
        lines.append(proc.stdout.readline())
    assert lines[-1].startswith(prefix), "".join(lines)
    return lines


def _send_late(url: str, q: pk.Queue, out: pk.PortableCollection) -> bool:
    """A request sent while the server stops: True if answered, False if refused with an error
    (a clean one: not a timeout); never left hanging."""
    try:
        with S.held.remote(url, timeout=HANG_S, retries=0) as remote:
            remote(q, S.make_tracks(12, q, 1), out)
            q.wait()
    except Exception as exc:  # whichever error a stopping server gives
        assert "timed out" not in str(exc), exc
        return False
    return True


def _server_pid(lines: list[str]) -> int:
    return int(lines[-1].split("(pid ")[1].split(")")[0])


def _assert_nothing_left(server_pid: int, port: int, folders: list[str], killed: bool = False) -> None:
    """No process of the server's group (killed: none alive; the server process killed, init
    reaps the rest), nothing listening on its port, no shared memory or stub folder of it."""
    from inference.serving._leftovers import group_members

    left = group_members(server_pid) if killed else group_pids(server_pid)
    assert not left, f"processes of the server outlived it: {left}"
    assert _port_free(port), f"port {port} is still taken"
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"pytrtion{server_pid}-")]
    assert folders and not [f for f in folders if os.path.exists(f)], folders


@needs_triton
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_answers_the_request_in_flight_and_leaves_nothing(tmp_path, sig):
    """The request in flight when the signal comes gets its answer (the server unloads its models
    before Triton exits, and Triton unloads a model only once its requests are answered); a
    request sent during the stop is answered or refused with an error, never left hanging."""
    from inference.serving._leftovers import stub_folders

    with _held_server(tmp_path, hold_s=2.0) as (proc, lines, url):
        server_pid, port = _server_pid(lines), int(url.rsplit(":", 1)[1])
        folders = stub_folders(server_pid)
        q = pk.Queue(pk.device("cpu_serial"))
        outs = [pk.PortableCollection(S.Scored, 12, q) for _ in range(2)]
        with S.held.remote(url, timeout=HANG_S, retries=0) as remote:
            remote(q, S.make_tracks(12, q, 0), outs[0])
            _wait_for(tmp_path / "started", proc)
            proc.send_signal(sig)
            q.wait()  # the one in flight: answered
            got = outs[0].to_dict(q)
            late = pk.Queue(pk.device("cpu_serial"))
            late_answered = _send_late(url, late, outs[1])
        proc.wait(HANG_S)
        text = "".join(lines) + proc.stdout.read()
    want = _expected(0)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"column {k}")
    if late_answered:
        want = _expected(1)
        for k in want:
            np.testing.assert_array_equal(outs[1].to_dict(late)[k], want[k], err_msg=f"late request, column {k}")
    # Ctrl-C: killed by SIGINT once stopped (a shell loop running it stops); SIGTERM: exit 0
    assert proc.returncode == (-signal.SIGINT if sig == signal.SIGINT else 0), text
    assert "alpyka serve: stopping the server" in text and text.rstrip().endswith("alpyka serve: stopped"), text
    assert "not unloaded" not in text and "Traceback" not in text, text
    _assert_nothing_left(server_pid, port, folders)


@needs_triton
def test_a_second_ctrl_c_kills_the_server_at_once(tmp_path):
    """A request that would run for minutes holds the graceful stop; the second Ctrl-C kills the
    server: the command dies by SIGINT, the client gets an error rather than waiting, nothing is left."""
    from inference.serving._leftovers import stub_folders

    with _held_server(tmp_path, hold_s=600.0) as (proc, lines, url):
        server_pid, port = _server_pid(lines), int(url.rsplit(":", 1)[1])
        folders = stub_folders(server_pid)
        q = pk.Queue(pk.device("cpu_serial"))
        out = pk.PortableCollection(S.Scored, 12, q)
        with S.held.remote(url, timeout=HANG_S, retries=0) as remote:
            remote(q, S.make_tracks(12, q, 0), out)
            _wait_for(tmp_path / "started", proc)
            proc.send_signal(signal.SIGINT)
            lines += _read_until(proc, "alpyka serve: stopping the server")
            proc.send_signal(signal.SIGINT)
            proc.wait(HANG_S)
            with pytest.raises(Exception) as info:  # whichever error the dead server gives
                q.wait()
            assert "timed out" not in str(info.value), info.value
        text = "".join(lines) + proc.stdout.read()
    assert proc.returncode == -signal.SIGINT, text  # it exited 130: a shell loop went on
    assert "alpyka serve: killing the server (a second Ctrl-C" in text, text
    assert text.rstrip().endswith("alpyka serve: stopped") and "Traceback" not in text, text
    _assert_nothing_left(server_pid, port, folders, killed=True)


class _Janitor:
    """The janitor's unload calls, or a Triton that cannot be asked."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.unloaded = fail, []

    def unload_model(self, name: str, **_: object) -> None:
        if self.fail:
            raise ConnectionError("connection refused")
        self.unloaded.append(name)


def test_unload_models_starts_every_unload_then_waits_for_the_stubs(monkeypatch):
    from inference.serving import _stopping

    left = [[11, 12], [12], []]  # the stubs still there at each look
    monkeypatch.setattr(_stopping, "stub_pids", lambda pgid: left.pop(0))
    janitor = _Janitor()
    assert _stopping.unload_models(janitor, ["a", "b"], 1, timeout=HANG_S)
    assert janitor.unloaded == ["a", "b"] and left == []


def test_an_unload_with_no_stub_to_watch_is_left_to_triton(monkeypatch):
    """No stub of the server's process group (a model not on the Python backend, a stub of another
    name): the unload's end cannot be seen, so none is started and Triton's own stop waits for
    the requests (it counted as unloaded, and tritonserver was killed with them in flight)."""
    from inference.serving import _stopping

    monkeypatch.setattr(_stopping, "stub_pids", lambda pgid: [])
    janitor = _Janitor()
    assert _stopping.unload_models(janitor, ["a"], 1, timeout=HANG_S) is None
    assert janitor.unloaded == []


def test_a_stop_whose_unload_fails_or_runs_out_of_time(monkeypatch, capsys):
    """Triton that cannot be asked: its own stop waits (tritonserver is not killed); a stub still
    there at the timeout (a request that does not end): it is killed, as Triton's own stop
    gave up on such a request after the same time."""
    from inference.serving import _child, _stopping

    monkeypatch.setattr(_stopping, "stub_pids", lambda pgid: [11])
    assert _stopping.unload_models(_Janitor(fail=True), ["a"], 1, timeout=HANG_S) is None
    assert _stopping.unload_models(_Janitor(), ["a"], 1, timeout=0.1) is False
    monkeypatch.setattr(_child, "connected_clients", lambda ports, pid: 1)
    monkeypatch.setattr(_child, "unload_models", _stopping.unload_models)
    killed: list[object] = []
    monkeypatch.setattr(_child, "kill_on_stop", lambda triton: killed.append(triton) or True)
    assert not _child._end_quickly(object(), _Janitor(fail=True), ["a"], [1], timeout=0.1)
    assert "cannot be asked to unload the models; its own stop waits" in capsys.readouterr().out and not killed
    assert _child._end_quickly(object(), _Janitor(), ["a"], [1], timeout=0.1) and len(killed) == 1
    assert "stopping: requests still running after 0.1 s fail; ending tritonserver at once" in capsys.readouterr().out
    assert not _stopping.kill_on_stop(object())  # another PyTriton: its stop is left as it is


def test_connected_clients_counts_other_processes_only():
    """A client in another process counts; this process's own (the janitor's channel) does not,
    nor one that closed its socket."""
    from inference.serving._stopping import connected_clients

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert connected_clients([port], os.getpid()) == 0
        with socket.create_connection(("127.0.0.1", port)):
            assert connected_clients([port], os.getpid()) == 0
        code = f"import socket, sys; s = socket.create_connection(('127.0.0.1', {port})); print(1, flush=True); input()"
        other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert other.stdout.readline().strip() == "1"
            assert connected_clients([port], os.getpid()) == 1
        finally:
            other.communicate("", timeout=HANG_S)


def test_pytritons_request_loops_look_at_their_stop_flag_every_tenth_of_a_second(monkeypatch):
    """A wait for the next message (a shielded future) is cut to STOP_FLAG_POLL_S; a read of a
    handshake (a coroutine) keeps its timeout. Installing twice changes nothing."""
    import asyncio

    communication = pytest.importorskip("pytriton.proxy.communication")
    from inference.serving import _stopping

    monkeypatch.setattr(communication, "asyncio", asyncio)
    asked: list[float | None] = []
    monkeypatch.setattr(asyncio, "wait_for", lambda aw, timeout: asked.append(timeout))
    assert _stopping.prompt_stop_polls() and _stopping.prompt_stop_polls()
    loop = asyncio.new_event_loop()
    try:
        communication.asyncio.wait_for(loop.create_future(), 1.0)
        handshake = asyncio.sleep(0)
        communication.asyncio.wait_for(handshake, timeout=1.0)
        handshake.close()
    finally:
        loop.close()
    assert asked == [_stopping.STOP_FLAG_POLL_S, 1.0]
    assert communication.asyncio.TimeoutError is asyncio.TimeoutError  # the rest is asyncio's
