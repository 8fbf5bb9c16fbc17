"""Shared helpers for the benchmark scripts: the command-line convention, timing with warm-up and
repeats, machine/device/version metadata, the JSON result document, PNG plots and progress bars.

Every ``benchmarks/bench_X.py`` follows one convention (``run_all.py`` relies on it)::

    python benchmarks/bench_X.py [--quick] [--smoke] [--out benchmarks/results]

writes ``<out>/X.json`` and ``<out>/X.png``. The JSON document has the keys of
:data:`DOCUMENT_KEYS`: ``benchmark`` (``"X"``), ``device`` (what ran it, in words), ``machine``
(:func:`machine_info`), ``versions`` (:func:`versions`), ``quick`` (bool), ``results`` (a list of
row dicts, one per measured point) and ``summary`` (the ratios the README shows: either
``{label: number}`` or ``{row label: {column: number}}``). Extra keys are allowed.

``--quick`` finishes well under a minute; ``--smoke`` (optional, implies quick) is the tiniest
run that still exercises every code path, for tests. Timings never decide a test.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results"
DOCUMENT_KEYS = ("benchmark", "device", "machine", "versions", "quick", "results", "summary")
DEFAULT_PACKAGES = (
    "alpyka",
    "numpy",
    "numba",
    "torch",
    "onnxruntime",
    "pyopencl",
    "cupy-cuda13x",
    "warp-lang",
    "tritonclient",
    "nvidia-pytriton",
)

if str(REPO_ROOT) not in sys.path:  # `python benchmarks/bench_X.py` from a source checkout
    sys.path.insert(0, str(REPO_ROOT))

from backends._host import cpu_name  # noqa: E402 - the CPU's model name, as `alpyka info` shows it

T = TypeVar("T")

# ----------------------------------------------------------------------------- command line
#: comma-separated alpyka backends a benchmark may measure (unset or empty: every available one);
#: the test suite's benchmark smoke runs pass their --backends selection through it
BACKENDS_ENV = "ALPYKA_BACKENDS"


def backends(candidates: Iterable[str] | None = None) -> list[str]:
    """The available alpyka backends among ``candidates`` (every available one when None), in
    that order, less those that ``$ALPYKA_BACKENDS`` leaves out."""
    import portable as pk

    available = pk.available_backends()
    chosen = {n.strip() for n in os.environ.get(BACKENDS_ENV, "").split(",") if n.strip()}
    return [
        b for b in (available if candidates is None else candidates) if b in available and (not chosen or b in chosen)
    ]


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory, removed when the benchmark's process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def server_seconds(read: Callable[[], Any], before: Any, requests: int, timeout: float = 10.0) -> tuple[float, float]:
    """Seconds per request that the server spent computing (input, inference, output) and queued,
    from the Triton counters ``read().minus(before)`` once they count ``requests`` requests: Triton
    counts a request after releasing it, which can come after its response reached the client."""
    deadline = time.monotonic() + timeout
    srv = read().minus(before)
    while srv.requests < requests and time.monotonic() < deadline:
        time.sleep(0.05)
        srv = read().minus(before)
    if srv.requests == 0:
        raise RuntimeError(f"the server counted none of the {requests} requests within {timeout} s")
    compute = srv.compute_input_ns + srv.compute_infer_ns + srv.compute_output_ns
    return compute / srv.requests / 1e9, srv.queue_ns / srv.requests / 1e9


def make_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the suite's common flags: ``--quick``, ``--smoke``, ``--out``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (well under a minute)")
    parser.add_argument(
        "--smoke", action="store_true", help="the tiniest run that exercises every path (for tests; implies --quick)"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"directory for the JSON and PNG results (default: {DEFAULT_OUT})"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse, make ``--smoke`` imply ``--quick`` and create the output directory."""
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def mode(args: argparse.Namespace) -> str:
    """``"smoke"``, ``"quick"`` or ``"full"``."""
    return "smoke" if getattr(args, "smoke", False) else ("quick" if args.quick else "full")


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """``--seconds`` (per point) and ``--clients`` (the client counts) of the serving benchmarks."""
    parser.add_argument("--seconds", type=float, default=None, help="seconds per point")
    parser.add_argument("--clients", type=int, nargs="*", default=None)


def load_plan(
    args: argparse.Namespace, clients: Mapping[str, list[int]], seconds: Mapping[str, float]
) -> tuple[list[int], float]:
    """The client counts and seconds per point: the command line's, else this mode's default."""
    return args.clients or clients[mode(args)], args.seconds or seconds[mode(args)]


# ----------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Wall-clock times (seconds) of repeated calls, after warm-up."""

    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.times) if len(self.times) > 1 else 0.0

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100), linear interpolation."""
        s = sorted(self.times)
        pos = (len(s) - 1) * q / 100.0
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    def as_dict(self, prefix: str = "time", scale: float = 1e3, unit: str = "ms") -> dict[str, float | int]:
        """``{prefix_median_ms, prefix_mean_ms, prefix_min_ms, prefix_p90_ms, prefix_stdev_ms, repeats}``."""
        return {
            f"{prefix}_median_{unit}": self.median * scale,
            f"{prefix}_mean_{unit}": self.mean * scale,
            f"{prefix}_min_{unit}": self.min * scale,
            f"{prefix}_p90_{unit}": self.percentile(90) * scale,
            f"{prefix}_stdev_{unit}": self.stdev * scale,
            "repeats": len(self.times),
        }


def measure(
    fn: Callable[[], Any],
    *,
    warmup: int = 1,
    repeats: int = 5,
    min_repeats: int = 1,
    budget_s: float | None = None,
    sync: Callable[[], Any] | None = None,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then time up to ``repeats`` calls (each followed by
    ``sync`` when given, e.g. a queue or stream wait); with ``budget_s`` stop early once that
    much time was spent and at least ``min_repeats`` calls were timed."""
    if repeats < 1 or min_repeats < 1:
        raise ValueError(f"repeats and min_repeats must be >= 1, got {repeats} and {min_repeats}")
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
    timing = Timing()
    spent = 0.0
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        dt = time.perf_counter() - t0
        timing.times.append(dt)
        spent += dt
        if budget_s is not None and i + 1 >= min_repeats and spent >= budget_s:
            break
    return timing


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    rounds: int,
    *,
    calls: int = 1,
    warmup: int = 1,
    min_rounds: int = 1,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, Timing], dict[str, str]]:
    """Time every function of ``fns`` round-robin, each round in a new order (a seeded shuffle),
    so that load from other processes hits all of them alike, and so does what a call leaves
    behind for the next one (evicted caches, a core clocked down after wide vector code): in a
    rotated order every function always followed the same one, which biased some by 10-30%
    (AOTInductor after ONNX Runtime, measured). ``warmup`` untimed calls each, then up to
    ``rounds`` rounds of ``calls`` calls per function (a sample is the time per call); with
    ``budget_s`` stop once that much time per function was spent and ``min_rounds`` were done.
    A function that raises is dropped from the rotation: ``({name: Timing}, {name: error})``.
    ``clock``: what a round is timed with (``time.thread_time``: the calling thread's CPU time,
    for work that runs on it alone, immune to other processes taking the core)."""
    if rounds < 1 or min_rounds < 1 or calls < 1:
        raise ValueError(f"rounds, min_rounds and calls must be >= 1, got {rounds}, {min_rounds}, {calls}")
    errors: dict[str, str] = {}
    live = dict(fns)

    def call(name: str, fn: Callable[[], Any], times: int) -> float | None:
        t0 = clock()
        try:
            for _ in range(times):
                fn()
        except Exception as exc:  # one failing contender must not lose the others
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
            live.pop(name, None)
            return None
        return clock() - t0

    for _ in range(warmup):
        for name, fn in list(live.items()):
            call(name, fn, 1)
    timings = {name: Timing() for name in live}
    spent = 0.0
    order = random.Random(0x5EED)
    for r in range(rounds):
        names = list(live)
        if not names:
            break
        order.shuffle(names)
        for name in names:
            dt = call(name, live[name], calls)
            if dt is not None:
                timings[name].times.append(dt / calls)
                spent += dt
        if budget_s is not None and r + 1 >= min_rounds and spent >= budget_s * len(names):
            break
    return {k: t for k, t in timings.items() if k in live}, errors


def closed_loop(n: int, seconds: float, make_step: Callable[[int], Callable[[], int]]) -> float:
    """Events per second of ``n`` client threads for ``seconds``: thread ``i`` makes its step
    (``make_step(i)``, before the clock starts) and calls it, each call returning the events it
    did, until the time is up; a client's error is raised here."""
    counts = [0] * n
    errors: list[BaseException] = []
    start, stop = threading.Barrier(n + 1), threading.Event()

    def loop(i: int) -> None:
        try:
            step = make_step(i)
        except BaseException as exc:
            errors.append(exc)
            start.abort()
            return
        start.wait()
        try:
            while not stop.is_set():
                counts[i] += step()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        raise errors[0] from None
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def paired_ratio(numerator: Timing, denominator: Timing) -> float | None:
    """The median over rounds of ``numerator / denominator`` for two contenders of one
    :func:`interleaved` run (each round's pair saw the same load)."""
    pairs = [a / b for a, b in zip(numerator.times, denominator.times) if b > 0]
    return statistics.median(pairs) if pairs else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


# ----------------------------------------------------------------------------- load


def cpu_ticks() -> tuple[float, int, int, float] | None:
    """``(wall s, all jiffies, idle jiffies, CPU s of this process and its waited-for children)``
    now (/proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    t = os.times()
    return time.perf_counter(), sum(ticks), ticks[3] + ticks[4], t.user + t.system + t.children_user + t.children_system


def others_cores(before: tuple | None, after: tuple | None, cores: int | None = None) -> float | None:
    """How many of the machine's ``cores`` (all of them by default) other processes kept busy on
    average between two :func:`cpu_ticks` (all busy time less this process's and its children's):
    what a parallel runtime measured then could not have."""
    cores = cores or os.cpu_count() or 1
    if before is None or after is None or after[1] <= before[1] or after[0] <= before[0]:
        return None
    wall = after[0] - before[0]
    busy = cores * wall * (1 - (after[2] - before[2]) / (after[1] - before[1]))
    return max(0.0, (busy - (after[3] - before[3])) / wall)


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ----------------------------------------------------------------------------- busy cores
#: what a process that keeps one core busy runs
_SPIN = "while True: pass"


class BusyCores:
    """``with BusyCores(n) as busy:`` ``n`` processes spinning on the CPU (busy cores, as a machine
    where every core runs work), started here and killed by their pid at the end; ``busy.load()``:
    the load average and how many cores processes other than this one kept busy since the start
    (the spinners and anyone else, from ``/proc/stat``; None where it is not)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._procs: list[Any] = []
        self._ticks: tuple | None = None

    def __enter__(self) -> BusyCores:
        import subprocess

        self._procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(self.n)]
        time.sleep(0.3 if self.n else 0.0)  # they run before the clock starts
        self._ticks = cpu_ticks()
        return self

    def load(self) -> dict[str, Any]:
        """``{"busy_processes", "load_average", "cores_busy_elsewhere"}`` now."""
        return {
            "busy_processes": self.n,
            "load_average": load_average(),
            "cores_busy_elsewhere": others_cores(self._ticks, cpu_ticks(), os.cpu_count() or 1),
        }

    def __exit__(self, *exc: Any) -> None:
        for p in self._procs:
            p.kill()
            p.wait()
        self._procs = []


# ----------------------------------------------------------------------------- metadata


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """The machine the benchmark ran on (no user or host names)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def versions(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``packages`` (None for those not installed); nothing is imported."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------- result document


def _finite(value: Any) -> Any:
    """NaN and infinities become None (JSON has neither); containers are walked."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", None) == 0:
        return _finite(value.item())  # numpy / torch scalars
    return value


def result_document(
    benchmark: str,
    device: str,
    quick: bool,
    results: list[dict[str, Any]],
    summary: Mapping[str, Any],
    packages: Iterable[str] = DEFAULT_PACKAGES,
    **extra: Any,
) -> dict[str, Any]:
    """The suite's JSON document (keys: :data:`DOCUMENT_KEYS`, then ``extra``)."""
    doc: dict[str, Any] = {
        "benchmark": benchmark,
        "device": device,
        "machine": machine_info(),
        "versions": versions(packages),
        "quick": bool(quick),
        "results": list(results),
        "summary": dict(summary),
    }
    for key, value in extra.items():
        if key in doc:
            raise ValueError(f"extra key {key!r} would overwrite a document key")
        doc[key] = value
    return _finite(doc)


#: the keys that name a row's contender (the backend, variant or implementation it measured), the
#: first one present wins; a row that could not run must have one (:func:`check_document`)
CONTENDER_KEYS = ("variant", "backend", "contender", "name")
#: keys that qualify the contender's name where present (which model, host memory, section)
QUALIFIER_KEYS = ("model", "host", "section")


def row_name(row: Mapping[str, Any]) -> str | None:
    """The contender a result row measured, with its qualifiers: ``"alpyka_aot_pc (particlenet)"``,
    ``"opencl (pinned, transfer)"``; None when the row names no contender."""
    name = next((row[k] for k in CONTENDER_KEYS if row.get(k) not in (None, "")), None)
    if name is None:
        return None
    qualifiers = [str(row[k]) for k in QUALIFIER_KEYS if row.get(k) not in (None, "")]
    return f"{name} ({', '.join(qualifiers)})" if qualifiers else str(name)


def check_document(doc: Any, name: str | None = None) -> list[str]:
    """What is wrong with a result document (an empty list when it follows the convention)."""
    if not isinstance(doc, dict):
        return [f"the document is a {type(doc).__name__}, not an object"]
    problems = [f"missing key {k!r}" for k in DOCUMENT_KEYS if k not in doc]
    if problems:
        return problems
    if name is not None and doc["benchmark"] != name:
        problems.append(f"benchmark is {doc['benchmark']!r}, expected {name!r}")
    if not isinstance(doc["results"], list):
        problems.append("results is not a list")
    elif not all(isinstance(r, dict) for r in doc["results"]):
        problems.append("results holds something other than row objects")
    else:
        unnamed = [
            i for i, r in enumerate(doc["results"]) if r.get("status") in ("skipped", "failed") and row_name(r) is None
        ]
        if unnamed:
            problems.append(f"rows {unnamed} did not run and name no contender (one of {', '.join(CONTENDER_KEYS)})")
    if not isinstance(doc["summary"], dict):
        problems.append("summary is not an object")
    if not isinstance(doc["quick"], bool):
        problems.append("quick is not a boolean")
    return problems


def write_json(out_dir: Path, name: str, document: Mapping[str, Any]) -> Path:
    """Write ``<out_dir>/<name>.json`` atomically (strict JSON: no NaN) and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_finite(document), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------- plots and progress


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out_dir: Path, name: str, tight: bool = True) -> Path:
    """Save ``fig`` as ``<out_dir>/<name>.png`` and close it (laid out tight unless the caller did)."""
    path = Path(out_dir) / f"{name}.png"
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


class _PlainProgress:
    """Iteration without a bar (tqdm missing or disabled), with tqdm's ``set_postfix_str``."""

    def __init__(self, iterable: Iterable[T]) -> None:
        self._iterable = iterable

    def __iter__(self) -> Iterator[T]:
        return iter(self._iterable)

    def set_postfix_str(self, text: str) -> None:
        pass


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", disable: bool = False) -> Any:
    """An iterable with a tqdm progress bar on stderr (``.set_postfix_str(text)`` shows a note);
    plain iteration when tqdm is missing, ``disable`` is set or ALPYKA_NO_PROGRESS is set."""
    if disable or os.environ.get("ALPYKA_NO_PROGRESS"):
        return _PlainProgress(iterable)
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(iterable)
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def print_summary(summary: Mapping[str, Any], width: int, skipped: Mapping[str, str] | None = None) -> None:
    """One line per summary entry that is a dict (``name  key: value  ...``), then the skipped."""
    for name, v in summary.items():
        if isinstance(v, dict):
            print(f"{name:<{width}} " + "  ".join(f"{k}: {format_number(val)}" for k, val in v.items()))
    for what, why in (skipped or {}).items():
        print(f"skipped {what}: {why}")


def format_number(value: Any) -> str:
    """Numbers for tables: 3 significant digits, thousands without exponent; None as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)
