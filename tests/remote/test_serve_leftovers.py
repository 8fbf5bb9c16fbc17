"""What a served Triton leaves on disk: the model folders Triton makes for its Python-backend stubs
(``/tmp/folderXXXXXX``) go however Triton ends, and a sweep removes only what is provably ours."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
from pathlib import Path

import pytest

import portable as pk
from inference.serving import _leftovers

from . import pipeline_support as S
from .triton_support import pytriton_reason

torch = pytest.importorskip("torch")
needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


def group_process(pgid: int, suffix: bytes) -> int:
    """The pid of the process of group ``pgid`` whose program name ends with ``suffix``."""
    for pid in _leftovers.group_members(pgid) or []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[0].endswith(suffix):
                    return pid
        except OSError:
            continue
    raise AssertionError(f"no {suffix!r} in process group {pgid}")


@needs_triton
def test_a_killed_tritonserver_leaves_no_stub_folder(tmp_path):
    from inference.serving import serve

    torch.jit.script(Identity()).save(str(tmp_path / "identity.pt"))
    handle = serve(
        {"identity": {"path": str(tmp_path / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}},
        max_batch_size=8,
    )
    try:
        folders = _leftovers.stub_folders(handle.pid)
        assert folders and all(Path(f).is_dir() for f in folders)
        os.kill(group_process(handle.pid, b"tritonserver"), signal.SIGKILL)
        handle.process.wait(60)  # the server process sees Triton gone and ends
        assert handle.process.returncode == 3, handle.log_tail()
    finally:
        handle.stop()
    assert [f for f in folders if os.path.exists(f)] == []


@needs_triton
@pytest.mark.slow  # about 40 s: the stop waits for Triton's unload of the running request to time out
def test_a_pipeline_server_whose_requests_failed_stops_without_leftovers(monkeypatch):
    """Requests that failed: one on the server (an exception), one that timed out on the client
    and still runs there when the server is stopped (Triton's unload times out, and Triton ends
    without removing the folder)."""
    from inference.serving import serve

    monkeypatch.setenv("ALPYKA_TEST_SLOW_S", "10")  # the server inherits it (pipeline `slow`)
    handle = serve({"broken": {"pipeline": S.broken}, "slow": {"pipeline": S.slow}}, device="cpu_serial")
    try:
        folders = _leftovers.stub_folders(handle.pid)
        assert len(folders) == 2
        q = pk.Queue(pk.device("cpu_serial"))
        with S.broken.remote(handle.grpc_url, timeout=30, retries=0) as remote:
            remote(q, S.make_tracks(8, q), pk.PortableCollection(S.Scored, 8, q))
            with pytest.raises(Exception, match="broken pipeline refuses 8 rows"):
                q.wait()
        with S.slow.remote(handle.grpc_url, timeout=1, retries=0) as remote:
            remote(q, S.make_tracks(8, q), pk.PortableCollection(S.Scored, 8, q))
            with pytest.raises(Exception, match="timed out"):
                q.wait()
    finally:
        handle.stop()
    assert [f for f in folders if os.path.exists(f)] == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _triton_like_folder() -> Path:
    """A new ``/tmp/folderXXXXXX`` (the name pattern of Triton's stub folders)."""
    while True:
        path = _leftovers.TRITON_TMP / ("folder" + "".join(secrets.choice(string.ascii_letters) for _ in range(6)))
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        (path / "1").mkdir()
        (path / "1" / "model.py").write_text("# model code\n")
        return path


def test_the_sweep_removes_the_stub_folders_a_dead_server_recorded(tmp_path):
    """Everything killed at once (the server process and its watchdog too): the next sweep
    removes the folders the dead server recorded, and nothing else of that name pattern."""
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    recorded, unrecorded = _triton_like_folder(), _triton_like_folder()
    outside = tmp_path / "folderAbCdEf"  # recorded, but not where Triton makes them
    outside.mkdir()
    try:
        dead = tmp / f"alpyka-serve-{_dead_pid()}-x1"
        dead.mkdir()
        (dead / _leftovers.SERVER_PID_FILE).write_text(str(_dead_pid()))
        _leftovers.record_triton_folders(dead, [str(recorded), str(outside)])
        live = tmp / f"alpyka-serve-{os.getpid()}-x2"  # its owner is alive: not swept
        live.mkdir()
        _leftovers.record_triton_folders(live, [str(unrecorded)])
        removed = _leftovers.sweep(shm, tmp)
        assert str(recorded) in removed and str(dead) in removed
        assert not recorded.exists() and not dead.exists()
        assert unrecorded.exists() and outside.exists() and live.exists()
    finally:
        for f in (recorded, unrecorded):
            if f.exists():
                shutil.rmtree(f)


def test_a_recorded_folder_is_removed_only_if_it_is_ours(tmp_path):
    target = tmp_path / "keep"
    target.mkdir()
    link = _leftovers.TRITON_TMP / ("folder" + secrets.token_hex(3))
    link.symlink_to(target)
    try:
        assert _leftovers.remove_triton_folders([str(link), "/tmp/../etc", str(tmp_path)]) == []
        assert target.exists() and link.is_symlink()
    finally:
        link.unlink()
