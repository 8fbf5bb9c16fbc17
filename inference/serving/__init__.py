"""Host TorchScript / torch.export / AOTInductor / ONNX models and alpyka pipelines in a real Triton
server through PyTriton.

    from inference import serve      # this package's serve (also inference.serving.serve)
    with serve("mlp.pt", inputs=["features:float32:3"], max_queue_delay_us=500) as server:
        model = RemoteModel(server.grpc_url, "mlp")
    with serve(merge, device="cpu_threads") as server:      # an @inference.pipeline
        remote = merge.remote(server.grpc_url)

The server runs in a child process (its own process group) whose ``LD_LIBRARY_PATH`` starts with
this interpreter's LIBDIR, as PyTriton's Python-backend stub needs; it listens on 127.0.0.1 only,
on free ports unless told otherwise. :meth:`ServerHandle.stop` (also at interpreter exit, and
when the parent dies) stops it by its process id; if the server process itself is killed, a
watchdog in its process group kills Triton at once (see :mod:`._child`). Work directories are
``<tmp>/alpyka-serve-<pid>-*``; stale ones (their owner dead) are swept when a server starts
(:mod:`._leftovers`). CLI: ``alpyka serve`` or ``python -m inference.serving``.

Access: inference, health, metadata, model config and statistics are open to any client of the
port; loading/unloading models, shared-memory registration, trace and logging need the server's
access token (:attr:`ServerHandle.token`) in a request header. alpyka's own clients find it
(:func:`access_token`); no other local user can (it is on no command line: :mod:`._private_args`).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import portable as pk
from portable import AlpykaError

from ._access import TOKEN_ENV, TokenError, access_token, check_token, forget, remember
from ._device import DeviceStringError, parse_device
from ._leftovers import (
    SERVER_DIR_PREFIX,
    SERVER_PID_FILE,
    group_alive,
    recorded_triton_folders,
    remove_server_shm,
    remove_triton_folders,
    server_workdir,
    sweep,
    write_access,
)
from ._private_args import PrivateArgsError, build_preload, private_workdir
from ._settings import check_batching, check_model_settings
from ._spec import IO_EXTRA_FILE, ModelSpec, TensorDecl, model_specs
from ._triton_exit import last_error

__all__ = [
    "IO_EXTRA_FILE",
    "DeviceStringError",
    "ModelSpec",
    "ServerHandle",
    "ServeError",
    "TensorDecl",
    "TokenError",
    "access_token",
    "free_port",
    "serve",
]


class ServeError(AlpykaError, RuntimeError):
    """The server process could not start (the message carries the end of its log)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    """Whether tritonserver could listen on ``port`` of 127.0.0.1 now: the check binds and listens
    as Triton does (its gRPC server, gRPC core, and its HTTP and metrics servers, libevhtp, set
    SO_REUSEADDR before they bind; SO_REUSEPORT only under ``--reuse-grpc-port`` /
    ``--reuse-http-port``, which serve never passes). So a port whose last connections linger in
    TIME_WAIT (a server stopped a moment ago) is free, as it is to Triton, and a port another
    socket listens on, or is bound to without SO_REUSEADDR, is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


def child_environment() -> dict[str, str]:
    """This environment with LD_LIBRARY_PATH starting with the interpreter's LIBDIR and the
    project importable."""
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    rest = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, rest) if p)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


#: device names torch itself uses, served as given (``cuda[:N]`` is both torch's and alpyka's)
TORCH_DEVICES = ("cpu", "cuda")


def server_devices(device: str) -> tuple[str, str]:
    """``(torch device of plain models, alpyka device of pipelines)`` for serve's ``device``
    (:func:`parse_device`); pipelines on ``"cpu"`` run on the host's backend. Plain models of
    another backend run on the torch device its device declares
    (``capabilities.torch_device_type``: ROCm's is torch's cuda), else on the CPU."""
    name, index = parse_device(device)
    if name in TORCH_DEVICES:
        return device, device
    torch_type = pk.device(name, index or 0).capabilities.torch_device_type
    if torch_type is None or torch_type == "cpu":
        return "cpu", device
    return (f"{torch_type}:{index}" if index is not None else torch_type), device


class ServerHandle:
    """A running server process: its ports, urls and models; ``stop()`` ends it."""

    def __init__(
        self,
        proc: subprocess.Popen,
        workdir: Path,
        grpc_port: int,
        http_port: int | None,
        metrics_port: int,
        models: list[ModelSpec],
        own_workdir: bool,
        token: str = "",
    ) -> None:
        self.process = proc
        #: the access token of the restricted endpoints (model repository, shared memory, trace,
        #: logging): send it as header ``triton-access-token`` (gRPC: metadata key
        #: ``triton-grpc-protocol-triton-access-token``)
        self.token = token
        self.pid = proc.pid
        self.workdir = workdir
        self.grpc_port, self.http_port, self.metrics_port = grpc_port, http_port, metrics_port
        self.models = models
        self._own_workdir = own_workdir
        self._stopped = False
        atexit.register(self.stop)

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        """The HTTP endpoint; a :class:`ServeError` when the server serves none (see :func:`serve`)."""
        if self.http_port is None:
            raise ServeError(
                f"the server (pid {self.pid}) serves no HTTP: start it with http_port=0 (a free port) "
                "or a port number (alpyka serve --http-port P), or use gRPC (grpc_url)"
            )
        return f"127.0.0.1:{self.http_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def keep_log(self) -> Path | None:
        """Copy the server's log out of its work directory (which :meth:`stop` removes) into a new
        file ``<tmp>/alpyka-serve-<pid>-XXXX.log``, readable by this user only (the sweep of
        leftovers leaves it); its path, or None when there is no log to copy."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return None
        fd, name = tempfile.mkstemp(prefix=f"{SERVER_DIR_PREFIX}{self.pid}-", suffix=".log")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return Path(name)

    def is_running(self) -> bool:
        return not self._stopped and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server process (it stops Triton), SIGKILL its process group if it lingers."""
        if self._stopped:
            return
        self._stopped = True
        proc = self.process
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()  # it ignored SIGTERM: killed alone first, so that its watchdog does the rest
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass  # not reaped yet: the group kill and the last wait below see to it
        # the group is the one the server process leads: Triton, its stubs and their watchdog, which
        # (the server process killed) kills the rest and removes the stubs' model folders: its time
        # first (after a normal exit the server process has stopped its watchdog itself)
        deadline = time.monotonic() + 3.0
        while (
            proc.returncode is not None
            and proc.returncode < 0
            and group_alive(self.pid)
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and group_alive(self.pid):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.05)
        try:
            proc.wait(2)  # reap it if it was killed just now
        except subprocess.TimeoutExpired:
            pass
        remove_server_shm(self.pid)  # PyTriton's segments, if the server process could not
        remove_triton_folders(recorded_triton_folders(self.workdir))  # likewise Triton's stub folders
        forget([p for p in (self.grpc_port, self.http_port) if p is not None], self.token)
        try:
            atexit.unregister(self.stop)
        except Exception:  # noqa: BLE001
            pass
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """End the server process at once (SIGKILL): its watchdog kills Triton and its stubs, and
        requests in flight fail; :meth:`stop` (also one already waiting) removes what is left."""
        if self.process.poll() is None:
            self.process.kill()

    def adopt_workdir(self) -> None:
        """From now on :meth:`stop` removes the work directory (one ``serve`` made for it)."""
        self._own_workdir = True

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        names = ", ".join(m.name for m in self.models)
        http = f"HTTP 127.0.0.1:{self.http_port}" if self.http_port is not None else "no HTTP"
        return f"<ServerHandle pid={self.pid} gRPC {self.grpc_url} {http} [{names}] {state}>"


def serve(
    models: Any,
    *,
    name: str | None = None,
    grpc_port: int | None = None,
    http_port: int | None = None,
    metrics_port: int | None = None,
    device: str = "cpu",
    max_batch_size: int | None = None,
    dynamic_batching: bool = True,
    preferred_batch_sizes: Sequence[int] | None = None,
    max_queue_delay_us: int = 0,
    inputs: Sequence[Any] | None = None,
    outputs: Sequence[Any] | None = None,
    instances: int = 1,
    threads: int | None = None,
    startup_timeout: float = 120.0,
    workdir: str | os.PathLike | None = None,
    token: str | None = None,
) -> ServerHandle:
    """Start a Triton server hosting ``models`` and return once every model is ready.

    ``models``: a .pt (TorchScript), .pt2 (torch.export program or AOTInductor package) or .onnx
    (ONNX Runtime, loaded as ``Model`` loads it) path, an ``nn.Module`` (scripted), a
    pipeline (``@inference.pipeline``, or its ``"module:attribute"`` reference: its config is
    derived from its layouts, see ``inference._pipeline._wire``), a list of those, or
    ``{name: model or {"path": ..., "inputs": ..., ...}}``. ``name`` names a
    single model (default: the file's stem). Tensors: ``inputs``/``outputs`` as
    ``"name:dtype:d0,d1"`` (dims per sample, -1 any), else read from a ``<file>.json`` beside the
    model or its TorchScript extra file ``alpyka_io.json``, else read from the model itself
    (TorchScript: ``input__0`` with the ``in_features`` of its first layer when that is a Linear;
    a torch.export program: its input specs; an ONNX model: its declared inputs and outputs, names
    included), else one ``input__0`` float32 [-1]; outputs not
    declared are found by running the model once (a failure says what to declare). Ports: None
    or 0 picks a free loopback port; ``http_port=None`` (the default) serves no HTTP at all:
    Triton's JSON parser allocates a request's declared shape before it counts the values, so
    one small request could take the server down (docs/remote.md, "Requests that could exhaust
    memory"); give ``http_port`` (0: a free port) for a client that needs HTTP. ``device``:
    ``"cpu"``, ``"cuda"``/``"cuda:N"`` or an alpyka backend (pipelines run there; plain models
    on the matching torch device). Dynamic batching merges concurrent requests up to
    ``max_batch_size`` (``preferred_batch_sizes``, ``max_queue_delay_us``); ``max_batch_size=0``
    serves a model that does not batch; None (the default) takes as many rows as fit in 32 MiB
    of a row's inputs and outputs (at least 1024, at most 1048576: a collection usually has
    thousands of rows, and each request costs a round trip). ``token``: the access token of the
    restricted endpoints (default: ``$ALPYKA_SERVE_TOKEN``, else a random one);
    :attr:`ServerHandle.token`; at least 16 letters, digits or ``-._~``, else
    :class:`TokenError` at once. ``tritonserver`` gets it through its environment, not its
    command line (which every local user can read): serving needs a C compiler (``$CC``, cc,
    gcc or clang) to build the small library that does this (:mod:`._private_args`).
    """
    torch_device, pipeline_device = server_devices(device)
    if token:
        token = check_token(token, "serve's token")
    elif os.environ.get(TOKEN_ENV):
        token = check_token(os.environ[TOKEN_ENV], f"${TOKEN_ENV}")
    else:
        token = secrets.token_urlsafe(32)
    for what, port in (("gRPC", grpc_port), ("HTTP", http_port), ("metrics", metrics_port)):
        if port is not None and (isinstance(port, bool) or not isinstance(port, Integral)):
            raise pk.ArgumentTypeError(f"the {what} port is an int, 0 to 65535 (0 picks a free one), got {port!r}")
        if port is not None and not 0 <= port <= 65535:
            raise pk.ArgumentError(f"the {what} port is 0 to 65535 (0 picks a free one), got {port!r}")
        if port and not _port_free(int(port)):
            raise ServeError(f"the {what} port {port} is in use on 127.0.0.1; pick another one (0 picks a free one)")
    check_batching(max_batch_size, preferred_batch_sizes, max_queue_delay_us, instances)
    check_model_settings(
        models,
        {
            "max_batch_size": max_batch_size,
            "dynamic_batching": dynamic_batching,
            "preferred_batch_sizes": preferred_batch_sizes,
            "max_queue_delay_us": max_queue_delay_us,
            "instances": instances,
        },
    )
    own = workdir is None
    sweep()  # what killed servers and clients left behind
    wd = server_workdir() if own else Path(workdir)  # type: ignore[arg-type]
    try:
        wd = private_workdir(wd)  # no other user may swap what the server runs from it
        specs = model_specs(
            models,
            name=name,
            workdir=wd,
            inputs=inputs,
            outputs=outputs,
            max_batch_size=None if max_batch_size is None else int(max_batch_size),
            dynamic_batching=bool(dynamic_batching),
            preferred_batch_sizes=[int(b) for b in (preferred_batch_sizes or [])],
            max_queue_delay_us=int(max_queue_delay_us),
            instances=int(instances),
        )
        private = Path(tempfile.mkdtemp(prefix="private-", dir=wd))  # mode 0700
        preload = str(build_preload(private))  # keeps the token off tritonserver's command line
    except PrivateArgsError as exc:
        if own:
            shutil.rmtree(wd, ignore_errors=True)
        raise ServeError(str(exc)) from exc
    except BaseException:
        if own:
            shutil.rmtree(wd, ignore_errors=True)
        raise
    try:
        return _start_retrying(
            wd,
            own,
            specs,
            grpc_port,
            http_port,
            metrics_port,
            torch_device,
            pipeline_device,
            threads,
            startup_timeout,
            token,
            preload,
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)  # tritonserver has loaded it (or failed to start)


def _start_retrying(wd: Path, own: bool, specs: list[ModelSpec], *args: Any) -> ServerHandle:
    """:func:`_start` until it starts or fails otherwise than PyTriton's handshake (see below)."""
    for attempt in range(STARTS):
        try:
            handle = _start(wd, own, specs, *args)
        except ServeError as exc:
            if attempt + 1 < STARTS and any(mark in str(exc) for mark in HANDSHAKE_FAILED):
                for leftover in (
                    "ready.json",
                    "error.txt",
                    "server.log",
                    "config.json",
                    "access.json",
                    SERVER_PID_FILE,
                ):
                    (wd / leftover).unlink(missing_ok=True)
                shutil.rmtree(wd / "pytriton", ignore_errors=True)
                continue  # PyTriton's 1 s model handshake timed out on a loaded machine: start again
            if own:
                shutil.rmtree(wd, ignore_errors=True)
            raise
        except BaseException:
            if own:
                shutil.rmtree(wd, ignore_errors=True)
            raise
        if own:
            handle.adopt_workdir()
        return handle
    raise AssertionError("unreachable")


#: how many times serve starts a server whose models failed PyTriton's handshake (see below)
STARTS = 5
#: PyTriton's model stub waits 1 s (fixed) for its config from the server process; on a loaded
#: machine that times out, or the stub finds the socket before anyone listens on it (connection
#: refused), and the model fails to load: then serve starts the server again
HANDSHAKE_FAILED = ("Timeout occurred while waiting for config file", "get_config_from_handshake_server")


def _start(
    wd: Path,
    own: bool,
    specs: list[ModelSpec],
    grpc_port: int | None,
    http_port: int | None,
    metrics_port: int | None,
    torch_device: str,
    pipeline_device: str,
    threads: int | None,
    startup_timeout: float,
    token: str,
    preload: str,
) -> ServerHandle:
    """One start of the server process in ``wd``; returns once it is ready (the handle does not
    own ``wd`` yet) or raises :class:`ServeError` with its log's end."""
    ports = _choose_ports(grpc_port, http_port, metrics_port)
    config = {
        "workdir": str(wd),
        "own_workdir": own,
        "parent_pid": os.getpid(),
        "device": torch_device,
        "pipeline_device": pipeline_device,
        "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
        "threads": threads,
        "grpc_port": ports[0],
        "http_port": ports[1],
        "metrics_port": ports[2],
        "models": [s.to_json() for s in specs],
        "token": token,
        "preload": preload,
    }
    _write_private(wd / "config.json", json.dumps(config, indent=1))
    served = [p for p in ports[:2] if p is not None]
    write_access(wd, [f"127.0.0.1:{p}" for p in served], token)
    with open(wd / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inference.serving._child", str(wd / "config.json")],
            env=child_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    handle = ServerHandle(proc, wd, *ports, specs, own_workdir=False, token=token)
    deadline = time.monotonic() + startup_timeout
    ready = wd / "ready.json"
    try:
        (wd / SERVER_PID_FILE).write_text(str(proc.pid))  # for the sweep, should this process die
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (
                    f"exited with code {proc.returncode}"
                    if proc.poll() is not None
                    else f"was not ready after {startup_timeout} s"
                )
                try:
                    first = (wd / "error.txt").read_text().strip()
                except OSError:
                    first = ""
                tail = handle.log_tail()
                handle.stop()
                if not first:  # no diagnosis from the server process: the log's last error line
                    error = last_error(tail)
                    first = f"the Triton server process {why}" + (f": {error}" if error else " (its log is below)")
                raise ServeError(f"{first}\nthe server process {why}; its log ends with:\n{tail}")
            time.sleep(0.1)
        handle.models = [ModelSpec.from_json(m) for m in json.loads(ready.read_text())["models"]]
        remember(served, token)
    except BaseException:
        handle.stop()  # an error or Ctrl-C while starting: leave no server behind
        raise
    return handle


def _choose_ports(grpc: int | None, http: int | None, metrics: int | None) -> list[Any]:
    """``[gRPC, HTTP, metrics]``: a port given stays, None or 0 becomes a free one, except HTTP,
    which None leaves off (None); three different ports."""
    while True:
        ports = [grpc or free_port(), None if http is None else http or free_port(), metrics or free_port()]
        chosen = [p for p in ports if p is not None]
        if len(set(chosen)) == len(chosen):
            return ports


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by this user only (it holds the access token)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
