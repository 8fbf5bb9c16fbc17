"""What no request and no caller may do to a server ``serve`` started: a request that declares a
huge tensor, a caller killed while the server starts; and what ``alpyka serve`` says when its
server ends or its model cannot be read (issue 38 items 4, 7, 9)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk

from .triton_support import group_pids, pytriton_reason, server_child

torch = pytest.importorskip("torch")

needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

#: ~100 bytes declaring 2**40 x 3 float32 (12 TiB) with three values: Triton's JSON parser
#: allocates the declared size before it counts the values
HUGE = json.dumps({"inputs": [{"name": "x", "shape": [2**40, 3], "datatype": "FP32", "data": [1, 2, 3]}]})


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes ``pids`` listen on (from /proc: their sockets' inodes)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def post(port: int, body: str, content_type: str) -> str:
    """POST ``body`` as an inference request; what came back (a status, or the error)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("POST", "/v2/models/identity/infer", body, {"Content-Type": content_type})
        resp = conn.getresponse()
        return f"{resp.status} {resp.read()[:200]!r}"
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def identity_answers(url: str) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        inp = grpcclient.InferInput("x", [2, 3], "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("identity", [inp], client_timeout=30)
        np.testing.assert_array_equal(out.as_numpy("y"), x)
    finally:
        client.close()


@needs_triton
def test_no_request_to_any_port_of_a_default_server_takes_it_down(tmp_path):
    """A default server exposes no port that parses a JSON tensor: the request that made Triton
    allocate 12 TiB and die is sent to every port its processes listen on (as a web page's simple
    request, text/plain, and as JSON), and by gRPC declaring that and overflowing shapes with the
    values as typed contents and as raw bytes; the server still answers."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    from inference.serving import ServeError, serve

    torch.jit.script(Identity()).save(str(tmp_path / "identity.pt"))
    with serve(
        {"identity": {"path": str(tmp_path / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}},
        max_batch_size=8,
    ) as server:
        ports = listening_ports(group_pids(server.pid))
        assert server.grpc_port in ports, ports
        answers = {}
        for port in sorted(ports):
            for content_type in ("text/plain", "application/json"):
                answers[port, content_type] = post(port, HUGE, content_type)
                assert server.is_running(), f"port {port} ({content_type}): {answers[port, content_type]}"
        channel = grpc.insecure_channel(server.grpc_url)
        try:
            for shape in ([2**40, 3], [2**62, 3], [2**32 + 1, 3]):
                for raw in (False, True):  # the values as typed contents, or as raw bytes
                    request = service_pb2.ModelInferRequest(model_name="identity")
                    tensor = request.inputs.add(name="x", datatype="FP32", shape=shape)
                    if raw:
                        request.raw_input_contents.append(np.ones(3, np.float32).tobytes())
                    else:
                        tensor.contents.fp32_contents.extend([1.0, 2.0, 3.0])
                    try:  # refused, or (Triton reads the batch size modulo 2**32) answered as 0 or 1 rows
                        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
                    except grpc.RpcError as refused:
                        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused
                    assert server.is_running(), (shape, raw)
        finally:
            channel.close()
        time.sleep(1.0)  # a crash takes a moment to end Triton
        assert server.is_running(), (answers, server.log_tail())
        identity_answers(server.grpc_url)
        assert server.http_port is None
        with pytest.raises(ServeError, match="serves no HTTP: start it with http_port=0"):
            _ = server.http_url


#: a pipeline whose warm-up on zeros (in the server process only: the caller only imports it)
#: never ends: a startup that hangs in a model load
HANGING_PIPELINE = textwrap.dedent("""
    import time

    import numpy as np

    import soa
    from inference import pipeline


    class Rows(soa.Layout):
        v = soa.column(np.float32)


    @pipeline(inputs=Rows, outputs=Rows)
    def stuck(q, rows, out):
        time.sleep(600)
""")


def group_member(leader: int, suffix: bytes) -> int | None:
    """A process of group ``leader`` whose program name ends with ``suffix``, or None."""
    for pid in group_pids(leader):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[0].endswith(suffix):
                    return pid
        except OSError:
            pass
    return None


@needs_triton
@pytest.mark.parametrize("hang", ["slow_model_load", "stuck_triton"])
def test_a_caller_killed_while_its_server_starts_leaves_nothing_running(tmp_path, hang):
    """The caller of ``alpyka serve`` is killed (SIGKILL) while its server is still starting: in a
    pipeline's load that never ends, or with Triton started but stuck (stopped by SIGSTOP before it
    is ready). The server process, Triton and their work directory are gone within seconds (they
    lived on for 100 s+, until the startup timed out, or forever)."""
    if hang == "slow_model_load":
        (tmp_path / "hang.py").write_text(HANGING_PIPELINE)
        what = [f"{tmp_path / 'hang.py'}:stuck"]
    else:
        torch.jit.script(Identity()).save(str(tmp_path / "identity.pt"))
        what = [str(tmp_path / "identity.pt"), "--input", "x:float32:3"]
    out = open(tmp_path / "caller.out", "w+")
    caller = subprocess.Popen(
        [sys.executable, "-m", "inference.serving", *what, "--grpc-port", "0"],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    child = None
    try:
        deadline = time.monotonic() + 120  # hang guard: a loaded machine starts Python slowly
        while child is None and caller.poll() is None and time.monotonic() < deadline:
            child = server_child(caller.pid)
            time.sleep(0.02)
        assert child is not None, Path(out.name).read_text()
        workdir = Path(Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[-2].decode()).parent
        if hang == "slow_model_load":
            time.sleep(4.0)  # well into its imports or its pipeline's load
        else:
            triton = None
            while triton is None and time.monotonic() < deadline:
                triton = group_member(child, b"tritonserver")
                time.sleep(0.01)
            assert triton is not None, Path(out.name).read_text()
            os.kill(triton, signal.SIGSTOP)  # Triton stuck: it never becomes ready
        assert "serving on" not in Path(out.name).read_text()  # still starting
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait(30)
        t0 = time.monotonic()
        while (group_pids(child) or workdir.exists()) and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in group_pids(child)}
        assert not left, f"alive {time.monotonic() - t0:.1f} s after the caller was killed: {left}"
        assert not workdir.exists()
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"pytrtion{child}-")]
        print(f"{hang}: gone {time.monotonic() - t0:.2f} s after the caller was killed")
    finally:
        if caller.poll() is None:
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait(30)
        if child is not None:
            for pid in group_pids(child):  # what a failed check left: the server's group, by pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        out.close()


def _damaged_program(src: Path, dst: Path) -> Path:
    """``src``'s torch.export archive with its graph's nodes replaced by a string: valid JSON,
    not a program (torch logs its deserializer's traceback, then raises "check the warnings")."""
    import zipfile

    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
        for name in zi.namelist():
            data = zi.read(name)
            if name.endswith("models/model.json"):
                program = json.loads(data)
                program["graph_module"]["graph"]["nodes"] = "not nodes"
                data = json.dumps(program).encode()
            zo.writestr(name, data)
    return dst


@pytest.mark.parametrize("declared", [False, True], ids=["inputs_read_from_the_file", "inputs_declared"])
def test_alpyka_serve_of_a_damaged_program_prints_one_line(tmp_path, declared):
    """A ``.pt2`` whose program JSON is damaged: read for its inputs in ``alpyka serve`` itself, or
    loaded only in the server process (inputs declared). One line naming the file, exit status 2,
    no traceback (torch logged the deserializer's whole traceback, and a RuntimeError's followed)."""
    if declared and pytriton_reason() is not None:
        pytest.skip(str(pytriton_reason()))
    good = tmp_path / "good.pt2"
    torch.export.save(
        torch.export.export(
            Identity(), (torch.zeros(4, 3),), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1)}}
        ),
        str(good),
    )
    bad = _damaged_program(good, tmp_path / "bad.pt2")
    args = [str(bad), "--grpc-port", "0"] + (["--input", "x:float32:3", "--output", "y:float32:3"] if declared else [])
    env = {k: v for k, v in os.environ.items() if k != "ALPYKA_TRACEBACK"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-m", "inference.serving", *args], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("alpyka serve: error: ") and str(bad) in lines[0], lines[0]
    assert "SerializeError" in lines[0] or "deserializ" in lines[0], lines[0]


def _start_cli(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """``alpyka serve identity.pt ARGS`` (``python -m inference.serving``), its output to a file;
    returns the process and its ``serving on`` line (stopped by the caller, by its pid)."""
    torch.jit.script(Identity()).save(str(tmp_path / "identity.pt"))
    out = tmp_path / "cli.out"
    with open(out, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inference.serving", str(tmp_path / "identity.pt"), "--name", "identity"]
            + ["--input", "x:float32:3", "--output", "y:float32:3", *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    deadline = time.monotonic() + 120  # hang guard
    while proc.poll() is None and time.monotonic() < deadline:
        lines = [ln for ln in out.read_text().splitlines() if ln.startswith("serving on")]
        if lines:
            return proc, lines[0]
        time.sleep(0.1)
    _stop(proc)
    raise AssertionError(out.read_text())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)


@needs_triton
def test_alpyka_serve_grpc_port_0_takes_only_free_ports_and_names_them(tmp_path):
    """``--grpc-port 0`` is all it takes for free ports: the server's processes listen on exactly
    the ports the ``serving on`` line names (HTTP took port 8000 unless ``--http-port 0`` too)."""
    proc, line = _start_cli(tmp_path, "--grpc-port", "0")
    try:
        ports = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", line)}
        assert "no HTTP" in line and "metrics 127.0.0.1:" in line, line
        assert len(ports) == 2 and 8000 not in ports and 8001 not in ports, line
        pid = int(line.split("(pid ")[1].split(")")[0])
        assert listening_ports(group_pids(pid)) == ports, line
        identity_answers(line.split("gRPC ")[1].split(",")[0])
    finally:
        _stop(proc)
    assert proc.returncode == 0


@needs_triton
def test_alpyka_serve_keeps_the_log_of_a_server_that_ended(tmp_path):
    """Triton killed under ``alpyka serve``: the error names where the server's log was kept
    (its work directory goes with the server) and shows its end (it said "see its log" of a log
    it had just removed)."""
    proc, line = _start_cli(tmp_path, "--grpc-port", "0")
    kept = None
    try:
        pid = int(line.split("(pid ")[1].split(")")[0])
        triton = group_member(pid, b"tritonserver")
        assert triton is not None
        os.kill(triton, signal.SIGKILL)
        proc.wait(120)  # hang guard
        text = (tmp_path / "cli.out").read_text()
        assert proc.returncode == 1, text
        assert f"the server process (pid {pid}) ended with exit code 3" in text, text
        kept = Path(text.split("(kept as ")[1].split(")")[0])
        log = kept.read_text()
        assert "Triton stopped unexpectedly" in log and "Triton stopped unexpectedly" in text.split("ends with:")[1]
        assert kept.stat().st_mode & 0o077 == 0  # the log is this user's only
    finally:
        _stop(proc)
        if kept is not None:
            kept.unlink(missing_ok=True)


@needs_triton
def test_alpyka_serve_says_at_once_that_ctrl_c_stops_it(tmp_path):
    """Ctrl-C: Triton takes seconds to unload its models; ``alpyka serve`` said nothing until it
    exited. It says so at once, then that it stopped, with no process of the server left."""
    proc, line = _start_cli(tmp_path, "--grpc-port", "0")
    pid = int(line.split("(pid ")[1].split(")")[0])
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)  # hang guard
        text = (tmp_path / "cli.out").read_text()
        # said before the server's processes were stopped (which takes seconds), not only at the end
        assert "alpyka serve: stopping the server" in text, text
        assert text.index("alpyka serve: stopping the server") < text.index("alpyka serve: stopped"), text
    finally:
        _stop(proc)
    text = (tmp_path / "cli.out").read_text()
    # killed by SIGINT once stopped, as Python ends on a Ctrl-C (exit 0 let a shell loop go on)
    assert proc.returncode == -signal.SIGINT and text.rstrip().endswith("alpyka serve: stopped"), text
    assert not group_pids(pid) and "Traceback" not in text, text


@pytest.mark.parametrize(
    ("port", "error", "says"),
    [
        (-5, pk.ArgumentError, "is 0 to 65535"),
        (65536, pk.ArgumentError, "is 0 to 65535"),
        (80.0, pk.ArgumentTypeError, "is an int, 0 to 65535"),
        ("8001", pk.ArgumentTypeError, "is an int, 0 to 65535"),
        (True, pk.ArgumentTypeError, "is an int, 0 to 65535"),
    ],
)
def test_a_port_out_of_range_is_refused_before_anything_starts(tmp_path, port, error, says):
    """``--grpc-port -5`` was an OverflowError traceback from the port probe; a port of another
    type is a type error, as ``pk.device``'s index of another type is"""
    from inference import serve

    with pytest.raises(error, match=rf"the gRPC port {says} \(0 picks a free one\), got"):
        serve(str(tmp_path / "never-read.pt2"), grpc_port=port)
    with pytest.raises(error, match=rf"the metrics port {says}"):
        serve(str(tmp_path / "never-read.pt2"), grpc_port=0, metrics_port=port)


def _port_in_time_wait() -> int:
    """A port of 127.0.0.1 that nothing listens on, whose last connection lingers in TIME_WAIT:
    the side that closed first (here the listener's) keeps it for ~60 s, as a stopped server's
    ports are kept."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server's side closes first: its end of the connection waits
            assert client.recv(1) == b""  # the client saw the close; then it closes too
    with socket.socket() as plain, pytest.raises(OSError):  # the state the test is about
        plain.bind(("127.0.0.1", port))
    return port


def test_a_port_freed_a_moment_ago_is_free_to_serve():
    """A port in TIME_WAIT was refused ("in use") for a minute after a server on it stopped,
    although Triton, which binds with SO_REUSEADDR, could take it."""
    from inference import serving

    port = _port_in_time_wait()
    assert serving._port_free(port)
    with socket.socket() as triton_like:  # what tritonserver does with it
        triton_like.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        triton_like.bind(("127.0.0.1", port))
        triton_like.listen(1)


@pytest.mark.parametrize("holder", ["listening", "bound"])
def test_a_port_in_use_is_refused_before_anything_starts(tmp_path, holder):
    """A port another socket listens on (another server) or is bound to without SO_REUSEADDR
    (where tritonserver's own bind would fail) is refused at once, naming the port and the fix."""
    from inference.serving import ServeError, serve

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        if holder == "listening":
            held.listen(1)
        port = held.getsockname()[1]
        for kwargs, what in (({"grpc_port": port}, "gRPC"), ({"grpc_port": 0, "http_port": port}, "HTTP")):
            with pytest.raises(ServeError, match=rf"^the {what} port {port} is in use on 127.0.0.1; pick another"):
                serve(str(tmp_path / "never-read.pt2"), **kwargs)


@needs_triton
def test_a_server_starts_on_a_port_freed_a_moment_ago(tmp_path):
    """End to end: serve takes a port in TIME_WAIT, and Triton listens on it."""
    from inference.serving import serve

    torch.jit.script(Identity()).save(str(tmp_path / "identity.pt"))
    port = _port_in_time_wait()
    spec = {"identity": {"path": str(tmp_path / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}}
    with serve(spec, grpc_port=port) as server:
        assert server.grpc_port == port and port in listening_ports(group_pids(server.pid))


def test_the_cli_says_a_port_out_of_range_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "inference.serving", str(tmp_path / "m.pt2"), "--grpc-port", "70000"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "alpyka serve: error: the gRPC port is 0 to 65535 (0 picks a free one), got 70000"


@pytest.mark.parametrize(
    ("settings", "error", "says"),
    [
        ({"max_batch_size": -3}, pk.ArgumentError, r"max_batch_size \(--max-batch-size\) is 0 .* got -3"),
        ({"max_batch_size": 2.5}, pk.ArgumentTypeError, r"max_batch_size \(--max-batch-size\) is an int"),
        ({"instances": 0}, pk.ArgumentError, r"instances \(--instances\) is 1 or more, got 0"),
        ({"max_queue_delay_us": -7}, pk.ArgumentError, r"max_queue_delay_us \(--max-queue-delay-us\) is 0 or more"),
        ({"preferred_batch_sizes": [-2]}, pk.ArgumentError, r"preferred batch size .* is 1 or more"),
        ({"max_batch_size": 8, "preferred_batch_sizes": [16]}, pk.ArgumentError, r"at most max_batch_size \(8"),
        ({"max_batch_size": 0, "preferred_batch_sizes": [4]}, pk.ArgumentError, r"at most max_batch_size \(0"),
    ],
)
def test_batching_settings_out_of_range_are_refused_before_anything_starts(tmp_path, settings, error, says):
    """``alpyka serve m.pt2 --max-batch-size -3`` served the model with a batch size of -3 and
    ``--instances 0`` with one instance, saying nothing; a negative preferred size or queue delay
    failed the start with Triton's "failed to poll from model repository"."""
    from inference import serve

    with pytest.raises(error, match=says):
        serve(str(tmp_path / "never-read.pt2"), grpc_port=0, **settings)


@pytest.mark.parametrize(
    ("own", "keywords", "error", "says"),
    [
        (
            {"max_batch_size": -3},
            {},
            pk.ArgumentError,
            r"model 'm''s max_batch_size \(its 'max_batch_size' in serve's models mapping\) is 0 "
            r"\(a model that does not batch\) or more, got -3",
        ),
        ({"max_batch_size": "8"}, {}, pk.ArgumentTypeError, r"model 'm''s max_batch_size .* is an int"),
        ({"instances": 0}, {}, pk.ArgumentError, r"model 'm''s instances .* is 1 or more, got 0"),
        (
            {"max_queue_delay_us": -7},
            {},
            pk.ArgumentError,
            r"model 'm''s max_queue_delay_us .* is 0 or more microseconds, got -7",
        ),
        ({"preferred_batch_sizes": [0]}, {}, pk.ArgumentError, r"model 'm''s a preferred batch size .* is 1 or more"),
        ({"preferred_batch_sizes": 16}, {}, pk.ArgumentTypeError, r"preferred_batch_sizes .* is a list of ints"),
        (
            {"preferred_batch_sizes": [16], "max_batch_size": 8},
            {},
            pk.ArgumentError,
            r"at most model 'm''s max_batch_size \(8: give a larger 'max_batch_size' in its settings",
        ),
        (
            {"preferred_batch_sizes": [16]},
            {"max_batch_size": 8},
            pk.ArgumentError,
            r"at most max_batch_size \(8: give a larger --max-batch-size",
        ),
        (
            {"max_batch_size": 4},
            {"preferred_batch_sizes": [16]},
            pk.ArgumentError,
            r"a preferred batch size \(--preferred-batch-size\) is at most model 'm''s max_batch_size \(4",
        ),
        (
            {"dynamic_batching": "no"},
            {},
            pk.ArgumentTypeError,
            r"model 'm''s dynamic_batching .* is True or False, got 'no'",
        ),
        (
            {"max_batch": 8},
            {},
            pk.ArgumentError,
            r"model 'm': unknown setting\(s\) 'max_batch' .* a model's settings are 'path', 'inputs'",
        ),
    ],
)
def test_a_models_own_batching_settings_out_of_range_are_refused_before_anything_starts(
    tmp_path, own, keywords, error, says
):
    """serve's mapping ``{name: {"path": ..., "max_batch_size": -3}}`` was checked at the top level
    only: a model's own bad settings reached Triton (a batch size of -3 served; an unknown key was
    a bare TypeError of the dataclass). Refused at once, naming the model, the setting and where."""
    from inference import serve

    with pytest.raises(error, match=says):
        serve({"m": {"path": str(tmp_path / "never-read.pt2"), **own}}, grpc_port=0, **keywords)


@pytest.mark.parametrize(
    "own",
    [{"max_batch_size": 0}, {"max_batch_size": 8, "dynamic_batching": False}, {"dynamic_batching": np.bool_(False)}],
    ids=["does_not_batch", "no_dynamic_batching", "numpy_bool"],
)
def test_serves_batching_keywords_leave_a_model_that_does_not_batch_alone(own):
    """serve's own ``preferred_batch_sizes`` apply to the models that batch: a model beside them
    that does not (its max_batch_size 0, or dynamic batching off, a numpy bool too) gets no
    batcher, so its settings pass the check as they served before it."""
    from inference.serving._settings import check_model_settings

    keywords = {"max_batch_size": 128, "preferred_batch_sizes": [64], "max_queue_delay_us": 0, "instances": 1}
    check_model_settings({"a": {"path": "a.pt", **own}, "b": "b.pt"}, keywords)  # no error
    if own.get("max_batch_size") == 0:  # its own preferred sizes are still its own to check
        with pytest.raises(pk.ArgumentError, match=r"at most model 'a''s max_batch_size \(0"):
            check_model_settings({"a": {"path": "a.pt", **own, "preferred_batch_sizes": [64]}}, keywords)


@pytest.mark.parametrize(
    ("own", "error", "says"),
    [
        (
            {"instances": 0},
            pk.ArgumentError,
            r"model 'p''s instances \(its 'instances' in serve's models mapping\) is 1 or more",
        ),
        (
            {"max_batch_size": 4},
            pk.ArgumentError,
            r"unknown setting\(s\) 'max_batch_size' .* a pipeline's settings are 'pipeline', 'instances', 'device'",
        ),
    ],
)
def test_a_pipelines_own_settings_are_checked_too(own, error, says):
    """A pipeline's own ``instances`` was taken as it came (0: one instance); a batching setting
    beside it was silently dropped (a pipeline does not batch)."""
    from inference import serve

    with pytest.raises(error, match=says):
        serve({"p": {"pipeline": "never.imported:pipe", **own}}, grpc_port=0)


def test_the_cli_says_a_batch_size_out_of_range_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "inference.serving", str(tmp_path / "m.pt2"), "--max-batch-size", "-3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "alpyka serve: error: max_batch_size (--max-batch-size) is 0 (a model that does not batch) or more, got -3"
    )
