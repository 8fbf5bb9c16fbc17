"""``alpyka serve MODEL... [--name NAME] [--grpc-port P] [--http-port P] [--device D]`` (also
``python -m inference.serving ...``): host models in Triton until Ctrl-C (or SIGTERM); errors
print one line with the fix. After a SIGTERM it exits 0 once the server stopped; after a Ctrl-C
it ends killed by SIGINT (a shell loop that runs it stops too), as Python ends on a Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from portable.cli import end_by_interrupt, run

from . import ServerHandle, serve

#: the exit status after a second SIGTERM killed the server (a second Ctrl-C ends it by SIGINT)
FORCED_EXIT = 130


def build_parser(prog: str = "alpyka serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Host TorchScript (.pt), torch.export / "
        "AOTInductor (.pt2) and ONNX (.onnx) models and alpyka pipelines "
        "(package.module:attribute) in a Triton server (PyTriton) on 127.0.0.1.",
    )
    p.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="model files (.pt, .pt2, .onnx) or pipelines as package.module:attribute",
    )
    p.add_argument("--name", help="model name on the server (one model; default: the file's stem)")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0: a free one; default 8001)")
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="serve HTTP too, on this port (0: a free one); default: no HTTP, only gRPC (see docs/remote.md: "
        "Triton's JSON parser can be made to allocate any size)",
    )
    p.add_argument("--metrics-port", type=int, default=0, help="metrics port (0: a free one)")
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda[:N] or an alpyka backend (cpu_serial, "
        "cpu_threads, opencl, cuda, rocm): where pipelines run (models: the matching torch device)",
    )
    p.add_argument(
        "--input",
        action="append",
        default=None,
        metavar="NAME:DTYPE:DIMS",
        help="an input tensor, e.g. features:float32:3 (dims per sample, -1 any); repeatable",
    )
    p.add_argument(
        "--output",
        action="append",
        default=None,
        metavar="NAME:DTYPE:DIMS",
        help="an output tensor (default: an ONNX model's declared outputs, else found by running the model once)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="rows per request (default: as many as fit in 32 MiB of a row's inputs and outputs, "
        "1024 to 1048576); 0: the model does not batch",
    )
    p.add_argument("--no-dynamic-batching", action="store_true", help="one execution per request")
    p.add_argument("--preferred-batch-size", type=int, action="append", default=None)
    p.add_argument("--max-queue-delay-us", type=int, default=0)
    p.add_argument("--instances", type=int, default=1, help="model instances (parallel executions)")
    return p


def command(argv: list[str], prog: str = "alpyka serve") -> int:
    """``alpyka serve``: host models in a Triton server through PyTriton, until Ctrl-C."""
    args = build_parser(prog).parse_args(argv)
    server = serve(
        args.models,
        name=args.name,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        device=args.device,
        inputs=args.input,
        outputs=args.output,
        max_batch_size=args.max_batch_size,
        dynamic_batching=not args.no_dynamic_batching,
        preferred_batch_sizes=args.preferred_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        instances=args.instances,
    )
    stop, forced = threading.Event(), threading.Event()
    ctrl_c: list[int] = []  # a SIGINT came (appended by the handler: no lock there)

    def on_signal(signum: int, frame: object) -> None:
        if signum == signal.SIGINT:
            ctrl_c.append(signum)
        if stop.is_set() and not forced.is_set():  # a second Ctrl-C: no more waiting
            forced.set()
            _say(f"{prog}: killing the server (a second Ctrl-C; requests in flight fail)")
            server.kill()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    for m in server.models:
        ins = ", ".join(f"{t.name}:{t.dtype}{list(t.dims)}" for t in m.inputs)
        outs = ", ".join(f"{t.name}:{t.dtype}{list(t.dims)}" for t in m.outputs)
        src = m.inputs_from
        note = (
            ""
            if src in ("declared", "layouts")
            else "; inputs from its .json/extra file"
            if src == "file"
            else "; inputs not declared (--input)"
            if src.startswith("default")
            else f"; inputs read from the model: {src}"
        )
        what = f"pipeline {m.name} ({m.path})" if m.kind == "pipeline" else f"model {m.name}"
        print(f"{what}: {ins} -> {outs} (max_batch_size {m.max_batch_size}{note})")
    http = f"HTTP {server.http_url}" if server.http_port is not None else "no HTTP (--http-port P serves it)"
    print(
        f"serving on gRPC {server.grpc_url}, {http}, metrics 127.0.0.1:{server.metrics_port} (pid {server.pid}); "
        "Ctrl-C stops",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            if not server.is_running():
                _report_end(server, prog)
                return 1
        # said at once: Triton answers the requests in flight and unloads its models first
        print(f"{prog}: stopping the server (Triton unloads its models)", file=sys.stderr, flush=True)
    finally:
        server.stop()
    print(f"{prog}: stopped", file=sys.stderr, flush=True)
    if ctrl_c and end_by_interrupt(None):  # its lines said it: the process ends killed by SIGINT
        raise KeyboardInterrupt
    return FORCED_EXIT if forced.is_set() else 0


def _say(line: str) -> None:
    """Write ``line`` to stderr from a signal handler (a ``print`` there could interrupt another)."""
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    except (OSError, ValueError):  # no stderr: nothing to say it on
        pass


def _report_end(server: ServerHandle, prog: str) -> None:
    """The server process ended by itself: say so with the end of its log, and where the whole
    log was kept (its work directory, log included, goes with the server)."""
    kept = server.keep_log()
    where = f"kept as {kept}" if kept is not None else "gone"
    print(
        f"{prog}: error: the server process (pid {server.pid}) ended with exit code {server.process.returncode}; "
        f"its log ({where}) ends with:\n{server.log_tail(20)}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors print one line with the fix)."""
    return run(command, argv, "alpyka serve")


if __name__ == "__main__":
    sys.exit(main())
