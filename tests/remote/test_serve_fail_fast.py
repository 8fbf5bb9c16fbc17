"""A ``tritonserver`` that exits while ``serve`` starts it ends the start within seconds, not after
PyTriton's 120-s readiness wait: a ServeError with its exit code, its last error, the fix and the
end of its log, and no process or work directory left behind."""

from __future__ import annotations

import glob
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from portable import AlpykaError

from .triton_support import pytriton_reason, settled

torch = pytest.importorskip("torch")

needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

#: seconds within which the failed start must end: a busy machine needs ~10-25 s to start the
#: server process at all; PyTriton alone would wait 120 s for the dead tritonserver
FAIL_FAST_S = 45.0


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


def our_leftovers() -> tuple[set[int], set[str]]:
    """The processes and work directories of servers this process started (their command lines and
    paths name ``alpyka-serve-<this pid>-``)."""
    mark = f"alpyka-serve-{os.getpid()}-"
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if mark in cmdline:
                pids.add(int(entry))
    dirs = {d for d in glob.glob(os.path.join(tempfile.gettempdir(), mark + "*")) if os.path.isdir(d)}
    return pids, dirs


@needs_triton
@pytest.mark.parametrize("holder", ["bound", "listening"])
def test_a_tritonserver_that_exits_at_start_fails_serve_at_once(tmp_path, monkeypatch, holder):
    """``bound``: the server process's next readiness poll finds tritonserver gone; ``listening``:
    its question to the port waits on the holder, which accepts and never answers, until the
    watch of tritonserver ends it."""
    from inference import serving

    model = tmp_path / "identity.pt"
    torch.jit.script(Identity()).save(str(model))
    before = our_leftovers()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))  # tritonserver cannot bind its gRPC port
        if holder == "listening":
            held.listen(8)
        port = held.getsockname()[1]
        # serve's own check would refuse the port at once: as if it were taken after that check
        monkeypatch.setattr(serving, "_port_free", lambda port: True)
        start = time.monotonic()
        with pytest.raises(serving.ServeError) as info:
            serving.serve(str(model), name="identity", inputs=["x:float32:3"], grpc_port=port)
        took = time.monotonic() - start
    message = str(info.value)
    assert isinstance(info.value, AlpykaError)
    first = message.splitlines()[0]
    assert first.startswith("tritonserver exited with code 1 while starting: "), message
    assert f"127.0.0.1:{port}" in first and "already in use" in first, message
    assert "give serve other ports (0 or None picks free ones)" in first, message
    assert "its log ends with:" in message and "failed to start GRPC service" in message.split("its log ends with:")[1]
    assert took < FAIL_FAST_S, f"serve took {took:.1f} s to report the dead tritonserver"
    after = settled(our_leftovers, lambda now: now[0] <= before[0] and now[1] <= before[1], timeout=15.0)
    assert after[0] <= before[0], f"processes left: {sorted(after[0] - before[0])}"
    assert after[1] <= before[1], f"work directories left: {sorted(after[1] - before[1])}"


def test_the_line_names_the_exit_code_the_error_and_the_fix():
    from inference.serving._triton_exit import early_exit_line

    log = (
        "I1206 10:00:00.000 1 server.cc:1] starting\n"
        "/bin/tritonserver: error while loading shared libraries: libdcgm.so.3: cannot open shared object file\n"
    )
    line = early_exit_line(127, log)
    assert line.startswith("tritonserver exited with code 127 while starting: /bin/tritonserver: error while")
    assert "libdcgm.so.3" in line and "LD_LIBRARY_PATH" in line
    assert early_exit_line(1, "nothing said").endswith("; its log (below) says why")


def test_exit_code_reads_a_started_server_only():
    from inference.serving._triton_exit import UNKNOWN, exit_code

    class Process:
        def __init__(self, code):
            self.code = code

        def is_alive(self):
            return self.code is None, self.code

    class Server:
        def __init__(self, code):
            self._tritonserver_running_cmd = type("Running", (), {"process": Process(code)})()

        def is_alive(self):
            return self._tritonserver_running_cmd.process.code is None

    triton = type("Triton", (), {})()
    assert exit_code(triton) is None  # not started
    triton._triton_server = Server(None)
    assert exit_code(triton) is None  # running
    triton._triton_server = Server(1)
    assert exit_code(triton) == 1
    triton._triton_server = Server(None)
    triton._triton_server.is_alive = lambda: False  # ended, PyTriton's process object not updated
    assert exit_code(triton) == UNKNOWN


def test_the_server_process_bounds_its_readiness_questions(monkeypatch):
    """tritonclient's gRPC readiness questions wait for an answer without a limit: in the server
    process they get ``QUESTION_S`` (a port's owner that never answered kept a failed start
    going ~40 s, the ``listening`` case above), a caller's own limit is kept, and a second call
    wraps nothing twice."""
    grpc = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]")
    from inference.serving import _child

    asked = []
    for name in ("is_server_ready", "is_server_live"):  # stand-ins, put back after the test
        monkeypatch.setattr(
            grpc.InferenceServerClient,
            name,
            lambda self, headers=None, client_timeout=None, _n=name: asked.append((_n, client_timeout)) or True,
        )
    assert _child.bounded_readiness_questions() and _child.bounded_readiness_questions()
    cls, client = grpc.InferenceServerClient, object()  # (no client made: the stand-ins ask nothing)
    assert cls.is_server_ready(client) and cls.is_server_live(client, client_timeout=0.5)
    assert asked == [("is_server_ready", _child.QUESTION_S), ("is_server_live", 0.5)]
