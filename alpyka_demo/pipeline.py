"""The main job: a fragment-merging GNN pipeline on N framework streams.

Per event, on one queue and with no host synchronisation between the steps:

1. ``generate_fragments`` (kernel): particles split into fragments, with truth;
2. ``build_edges`` (kernel): candidate edges between nearby fragments and their features;
3. the edge classifier (a message-passing GNN) scores the edges through ``Model.forward``
   (or ``RemoteModel.forward`` for a Triton server);
4. ``merge_step`` (kernel, a few rounds): fragments joined by accepted edges get one label.

The event's fragments are then copied to the host and the merging is scored against truth,
beside a distance-only baseline. ``alpyka demo --help`` lists the flags.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

import portable as pk
from portable.cli import command_started, die_by_sigint, end_by_interrupt, say_interrupted

from . import _events as E
from ._dask import run_dask
from ._event import STEPS, Report, load_model, run_event

__all__ = ["STEPS", "Report", "command", "demo_backend", "load_model", "main", "run", "run_event"]

#: The demo's default backend: the CPU backend that processed its events fastest, measured side by
#: side (alternating runs of ``alpyka demo --events 1000 --no-progress``, 2 cores, torch intra-op
#: threads 1, medians of 3 runs, 2026-11-23, after the cpu_threads pool and host-queue work):
#:
#:   streams | cpu_serial events/s      | cpu_threads events/s     | serial / threads
#:   1       | 458.5 (413.2-479.1)      | 417.3 (390.3-461.0)      | 1.10
#:   2       | 622.1 (576.4-672.2)      | 615.5 (565.5-625.2)      | 1.01   (the demo's default)
#:
#: An event's kernels cover ~40 particles and a few hundred candidate edges: far below the size
#: where cpu_threads spreads blocks over its pool (those grids run inline there too, after a
#: timing), so cpu_threads cannot win, and its measuring costs a little. The model step
#: (~1.1 ms/event, ~88%) dominates either way. benchmarks/results/pipeline.json (bench_pipeline)
#: says the same (before the pool: cpu_serial 151 / cpu_threads 93 events/s on 1 stream).
#: With waiting threads running their queue's tasks, two bench_pipeline runs on 2 idle
#: cores gave, at 2 streams, cpu_serial 536 / cpu_threads 466 and 452 / 485 events/s: a tie within
#: run-to-run noise, so the backend that starts no pool threads stays the default.
#: Re-measure and change this when the event sizes or the backends change.
DEMO_BACKEND = "cpu_serial"


def demo_backend() -> str:
    """``ALPYKA_BACKEND`` if set, else :data:`DEMO_BACKEND` (measured fastest for the demo's
    events), else ``pk.default_backend()``."""
    if os.environ.get("ALPYKA_BACKEND"):
        return pk.default_backend()
    if DEMO_BACKEND in pk.available_backends():
        return DEMO_BACKEND
    return pk.default_backend()


def run(
    backend: str,
    events: int,
    streams: int,
    n_particles: int = 40,
    model_kind: str = "exported",
    remote: str | None = None,
    progress: bool = True,
    input: str | None = None,
    remote_pipeline: str | None = None,
) -> Report:
    """Run ``events`` events on ``streams`` framework streams (one queue each); ``input``: a
    ROOT file whose events replace the generator's (see ``_from_file``); ``remote_pipeline``:
    ``"auto"`` or server urls ("a,b") running edges + GNN + merging (see ``_service``)."""
    from ._from_file import events_source

    E.check_particles(n_particles)
    device = pk.device(backend)
    source = events_source(input, device)
    report = Report(backend, events, streams, "")
    if source is not None:
        n_particles, report.source, report.truth = source.n_particles, f"{input}: {source.describe()}", False
    if remote_pipeline:
        from ._service import RemoteDemoPipeline

        if source is not None or remote:
            raise ValueError(
                "--remote-pipeline runs the whole chain on the server: it does not combine with --input or --remote"
            )
        model = RemoteDemoPipeline(remote_pipeline, backend)
        report.model = model.description
    else:
        model, report.model = load_model(model_kind, remote, device)
    try:
        return _run_streams(device, model, report, n_particles, progress, source and source.produce)
    except KeyboardInterrupt:
        if _started_server(model) is not None:  # said at once: Triton takes seconds to stop
            print("alpyka demo: interrupted; stopping the Triton server it started", file=sys.stderr, flush=True)
        raise
    finally:
        if hasattr(model, "close"):  # a RemoteModel: stop its auto-started server, if any
            model.close()


def _started_server(model: Any) -> Any:
    """The server ``--remote auto`` / ``--remote-pipeline auto`` started for ``model``, or None."""
    if hasattr(model, "fallback_server"):  # a RemoteModel (its ``server`` is the one it calls)
        return model.fallback_server
    return getattr(model, "server", None)  # a RemoteDemoPipeline


#: after Ctrl-C, how long the events in flight may take to finish before the demo gives up on them
STOP_TIMEOUT_S = 5.0
#: how often the main thread looks for a Ctrl-C the CLI's handler saw but whose KeyboardInterrupt
#: never reached it (raised inside a finalizer, where Python only prints it)
INTERRUPT_POLL_S = 0.25


def _run_streams(
    device: pk.Device, model: Any, report: Report, n_particles: int, progress: bool, produce: Any = None
) -> Report:
    lock = threading.Lock()
    next_event = iter(range(report.events))
    errors: list[BaseException] = []
    stop = threading.Event()  # set by Ctrl-C or a failing stream: no stream starts another event
    bar = _progress_bar(report, progress)

    def stream_events() -> None:
        queue = pk.Queue(device)
        try:
            while not stop.is_set():
                with lock:
                    seed = next(next_event, None)
                if seed is None:
                    return
                (frags, edges), stamps = run_event(queue, model, seed, n_particles, timed=True, produce=produce)
                queue.wait()
                scores = _scores(frags, edges)
                with lock:
                    _count_event(report, scores, edges.size, stamps, bar)
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            errors.append(exc)
            stop.set()

    def stream_worker(ended: threading.Event) -> None:
        try:
            stream_events()
        finally:
            ended.set()  # stream_events' frame (its queue, the event's tensors) is gone by now

    # warm up (compile kernels, deploy the model) outside the timed region; a Ctrl-C (or an
    # error) here closes the bar first, so "alpyka: interrupted" gets a line of its own
    try:
        warm = pk.Queue(device)
        run_event(warm, model, 10**6 + 7, n_particles, timed=False, produce=produce)
        warm.wait()
    except BaseException:
        if bar is not None:
            bar.close()
        raise

    t0 = time.perf_counter()
    # daemon threads: a stream stuck in a wait after Ctrl-C must not keep the process alive
    # Completion is an Event per stream, not Thread.join: on Python 3.11 a Ctrl-C that lands
    # in join() marks the thread as stopped while it still runs (threading's bpo-45274 branch
    # releases the lock the live thread holds), so later joins return at once and the
    # interpreter could end under a stream running PyTorch ("terminate called without an
    # active exception", rc 134).
    ended = [threading.Event() for _ in range(report.streams)]
    threads = [
        threading.Thread(target=stream_worker, args=(e,), name=f"stream-{s}", daemon=True) for s, e in enumerate(ended)
    ]
    presses = _sigint_presses
    previous, deferred = _start_deferring_sigint(threads)
    try:
        _wait_streams(ended, presses, previous, deferred)
    except KeyboardInterrupt:
        _stop_streams(stop, ended, bar)
        raise
    report.wall_s = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if errors:
        raise errors[0]
    return report


def _progress_bar(report: Report, progress: bool) -> Any:
    """A tqdm bar over the run's events on stderr (None without ``progress`` or without tqdm)."""
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=report.events, unit="ev", desc=f"{report.backend} x{report.streams}", file=sys.stderr)


def _scores(frags: Any, edges: Any) -> tuple[Any, Any, int]:
    """One event's pair scores (the GNN's, the baseline's) and its edge count."""
    return E.pair_scores(frags.truth, frags.label), E.pair_scores(frags.truth, frags.baseline), int(edges.n_edges)


def _count_event(report: Report, scores: tuple[Any, Any, int], capacity: int, stamps: list, bar: Any) -> None:
    """Add one event to ``report`` (the caller holds its lock): scores, edges kept and dropped
    (beyond the edge collection's ``capacity``), each step's time; advance the bar."""
    gnn, base, n_edges = scores
    report.gnn.add(gnn)
    report.baseline.add(base)
    report.edges += min(n_edges, capacity)
    report.dropped_edges += max(0, n_edges - capacity)
    for s, (a, b) in zip(STEPS, zip(stamps, stamps[1:])):
        report.step_s[s] += b - a
    if bar is not None:
        bar.update(1)


def _start_deferring_sigint(threads: list[threading.Thread]) -> tuple[Any, list[Any]]:
    """Start ``threads`` with Ctrl-C deferred: one landing inside Thread.start() would leave
    before the streams' wait, with no stop set and a stream on its way into an event. A Python
    handler that only records the press does it, whichever thread the signal reached (a signal
    mask would not: a Ctrl-C goes to any thread that does not block it). Returns the handler
    put back and the presses recorded meanwhile."""
    deferred: list[Any] = []
    previous = _defer_sigint(deferred)
    try:
        for t in threads:
            t.start()
    finally:
        _restore_sigint(previous)
    return previous, deferred


def _wait_streams(ended: list[threading.Event], presses: int, previous: Any, deferred: list[Any]) -> None:
    """Wait until every stream ended; KeyboardInterrupt on Ctrl-C (``presses``: the CLI's count
    when the streams started)."""
    if deferred:  # pressed while the streams started: handled now, by the handler it was meant for
        _deliver_sigint(previous, deferred[0])
    for e in ended:
        # polled: a Ctrl-C whose KeyboardInterrupt was raised inside a finalizer that the
        # collector ran on this thread is swallowed there ("Exception ignored in ..."); the
        # CLI's handler counted it, so the demo still stops (see _exit_on_second_interrupt)
        while not e.wait(INTERRUPT_POLL_S):
            if _sigint_presses != presses:
                raise KeyboardInterrupt


def _stop_streams(stop: threading.Event, ended: list[threading.Event], bar: Any) -> None:
    """After Ctrl-C: stop at once: no new event starts; the one each stream has in flight
    (milliseconds of work) finishes, so no queue is left with work when the interpreter exits."""
    global _streams_left_running
    stop.set()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for e in ended:
        e.wait(max(0.0, deadline - time.monotonic()))
    if bar is not None:
        bar.close()
    if not all(e.is_set() for e in ended):
        _streams_left_running = True  # main() ends the process at once: see there


def _defer_sigint(presses: list[Any]) -> Any:
    """Install a SIGINT handler that only records each press (its frame) in ``presses``; returns
    the handler it replaced, for :func:`_restore_sigint` (None where nothing is installed: off the
    main thread, or under a SIGINT handler that C code installed)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        return None  # None: a handler not installed from Python, which could not be put back
    return signal.signal(signal.SIGINT, lambda signum, frame: presses.append(frame))


def _restore_sigint(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def _deliver_sigint(handler: Any, frame: Any) -> None:
    """Handle a deferred press as ``handler`` would have: call it (the CLI's counts the press
    and raises, Python's default raises KeyboardInterrupt); an ignored SIGINT stays ignored."""
    if callable(handler):
        handler(signal.SIGINT, frame)
    elif handler != signal.SIG_IGN:
        raise KeyboardInterrupt


#: Ctrl-C presses the CLI's handler has seen in this run (read by _run_streams' wait, without a lock)
_sigint_presses = 0
#: a stream was still running STOP_TIMEOUT_S after Ctrl-C (stuck in a wait): the interpreter must
#: not finalise under it (a daemon thread inside PyTorch then aborts the process)
_streams_left_running = False


def report_interrupt() -> None:
    """Print the one line that says the demo was interrupted (once per process)."""
    say_interrupted("alpyka: interrupted")


def _exit_on_second_interrupt() -> Any:
    """Command line only: the first Ctrl-C raises KeyboardInterrupt (the demo stops its streams,
    then ends killed by SIGINT); a second one, while that is under way (or while the interpreter
    shuts down), ends it at once, killed by SIGINT, with no traceback. Returns the handler it
    replaced (None off the main thread, where nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_sigint(signum: int, frame: Any) -> None:
        global _sigint_presses
        _sigint_presses += 1  # a plain counter: a handler must not take a lock
        if _sigint_presses == 1:
            raise KeyboardInterrupt
        report_interrupt()
        die_by_sigint()

    return signal.signal(signal.SIGINT, on_sigint)


def main(argv: list[str] | None = None) -> int:
    """``alpyka demo``: Ctrl-C stops it promptly, with one line, and the process ends killed by
    SIGINT as Python ends an uncaught Ctrl-C (:func:`portable.cli.end_by_interrupt`; exit status
    130 in a shell, and a shell loop running the demo stops). In an interactive session or off
    the main thread the KeyboardInterrupt goes on to the caller, with the SIGINT handler as it was."""
    global _sigint_presses
    _sigint_presses = 0
    command_started()  # Python's handler first (python -m alpyka_demo.pipeline: portable/_command_start.py)
    previous = _exit_on_second_interrupt()
    ending = False
    try:
        return _main(argv)
    except KeyboardInterrupt:
        report_interrupt()
        if _streams_left_running:  # never finalise under a stream still inside PyTorch
            die_by_sigint()
        ending = end_by_interrupt(None)  # the handler is then the one that ends at a second press
        if ending:
            _end_quickly()
        raise
    finally:
        if previous is not None and not ending:
            signal.signal(signal.SIGINT, previous)


def _end_quickly() -> None:
    """After Ctrl-C the process is on its way out: freeze the heap, so that the interpreter's end
    skips its full garbage collections. With PyTorch, numba and the model loaded they took 1.2 to
    4.5 s after "interrupted" on a busy 2-core machine (faulthandler and py-spy: the main thread in
    ``gc_collect_main`` at shutdown). ``atexit`` hooks still run; objects held only by reference
    cycles end without their finalizers, as when a program is killed."""
    import gc

    gc.disable()
    gc.freeze()


def command(argv: list[str], prog: str = "alpyka demo") -> int:
    """``alpyka demo``: the end-to-end fragment-merging GNN pipeline (see :func:`main`)."""
    return main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="alpyka demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        default=None,
        help="backend to run on (default: the fastest CPU backend for these events, "
        f"measured: {DEMO_BACKEND}; ALPYKA_BACKEND overrides)",
    )
    parser.add_argument("--events", type=int, default=200, help="events to process (default 200)")
    parser.add_argument("--streams", type=int, default=2, help="framework streams, one queue each (default 2)")
    parser.add_argument(
        "--particles", type=int, default=40, help=f"particles per event (default 40, at most {E.MAX_PARTICLES})"
    )
    parser.add_argument(
        "--model",
        choices=["exported", "aot", "jit", "eager"],
        default="exported",
        help="local model flavour: torch.export program (default), AOTInductor, TorchScript (legacy), eager",
    )
    parser.add_argument(
        "--remote",
        default=None,
        metavar="URL",
        help="score edges on a Triton server (host:port, gRPC), started e.g. with "
        "`alpyka serve ~/.cache/alpyka/models/edge_gnn.pt2 --name edge_gnn "
        "--max-batch-size 0`; 'auto' starts a local one",
    )
    parser.add_argument(
        "--remote-pipeline",
        default=None,
        metavar="auto|URL[,URL]",
        help="run edge building + GNN + merging on Triton server(s) as one pipeline "
        "(`alpyka serve alpyka_demo._service:merge_fragments`); the client only "
        "generates fragments; 'auto' starts a local server; several URLs balance "
        "and fail over",
    )
    parser.add_argument(
        "--input",
        default=None,
        metavar="FILE.root",
        help="events from a ROOT file (objects' Px/Py/Pz/E branches, e.g. the CMS sample "
        "uproot-HZZ.root) instead of the generator; needs pip install 'alpyka[data]'",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="run on N local Dask worker processes (each with its own queue and model)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run on the Dask cluster of this scheduler (e.g. tcp://127.0.0.1:8786)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (for logs and pipes)")
    args = parser.parse_args(argv)
    for name in ("events", "streams", "particles"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        E.check_particles(args.particles)
    except pk.ArgumentError as exc:
        parser.error(str(exc))
    backend = args.backend or demo_backend()
    if (args.workers is not None or args.scheduler) and args.remote_pipeline:
        parser.error("--remote-pipeline runs on one process's streams; drop --workers/--scheduler")
    if args.workers is not None or args.scheduler:
        if args.workers is not None and args.workers < 1:
            parser.error("--workers must be at least 1")
        report = run_dask(
            backend, args.events, args.particles, args.model, args.remote, args.input, args.workers or 2, args.scheduler
        )
        print(report.table())
        return 0
    report = run(
        backend,
        args.events,
        args.streams,
        args.particles,
        args.model,
        args.remote,
        progress=not args.no_progress,
        input=args.input,
        remote_pipeline=args.remote_pipeline,
    )
    print(report.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
