"""Shared helpers for the benchmark scripts: the command-line convention, timing with warm-up and
repeats, machine/device/version metadata, the JSON result document, PNG plots and progress bars.

Every ``benchmarks/bench_X.py`` follows one convention (``run_all.py`` relies on it)::

    python benchmarks/bench_X.py [--quick] [--smoke] [--out benchmarks/results]

writes ``<out>/X.json`` and ``<out>/X.png``. The JSON document has the keys of
:data:`DOCUMENT_KEYS`: ``benchmark`` (``"X"``), ``device`` (what ran it, in words), ``machine``
(:func:`machine_info`), ``versions`` (:func:`versions`), ``quick`` (bool), ``results`` (a list of
row dicts, one per measured point) and ``summary`` (the ratios the README shows: either
``{label: number}`` or ``{row label: {column: number}}``). Extra keys are allowed.

Timing (:func:`measure`, :func:`interleaved`) is in ``_timing.py``, the machine's load
(:func:`load_average`, :class:`BusyCores`) in ``_machine_load.py``; both are reached through this
module.

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
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
if str(BENCH_DIR) not in sys.path:  # the helper modules below, also when imported as benchmarks._common
    sys.path.append(str(BENCH_DIR))  # last: a script's bare name never hides an installed module

# timing and the machine's load live in their own modules; the scripts reach them as common.X
from _machine_load import BusyCores, cpu_ticks, load_average, others_cores  # noqa: E402, F401
from _timing import Timing, closed_loop, interleaved, measure, paired_ratio, ratio  # noqa: E402, F401

from backends._host import cpu_name  # noqa: E402 - the CPU's model name, as `alpyka info` shows it
from portable.cli import description  # noqa: E402 - a script's --help description from its docstring

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


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the suite's common flags: ``--quick``, ``--smoke``, ``--out``;
    its description is the first paragraph of ``doc``, the benchmark's docstring."""
    parser = argparse.ArgumentParser(description=description(doc))
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
    """Parse, make ``--smoke`` imply ``--quick`` and create the output directory (:func:`make_out`)."""
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
    args.out = make_out(parser, Path(args.out))
    return args


def make_out(parser: argparse.ArgumentParser, out: Path) -> Path:
    """``out``, made if it is not there; a path that is a file, lies under one or cannot be
    written is argparse's one line naming ``--out``, before anything runs (it was
    FileExistsError's traceback, or a benchmark's minutes lost at its first write)."""
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file; give a directory for the results")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {out}: cannot make the results directory ({exc.strerror or exc}); give another")
    if not os.access(out, os.W_OK | os.X_OK):
        parser.error(f"--out {out}: this user cannot write there; give a directory it can write")
    return out


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
