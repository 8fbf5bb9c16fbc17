"""Run the whole benchmark suite and write ``SUMMARY.md``: every ``benchmarks/bench_*.py`` runs in
its own process (``--quick`` when the suite is quick) with a time limit; a failing or hanging
benchmark is recorded and the suite goes on.

    python benchmarks/run_all.py [--quick] [--only models,kernels] [--timeout S] [--out benchmarks/results]

Writes ``<out>/suite.json`` (what ran, how long, and how it ended), keeps each benchmark's
``X.json``/``X.png`` and its log under ``<out>/logs/``, then ``<out>/SUMMARY.md`` from every
document in ``<out>`` (``summary.py``; the README's table too when ``<out>`` is
benchmarks/results). Exit status 1 when any benchmark failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import summary

QUICK_TIMEOUT_S = 300.0
FULL_TIMEOUT_S = 3600.0


@dataclass
class BenchRun:
    """How one benchmark ran."""

    name: str
    script: str
    status: str = "not run"  # ok | failed | timeout | no result | bad result
    returncode: int | None = None
    wall_s: float = 0.0
    detail: str = ""
    json: str | None = None
    png: str | None = None
    log: str | None = None
    document: dict[str, Any] | None = field(default=None, repr=False)


def discover(bench_dir: Path) -> dict[str, Path]:
    """``{name: script}`` for every ``bench_<name>.py`` in ``bench_dir``, sorted by name."""
    return {p.stem[len("bench_") :]: p for p in sorted(bench_dir.glob("bench_*.py"))}


def supports_smoke(script: Path) -> bool:
    """Whether a script takes ``--smoke`` (it builds its parser with ``_common.make_parser`` or names the flag)."""
    try:
        text = script.read_text(encoding="utf-8")
    except OSError:
        return False
    return "--smoke" in text or "make_parser(" in text


def _tail(path: Path, lines: int = 3) -> str:
    """The end of a log: a traceback's final exception line when there is one, else the last lines."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")  # keep the carriage returns
    except OSError:
        return ""
    marker = "Traceback (most recent call last)"
    if marker in text:  # the exception line ending the last traceback
        after = [ln.split("\r")[-1].rstrip() for ln in text.rsplit(marker, 1)[1].split("\n")[1:]]
        last = [ln for ln in after if ln.strip() and not ln.startswith((" ", "\t")) and not re.search(r"\d+%\|", ln)]
        if last:
            return last[0][-600:]
    # a line as a terminal shows it (after its last carriage return); progress bars are dropped
    shown = (ln.split("\r")[-1].rstrip() for ln in text.split("\n"))
    kept = [ln for ln in shown if ln.strip() and not re.search(r"\d+%\|", ln)]
    return " | ".join(kept[-lines:])[-600:]


def run_one(name: str, script: Path, out: Path, quick: bool, timeout_s: float, extra: Sequence[str] = ()) -> BenchRun:
    """Run one benchmark script as a subprocess and check the JSON it wrote."""
    run = BenchRun(name=name, script=str(script))
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{name}.log"
    run.log = str(log_path)
    json_path = out / f"{name}.json"
    cmd = [sys.executable, str(script), "--out", str(out), *(["--quick"] if quick else []), *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(common.REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("ALPYKA_NO_PROGRESS", "1")  # the suite shows its own bar; logs stay readable
    env.setdefault("MPLBACKEND", "Agg")
    start = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(common.REPO_ROOT), env=env, start_new_session=True
        )
        try:
            run.returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            run.wall_s = time.time() - start
            run.status, run.detail = "timeout", f"still running after {timeout_s:.0f} s; stopped"
            return run
    run.wall_s = time.time() - start
    if run.returncode != 0:
        run.status, run.detail = "failed", f"exit status {run.returncode}: {_tail(log_path)}"
        return run
    if not json_path.exists() or json_path.stat().st_mtime < start - 1:
        run.status, run.detail = "no result", f"exited 0 but wrote no fresh {json_path.name}"
        return run
    try:
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        run.status, run.detail = "bad result", f"{json_path.name} is not valid JSON: {exc}"
        return run
    problems = common.check_document(doc, name)
    if problems:
        run.status, run.detail = "bad result", f"{json_path.name}: " + "; ".join(problems)
        return run
    run.status, run.json, run.document = "ok", str(json_path), doc
    png = out / f"{name}.png"
    if png.exists() and png.stat().st_mtime >= start - 1:
        run.png = str(png)
    else:
        run.detail = f"no fresh {png.name}"
    return run


def _stop(proc: subprocess.Popen) -> None:
    """Stop a benchmark that overran: its process group (it started it), then it."""
    import signal

    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ----------------------------------------------------------------------------- main


def seconds(text: str) -> float:
    """``--timeout``: a number of seconds above 0 (``--timeout 0`` was taken for the default,
    ``--timeout -5`` stopped every benchmark at once and reported it as a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds above 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds above 0, got {text}")
    return value


def build_parser():
    parser = common.make_parser("Run every benchmarks/bench_*.py and write SUMMARY.md")
    parser.prog = os.environ.get("ALPYKA_BENCH_PROG") or parser.prog  # `alpyka bench` runs it
    parser.add_argument("--only", default="", help="comma-separated benchmark names (e.g. models,kernels)")
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        help=f"seconds per benchmark (default {QUICK_TIMEOUT_S:.0f} quick, {FULL_TIMEOUT_S:.0f} full)",
    )
    parser.add_argument("--bench-dir", type=Path, default=common.BENCH_DIR, help="where the bench_*.py scripts are")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = common.parse_args(parser, argv)
    found = discover(args.bench_dir)
    if args.list:
        print("\n".join(f"{n}\t{p}" for n, p in found.items()))
        return 0
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in found]
        if unknown:
            parser.error(f"unknown benchmark(s) {unknown}; available: {', '.join(found) or 'none'}")
        found = {n: found[n] for n in wanted}
    if not found:
        print(f"error: no bench_*.py scripts in {args.bench_dir}", file=sys.stderr)
        return 2
    timeout_s = args.timeout or (QUICK_TIMEOUT_S if args.quick else FULL_TIMEOUT_S)
    runs: list[BenchRun] = []
    bar = common.progress(list(found.items()), total=len(found), desc="benchmarks", disable=args.no_progress)
    for name, script in bar:
        bar.set_postfix_str(name)
        extra = ["--smoke"] if args.smoke and supports_smoke(script) else []
        run = run_one(name, script, args.out, args.quick, timeout_s, extra)
        runs.append(run)
        print(f"{name:<12} {run.status:<10} {run.wall_s:7.1f} s  {run.detail}", flush=True)
    # SUMMARY.md is made from every document in the output folder (this run's and earlier ones,
    # each with its machine and date); the README's table too when that folder is the committed one
    readme = summary.README if args.out.resolve() == common.DEFAULT_OUT.resolve() else None
    summary.write(args.out, readme, strict=False)
    path = args.out / "SUMMARY.md"
    suite = common.result_document(
        "suite",
        device="see each benchmark",
        quick=bool(args.quick),
        results=[{k: v for k, v in asdict(r).items() if k != "document"} for r in runs],
        summary={r.name: r.status for r in runs},
        timeout_s=timeout_s,
    )
    common.write_json(args.out, "suite", suite)
    failed = [r.name for r in runs if r.status != "ok"]
    print(f"wrote {path}" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
