"""The server process: loads the models and runs PyTriton's Triton until told to stop.

Started by :func:`inference.serving.serve` as ``python -m inference.serving._child CONFIG.json`` with
``LD_LIBRARY_PATH`` starting with the interpreter's LIBDIR (PyTriton's Python-backend stub must
load this interpreter's libpython). It writes ``ready.json`` once Triton is up, stops on
SIGTERM/SIGINT, and stops by itself when its parent process dies (then it also removes the
work directory its parent can no longer remove): gracefully once serving, at once while still
starting (its main thread may be stuck in a slow model load or a Triton that does not come up).
A startup failure is written, as one line that says what to fix, to ``error.txt`` (the
traceback goes to the log).

Lifetime of Triton: PyTriton starts ``tritonserver`` (and Triton starts its Python-backend
stubs) in this process's process group. A small watchdog process (:mod:`._lifetime`, as is the
watch of the parent), also in the group, waits for this process to end and then SIGKILLs the
whole group: if this process is killed, Triton must
not live on (PyTriton's own parent-death signal makes Triton shut down gracefully, which waits
for in-flight requests that this dead process would never answer, so clients would hang until
their timeouts). On a normal stop Triton has already ended and the watchdog kills only itself.

Stop: at once when no client is connected, else once Triton has answered the requests in flight
and unloaded the models (:mod:`._stopping`); Triton ended, PyTriton's stop ends its request loops
in this process, then the stubs are reaped, the watchdog ended, and what Triton left is removed.

Model folders: Triton copies each model's files into ``/tmp/folderXXXXXX`` for its Python-backend
stub and removes the folder only when it unloads the model on a clean shutdown. This process
records the folders in its work directory once Triton is up (``triton-folders.json``, read from
the stubs' command lines) and removes whatever of them is left once Triton has ended, however it
ended (a normal stop whose unload timed out, ``tritonserver`` killed); a sweep removes them when
this process and its group were killed too (:mod:`._leftovers`).

Access: Triton's endpoints that change or read the server beyond serving (model repository:
load/unload; shared-memory registration; trace; logging) need the access token of the run
(``config.json``'s ``token``) in a request header (:mod:`._access`), never on a command line
(:mod:`._private_args`).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from portable.env import env_number

from .._pipeline import derive_config
from . import _pipelines, _private_args
from ._access import restricted_endpoints
from ._janitor import Janitor, janitor_client, sweep_dead_clients
from ._leftovers import (
    group_members,
    record_triton_folders,
    recorded_triton_folders,
    remove_server_shm,
    remove_triton_folders,
    stub_folders,
)
from ._lifetime import become_subreaper, start_group_watchdog, stop_events
from ._models import StartupError, load_model, make_infer, probe_outputs
from ._spec import ModelSpec
from ._stopping import connected_clients, kill_on_stop, kill_stubs, prompt_stop_polls, unload_models
from ._triton_exit import early_exit_line, exit_code, server_log

ERROR_FILE = "error.txt"


def pipeline_infer(spec: ModelSpec, device: str) -> Callable[..., Any]:
    """Import the pipeline (once per server process: its models load once), check that its
    layouts still give the spec's tensors, warm it up, and return its inference callable."""
    try:
        pipe = _pipelines.load_reference(spec.path)
    except (ImportError, TypeError) as exc:
        raise StartupError(f"pipeline {spec.name!r}: {exc}") from exc
    derived = derive_config(pipe)
    if derived["inputs"] != spec.inputs:
        raise StartupError(
            f"pipeline {spec.name!r}: {spec.path} imported in the server declares other "
            "layouts than the caller's (was the module changed?)"
        )
    runner = _pipelines.PipelineRunner(pipe, device)
    print(f"alpyka serve: pipeline {spec.name!r} on {runner.device}; {runner.warm_up()}", flush=True)
    return _pipelines.make_infer(runner)


def _reap() -> None:
    """Reap every exited child (only after Triton stopped: PyTriton waits for its own)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _stop_resource_tracker() -> None:
    """End this process's multiprocessing resource tracker now (it cleans up after itself and is
    reaped), instead of leaving it to outlive this process."""
    try:
        from multiprocessing import resource_tracker

        # multiprocessing has no public way to stop its tracker: its own internals are the point
        tracker = resource_tracker._resource_tracker  # noqa: SLF001 - multiprocessing's, no public API
        if getattr(tracker, "_pid", None) is None:
            return
        t = threading.Thread(target=tracker._stop, daemon=True)  # noqa: SLF001 - as above
        t.start()
        t.join(3.0)
    except Exception:  # noqa: BLE001 - not started, or another Python: it ends when we do
        pass


def _wait_group_drained(exclude: set[int], timeout: float) -> None:
    """Give Triton's stubs time to exit (and remove their shared memory) by themselves,
    reaping what exits."""
    deadline = time.monotonic() + timeout
    while True:
        _reap()
        if not group_members(os.getpid(), exclude | {os.getpid()}) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _write_error(workdir: Path, message: str) -> None:
    try:
        (workdir / ERROR_FILE).write_text(message.splitlines()[0] if message else "unknown error")
    except OSError:
        pass


class _ClientErrorText:
    """Stands in for the ``traceback`` module inside ``pytriton.proxy.inference``: PyTriton sends
    ``traceback.format_exception(error)`` or ``traceback.format_exc()`` of a failed request to the
    client, the whole traceback with this machine's file paths. Both give the error's type and
    first message line instead; ``format_exc`` prints the whole traceback to the server's log
    first (PyTriton also logs what it returns)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @staticmethod
    def format_exception(exc_type: Any, value: BaseException | None = None, tb: Any = None, **kw: Any) -> list[str]:
        err = value if isinstance(value, BaseException) else exc_type
        if not isinstance(err, BaseException):
            return ["error\n"]
        first = (str(err).strip().splitlines() or [""])[0]
        return [f"{type(err).__name__}: {first}\n"]

    def format_exc(self, limit: Any = None, chain: bool = True) -> str:
        self._real.print_exc()  # the whole traceback: in the server's log, not to the client
        err = sys.exc_info()[1]
        return "".join(self.format_exception(err)) if err is not None else "error\n"


class _PromptPolls:
    """The ``time`` module for PyTriton's readiness waits, with sleeps of at most 50 ms that end
    the wait (:class:`StartupError`) once the ``tritonserver`` being started has exited."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        check_triton_running()
        time.sleep(min(seconds, POLL_S))


#: how often this process asks Triton whether it and its models are ready, while starting
POLL_S = 0.05
#: the PyTriton ``Triton`` being started (its readiness waits check on it), else None
_starting: list[Any] = [None]


def check_triton_running() -> None:
    """A :class:`StartupError` with tritonserver's exit code, last error and the fix, when the
    ``tritonserver`` being started has exited (PyTriton would wait its whole startup timeout)."""
    triton = _starting[0]
    code = exit_code(triton) if triton is not None else None
    if code is not None:
        raise StartupError(early_exit_line(code, server_log(triton)))


@contextmanager
def ending_on_triton_exit(triton: Any) -> Iterator[None]:
    """Meanwhile, a ``tritonserver`` exit ends what this (the main) thread does with a
    :class:`StartupError`: at its next readiness poll, or through ``SIGUSR1`` from a watching
    thread where it waits on something else (a question to a port whose other owner never
    answers)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            if exit_code(triton) is not None:
                os.kill(os.getpid(), signal.SIGUSR1)  # its handler runs in the main thread
                return

    previous = signal.signal(signal.SIGUSR1, lambda *_: check_triton_running())
    _starting[0] = triton
    watcher = threading.Thread(target=watch, name="alpyka-triton-exit", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        _starting[0] = None
        watcher.join()
        signal.signal(signal.SIGUSR1, previous)


def prompt_readiness_polls() -> bool:
    """PyTriton waits for Triton and for each model by asking, then sleeping 1 s: a server was
    ready about 1.4 s (of 7) before it said so. Its client helpers here poll every 50 ms instead
    (loopback requests, only while starting). False where PyTriton's module differs."""
    try:
        from pytriton.client import utils
    except ImportError:
        return False
    if getattr(utils, "time", None) is not time:
        return isinstance(getattr(utils, "time", None), _PromptPolls)
    utils.time = _PromptPolls()
    return True


#: the longest a readiness question of PyTriton's may wait for its answer in this process:
#: tritonclient's gRPC questions have no limit by default, and the main thread inside one (in
#: gRPC's C core) runs no signal handler, so a port's other owner that accepts and never answers
#: kept the watch's SIGUSR1 from ending a failed start for ~40 s. A question that runs out counts
#: as "not ready yet" (the wait asks again)
QUESTION_S = 2.0


def bounded_readiness_questions() -> bool:
    """Give tritonclient's gRPC readiness questions (``is_server_ready``, ``is_server_live``)
    :data:`QUESTION_S` as their default ``client_timeout``; False where tritonclient's gRPC client
    is missing or differs."""
    try:  # tritonclient is optional (the triton extra): imported here
        from tritonclient.grpc import InferenceServerClient
    except ImportError:
        return False
    for name in ("is_server_ready", "is_server_live"):
        question = getattr(InferenceServerClient, name, None)
        if question is None:
            return False
        if getattr(question, "alpyka_bounded", False):
            continue

        def bounded(self: Any, headers: Any = None, client_timeout: float | None = None, _q: Any = question) -> Any:
            return _q(self, headers=headers, client_timeout=QUESTION_S if client_timeout is None else client_timeout)

        bounded.alpyka_bounded = True  # type: ignore[attr-defined]
        setattr(InferenceServerClient, name, bounded)
    return True


def short_errors_to_clients() -> bool:
    """Install :class:`_ClientErrorText` in PyTriton's request handler; False where this PyTriton
    has no such module (the errors then go out as PyTriton formats them)."""
    try:
        import pytriton.proxy.inference as handler
    except ImportError:
        return False
    if not isinstance(getattr(handler, "traceback", None), _ClientErrorText):
        handler.traceback = _ClientErrorText(handler.traceback)
    return True


#: how long a stop waits for the requests in flight: the server process's wait for the models'
#: unload (:mod:`._stopping`), then Triton's own (``--exit-timeout-secs``) where that ran out
EXIT_TIMEOUT_S = 5

#: how often (in 0.5-s ticks) the server unregisters the shared-memory regions of dead clients
SHM_SWEEP_TICKS = env_number("ALPYKA_SERVE_SHM_SWEEP_TICKS", 10, int, minimum=1)


def _record_folders(workdir: Path) -> None:
    """Record the model folders of this process group's stubs (see the module's docstring)."""
    try:
        record_triton_folders(workdir, stub_folders(os.getpid()))
    except OSError:  # the work directory is gone (the parent removed it): nothing to record into
        pass


def _prepare_process(cfg: dict) -> None:
    """PyTriton's patches (short errors to clients, prompt and bounded readiness polls), torch's threads, and
    the caller's ``sys.path`` (pipelines import as the caller did)."""
    short_errors_to_clients()
    prompt_readiness_polls()
    bounded_readiness_questions()
    prompt_stop_polls()
    if cfg.get("threads"):  # torch's threads, set before any model loads (an ONNX model's too: below)
        import torch

        torch.set_num_threads(int(cfg["threads"]))
    for entry in reversed(cfg.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _triton_config(cfg: dict) -> Any:
    """Triton's configuration: every endpoint on 127.0.0.1, at the ports of ``cfg``; no HTTP
    endpoint unless ``cfg`` names its port (Triton's JSON parser can be made to allocate any size:
    docs/remote.md, "Requests that could exhaust memory")."""
    from pytriton.triton import TritonConfig  # optional (the triton extra): imported by _Startup.start

    http = cfg.get("http_port")
    return TritonConfig(
        grpc_address="127.0.0.1",
        grpc_port=cfg["grpc_port"],
        allow_http=http is not None,
        http_address="127.0.0.1",
        http_port=http,
        metrics_address="127.0.0.1",
        metrics_port=cfg["metrics_port"],
        model_repository=_private_args.gated_repository(Path(cfg["workdir"]) / "pytriton"),
        log_verbose=int(cfg.get("log_verbose", 0)),
        exit_timeout_secs=EXIT_TIMEOUT_S,
    )


def _bind(triton: Any, spec: ModelSpec, infer: Callable[..., Any]) -> None:
    """Bind one model's inference callable to Triton (its batching, instances and tensors)."""
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # optional: see _triton_config

    batcher = None
    if spec.max_batch_size > 0 and spec.dynamic_batching:
        batcher = DynamicBatcher(
            max_queue_delay_microseconds=int(spec.max_queue_delay_us),
            preferred_batch_size=spec.preferred_batch_sizes or None,
        )
    mconfig = ModelConfig(batching=spec.max_batch_size > 0, max_batch_size=max(spec.max_batch_size, 0), batcher=batcher)
    triton.bind(
        model_name=spec.name,
        infer_func=[infer] * max(1, spec.instances),
        inputs=[Tensor(name=t.name, dtype=t.dtype, shape=t.dims) for t in spec.inputs],
        outputs=[Tensor(name=t.name, dtype=t.dtype, shape=t.dims) for t in spec.outputs],
        config=mconfig,
        strict=False,
    )


class _Startup:
    """Loads the models, binds them to Triton and runs it, keeping what it is doing (``stage``,
    for the one-line report of a failure) and the Triton it made (stopped however main ends)."""

    def __init__(self, cfg: dict, workdir: Path) -> None:
        self.cfg, self.workdir = cfg, workdir
        self.stage = "starting the server"
        self.triton: Any = None

    def start(self) -> list[ModelSpec]:
        """Start serving; the models' specs (outputs found by a trial run where not declared)."""
        # pytriton is optional (the triton extra): imported here, inside main's report of failures
        from pytriton.triton import Triton, TritonSecurityConfig

        _prepare_process(self.cfg)
        device = self.cfg["device"]
        specs = [ModelSpec.from_json(s) for s in self.cfg["models"]]
        bindings = [(spec, self._load(spec, device)) for spec in specs]
        self.stage = "starting Triton"
        tconfig = _triton_config(self.cfg)
        _private_args.patch_pytriton_headers(self.cfg["token"])  # PyTriton holds only the placeholder
        security = TritonSecurityConfig(
            access_token=_private_args.PLACEHOLDER, restricted_endpoints=restricted_endpoints()
        )
        self.triton = Triton(config=tconfig, workspace=str(self.workdir / "pytriton"), security_config=security)
        for spec, infer in bindings:
            _bind(self.triton, spec, infer)
        with ending_on_triton_exit(self.triton):
            _private_args.run_triton(self.triton, self.cfg["token"], self.cfg["preload"])
        return specs

    def _load(self, spec: ModelSpec, device: str) -> Callable[..., Any]:
        """One model's (or pipeline's) inference callable."""
        if spec.kind == "pipeline":
            self.stage = f"loading pipeline {spec.name!r} ({spec.path})"
            return pipeline_infer(spec, spec.device or self.cfg.get("pipeline_device", "cpu"))
        self.stage = f"loading model {spec.name!r} from {spec.path}"
        model = load_model(spec.path, device, self.cfg.get("threads"))
        if not spec.outputs:
            self.stage = f"running model {spec.name!r} once to find its outputs"
            spec.outputs = probe_outputs(model, spec, device)
        return make_infer(model, spec, device)

    def failure(self, exc: BaseException) -> str:
        """The one line ``error.txt`` says for an unexpected failure: the stage and the error."""
        reason = (str(exc).strip().splitlines() or [""])[0].strip()
        return f"{self.stage} failed: {type(exc).__name__}" + (f": {reason}" if reason else "")


def _announce_ready(cfg: dict, workdir: Path, specs: list[ModelSpec]) -> None:
    """Record the stubs' model folders, then write ``ready.json`` (atomically) and say so."""
    _record_folders(workdir)
    ready = {"pid": os.getpid(), "models": [s.to_json() for s in specs]}
    tmp = workdir / "ready.json.tmp"
    tmp.write_text(json.dumps(ready))
    tmp.rename(workdir / "ready.json")
    http = f"HTTP 127.0.0.1:{cfg['http_port']}" if cfg.get("http_port") is not None else "no HTTP"
    print(f"alpyka serve: ready (gRPC 127.0.0.1:{cfg['grpc_port']}, {http})", flush=True)


def _serve(workdir: Path, triton: Any, stop: threading.Event, janitor: Janitor | None) -> int:
    """Wait until told to stop (0) or Triton ends (3), doing the housekeeping every few ticks."""
    ticks = 0
    while not stop.wait(0.5):
        if not triton.is_alive():
            print("alpyka serve: Triton stopped unexpectedly", file=sys.stderr, flush=True)
            return 3
        ticks += 1
        if ticks % SHM_SWEEP_TICKS == 0:  # regions of clients that died without unregistering
            _record_folders(workdir)  # a stub Triton restarted has a new folder
            _private_args.close_backend_shm(os.getpid())  # and a new segment, which Triton makes 0644
            if janitor is not None:
                sweep_dead_clients(janitor)
    return 0


def _end_quickly(
    triton: Any,
    janitor: Janitor | None,
    names: list[str],
    ports: list[int],
    timeout: float,
    workdir: Path | None = None,
) -> bool:
    """Prepare Triton's stop so that it is quick and drops no request (:mod:`._stopping`): True
    when PyTriton's stop is to kill tritonserver (no client connected, or the models unloaded
    first, or their requests still running after ``timeout``); False where Triton could not be
    asked to unload them (its own stop then waits for them)."""
    if triton is None or exit_code(triton) is not None:
        return False
    clients = connected_clients(ports, os.getpid())
    why = "no client is connected"
    if clients != 0:
        unloaded = unload_models(janitor, names, os.getpid(), timeout) if janitor is not None else None
        if unloaded is None:
            print("alpyka serve: Triton cannot be asked to unload the models; its own stop waits for them", flush=True)
            return False
        why = "the models are unloaded" if unloaded else f"requests still running after {timeout:g} s fail"
    if workdir is not None:
        _record_folders(workdir)  # (a stub restarted since the last sweep: its folder is removed too)
    if not kill_on_stop(triton):
        return False
    # said in the log: PyTriton then reports tritonserver's end as a failure ("exited with failure")
    print(f"alpyka serve: stopping: {why}; ending tritonserver at once", flush=True)
    return True


def _shut_down(
    triton: Any,
    watchdog: subprocess.Popen | None,
    workdir: Path,
    janitor: Janitor | None = None,
    names: list[str] | None = None,
    ports: list[int] | None = None,
) -> None:
    """Stop Triton (quickly: :func:`_end_quickly`), let its stubs exit, end the watchdog, and
    remove what Triton left behind."""
    killed = ports is not None and _end_quickly(triton, janitor, names or [], ports, EXIT_TIMEOUT_S, workdir)
    if janitor is not None:
        janitor.close()
    if triton is not None:
        try:
            triton.stop()
        except BaseException:  # noqa: BLE001 - stopping anyway
            traceback.print_exc()
    if killed:
        kill_stubs(os.getpid())  # tritonserver was killed: its stubs serve nothing now
    _stop_resource_tracker()
    _wait_group_drained({watchdog.pid} if watchdog is not None else set(), timeout=5.0)
    if watchdog is not None:  # a normal end: no longer needed; reaped here, not left a zombie
        watchdog.kill()
        watchdog.wait()
    _reap()
    remove_server_shm(os.getpid())  # PyTriton's segments, named after this process
    remove_triton_folders(recorded_triton_folders(workdir))  # what Triton did not remove


def main(config_path: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    workdir = Path(cfg["workdir"])
    stop, orphaned, serving = stop_events(cfg, workdir)
    become_subreaper()
    watchdog = start_group_watchdog()
    startup = _Startup(cfg, workdir)
    janitor, names = None, []
    try:
        try:
            specs = startup.start()
        except (StartupError, _private_args.PrivateArgsError) as exc:  # already one line with the fix
            traceback.print_exc()
            _write_error(workdir, str(exc))
            return 2
        except BaseException as exc:  # noqa: BLE001 - reported to the parent: error.txt, log, exit code
            traceback.print_exc()
            _write_error(workdir, startup.failure(exc))
            return 2
        serving.set()
        janitor, names = janitor_client(cfg["grpc_port"], cfg.get("token")), [s.name for s in specs]
        _announce_ready(cfg, workdir, specs)
        return _serve(workdir, startup.triton, stop, janitor)
    finally:
        ports = [p for p in (cfg["grpc_port"], cfg.get("http_port")) if p is not None] if janitor else None
        _shut_down(startup.triton, watchdog, workdir, janitor, names, ports)
        if orphaned.is_set() and cfg.get("own_workdir"):
            shutil.rmtree(workdir, ignore_errors=True)  # the parent died and cannot remove it


if __name__ == "__main__":
    code = main(sys.argv[1])
    gc.freeze()  # everything is stopped: no full collection over torch's heap at exit (about 1 s)
    sys.exit(code)
