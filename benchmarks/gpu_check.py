"""A prepared check for a lent GPU: what only a GPU can show, in one command.

    PYTHONPATH=. timeout -k 10 480 python benchmarks/gpu_check.py          # on the GPU: <= 8 minutes
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check          # on a CPU: the emulator

Checks, in this order, each a function returning a row (``status`` passed / failed / skipped /
error, a ``reason`` where not passed, and its figures):

- ``warps``: ballots, votes, a broadcast shuffle and ``pk.tools.block_sum`` right after loops of
  uneven trip counts, blocks of 48/96/100/1000/1024 threads, exact against a host model
  (alpyka_testing/warp_cases.py), then alpaka's own warp tests (activemask, all, any, ballot, shfl:
  part of the warp returns first), in their style match_any, match_all and shfl with a width, and
  the explicit-mask forms (alpyka_testing/alpaka_warp_cases.py);
- ``handoffs``: the stream hand-offs at the torch and DLPack boundaries (functions of
  benchmarks/gpu_checks/, see :func:`check_handoffs`; "not present" when that package is absent);
- ``philox``: Philox normals and raw words at 1024 threads per block against the same kernel on
  cpu_serial (words bit for bit, normals within the last bits of log/cos), and their moments;
- ``bandwidth``: a copy and a triad kernel streaming 1 GiB arrays against cupy's device-to-device
  copy of the same bytes (GB/s; the PNG);
- ``clustering``: benchmarks/bench_clustering.py in its full mode (its own JSON and PNG next to this
  one);
- ``sanitizer``: compute-sanitizer's memcheck, racecheck, synccheck and initcheck on the examples
  and on ``pk.tools`` (``--tools-driver``), when compute-sanitizer is installed (skipped, saying
  so, otherwise).

The whole run keeps to ``--budget`` seconds (default 450): a check that would start with too
little time left is skipped with the reason, a failing check never stops the others, and the
document is rewritten after every check, so even a run killed by ``timeout`` leaves what it
measured in ``<out>/<device>/gpu_check.json`` (``<device>``: e.g. ``nvidia-h100-80gb-hbm3``; under
``--dry-run`` ``emulated-cuda``). ``--dry-run`` runs every check at tiny sizes on the GPU emulator
(``ALPYKA_EMULATE=cuda``), as tests/benchmarks/test_gpu_check_smoke.py does. Exit status: 0 when
no check failed or erred, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common
import numpy as np

import portable as pk
from portable._registry import emulate, emulated

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
WARP_BLOCKS = (48, 96, 100, 1000, 1024)
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
GIB = 1 << 30


class Context:
    """What every check gets: the queue, the mode and the clock."""

    def __init__(self, args: argparse.Namespace, queue: Any, out_dir: Path, deadline: float) -> None:
        self.args, self.queue, self.out_dir, self.deadline = args, queue, out_dir, deadline
        self.backend, self.dry = args.backend, args.dry_run
        self.device = queue.device

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.deadline - time.monotonic()

    def child_env(self) -> dict[str, str]:
        """The environment of the scripts this one runs (the checkout first on the path)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["ALPYKA_NO_PROGRESS"] = "1"
        return env


# ----------------------------------------------------------------------------- in-process checks
def check_warps(ctx: Context) -> dict:
    from alpyka_testing import alpaka_warp_cases, warp_cases

    sizes = (48, 100) if ctx.dry else WARP_BLOCKS
    rounds = 1 if ctx.dry else 3  # a GPU schedules lanes differently from run to run
    runs = [warp_cases.run(ctx.queue, t, blocks=2 if ctx.dry else 6, seed=32 + r) for t in sizes for r in range(rounds)]
    bad = [r for r in runs if not r["passed"]]
    alpaka = [alpaka_warp_cases.run(ctx.queue, name) for name in alpaka_warp_cases.CASES for _ in range(rounds)]
    got, want = alpaka_warp_cases.run_masked_halves(ctx.queue)
    alpaka.append({"case": "masked_halves", "fails": int((got != want).any(axis=1).sum())})
    bad += [r for r in alpaka if r["fails"]]
    return {
        "status": "failed" if bad else "passed",
        "block_sizes": list(sizes),
        "rounds": rounds,
        "warp": runs[0]["warp"],
        "alpaka_cases": [r["case"] for r in alpaka],
        "failures": bad,
        **({"reason": f"{len(bad)} of {len(runs) + len(alpaka)} runs differ from the expected answers"} if bad else {}),
    }


def check_handoffs(ctx: Context) -> dict:
    """The stream hand-off checks of benchmarks/gpu_checks/ (memory handed to torch and DLPack is
    ordered after the queue): the package's ``CHECKS``, a ``{name: function(queue, dry_run) -> dict}``
    whose dicts carry a boolean ``passed``; "not present" while the package is absent."""
    try:
        import gpu_checks  # benchmarks/gpu_checks/, on sys.path with this script
    except ImportError as exc:
        return {"status": "skipped", "reason": f"not present: benchmarks/gpu_checks ({exc})"}
    checks: dict[str, Callable[..., dict]] = dict(getattr(gpu_checks, "CHECKS", {}))
    if not checks:
        return {"status": "skipped", "reason": "not present: benchmarks/gpu_checks defines no CHECKS"}
    parts = {}
    for name, fn in checks.items():
        try:
            parts[name] = dict(fn(ctx.queue, ctx.dry))
        except Exception as exc:
            parts[name] = {"passed": False, "error": _error(exc)}
    bad = sorted(n for n, p in parts.items() if not p.get("passed"))
    return {
        "status": "failed" if bad else "passed",
        "parts": parts,
        **({"reason": f"failed: {', '.join(bad)}"} if bad else {}),
    }


def check_philox(ctx: Context) -> dict:
    from alpyka_testing.kernels import download, upload

    threads = 1024
    blocks = 2 if ctx.dry else 1024
    n = blocks * threads
    seed = 20240917

    def draw(queue, wd):
        outs = [upload(queue, np.zeros(n, t)) for t in (np.uint32, np.float64, np.float32)]
        pk.exec(queue, wd, _philox_draws, *outs, seed, n)
        return [download(queue, o) for o in outs]

    got = draw(ctx.queue, pk.WorkDiv(blocks, threads, 1))
    ref_q = pk.Queue(pk.device("cpu_serial"))
    ref = draw(ref_q, pk.WorkDiv(blocks, 1, threads))
    words_equal = int((got[0] == ref[0]).sum())
    d64 = float(np.abs(got[1] - ref[1]).max())
    d32 = float(np.abs(got[2] - ref[2]).max())
    mean, var = float(got[1].mean()), float(got[1].var())
    moments_ok = abs(mean) < 5 / np.sqrt(n) and abs(var - 1) < 5 * np.sqrt(2 / n)
    ok = words_equal == n and d64 <= 1e-12 and d32 <= 1e-5 and moments_ok
    row = {
        "status": "passed" if ok else "failed",
        "threads_per_block": threads,
        "n": n,
        "u32_equal_to_cpu_serial": words_equal,
        "max_abs_diff_f64": d64,
        "max_abs_diff_f32": d32,
        "mean": mean,
        "variance": var,
    }
    if not ok:
        row["reason"] = "Philox draws differ from cpu_serial's or their moments are off"
    return row


def check_bandwidth(ctx: Context) -> dict:
    """GB/s (bytes read + written per second) of a copy and a triad kernel against cupy's
    device-to-device copy; passes when the results are right and (on a GPU) the copy kernel
    reaches 80% of cupy's copy."""

    nbytes = (1 << 20) if ctx.dry else GIB
    n = nbytes // 4
    q = ctx.queue
    a, b, c = (pk.Buffer(ctx.device, n, np.float32) for _ in range(3))
    host = np.arange(n, dtype=np.float32) % 1000
    pk.memcpy(q, a, host)
    pk.memcpy(q, b, host)
    wd = pk.WorkDiv((n + 255) // 256, 256, 1)
    repeats = 3 if ctx.dry else 20
    t_copy = common.measure(lambda: pk.exec(q, wd, _stream_copy, c, a, n), warmup=1, repeats=repeats, sync=q.wait)
    ok_copy = _sample_equal(q, c, host)
    t_triad = common.measure(
        lambda: pk.exec(q, wd, _stream_triad, c, a, b, np.float32(2), n), warmup=1, repeats=repeats, sync=q.wait
    )
    ok_triad = _sample_equal(q, c, host * np.float32(3))
    cp = pk.get_backend(ctx.backend).cupy
    src, dst = cp.zeros(n, np.float32), cp.empty(n, np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    d2d = 3  # cudaMemcpyDeviceToDevice
    t_cupy = common.measure(
        lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, d2d, stream.ptr),
        warmup=1,
        repeats=repeats,
        sync=stream.synchronize,
    )
    gbps = {
        "alpyka copy": 2 * nbytes / t_copy.median / 1e9,
        "alpyka triad": 3 * nbytes / t_triad.median / 1e9,
        "cupy D2D copy": 2 * nbytes / t_cupy.median / 1e9,
    }
    ratio = gbps["alpyka copy"] / gbps["cupy D2D copy"]
    ok = ok_copy and ok_triad and (ctx.dry or ratio >= 0.8)
    row = {
        "status": "passed" if ok else "failed",
        "bytes": nbytes,
        "GBps": gbps,
        "copy_vs_cupy": ratio,
        "results_right": ok_copy and ok_triad,
        "repeats": repeats,
    }
    if not ok:
        row["reason"] = "wrong results" if not (ok_copy and ok_triad) else f"copy at {ratio:.2f} of cupy's (< 0.8)"
    return row


def _sample_equal(q, buf, want) -> bool:
    got = np.empty(buf.shape, buf.dtype)
    pk.memcpy(q, got, buf)
    q.wait()
    idx = np.unique(np.linspace(0, want.size - 1, 4097).astype(np.int64))
    return bool((got[idx] == want[idx]).all())


# ----------------------------------------------------------------------------- child processes
def check_clustering(ctx: Context) -> dict:
    mode = ["--smoke"] if ctx.dry else []
    env = ctx.child_env()
    if ctx.dry:
        env["ALPYKA_BACKENDS"] = ctx.backend
    cmd = [sys.executable, str(BENCH_DIR / "bench_clustering.py"), *mode, "--no-progress", "--out", str(ctx.out_dir)]
    run = _run(cmd, env, min(ctx.left() - 5, 180))
    row = {
        "status": "passed" if run["rc"] == 0 else "failed",
        "mode": "smoke" if ctx.dry else "full",
        "document": str(ctx.out_dir / "clustering.json"),
        **run,
    }
    if run["rc"] != 0:
        row["reason"] = "timed out" if run["timed_out"] else f"exit status {run['rc']}"
    else:
        import json

        doc = json.loads((ctx.out_dir / "clustering.json").read_text())
        row["summary"] = doc.get("summary")
        skipped = [r for r in doc["results"] if r.get("status") == "skipped"]
        if any(r.get("contender") == ctx.backend for r in skipped):
            row.update(status="failed", reason=f"{ctx.backend} was skipped: {skipped}")
    return row


def sanitizer_path(args: argparse.Namespace) -> str | None:
    """compute-sanitizer: ``--sanitizer``, else on PATH, else in the CUDA toolkit's usual places."""
    if args.sanitizer:
        return args.sanitizer
    found = shutil.which("compute-sanitizer")
    for candidate in (found, "/usr/local/cuda/bin/compute-sanitizer", "/opt/cuda/bin/compute-sanitizer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def sanitizer_targets(ctx: Context) -> dict[str, list[str]]:
    """What compute-sanitizer runs: pk.tools first (the driver below), then the examples."""
    py, b = sys.executable, ctx.backend
    modules = "4" if ctx.dry else "40"
    targets = {
        "pk.tools": [py, str(BENCH_DIR / "gpu_check.py"), "--tools-driver", "--backend", b],
        "pixel_clustering": [py, str(REPO_ROOT / "examples/pixel_clustering.py"), b, "--modules", modules, "--check"],
        "minimal_kernel": [py, str(REPO_ROOT / "examples/minimal_kernel.py"), b],
    }
    return {"pk.tools": targets["pk.tools"]} if ctx.dry else targets


def check_sanitizer(ctx: Context) -> dict:
    tool = sanitizer_path(ctx.args)
    if tool is None:
        return {
            "status": "skipped",
            "reason": "compute-sanitizer is not installed (not on PATH, not in "
            "/usr/local/cuda/bin; --sanitizer PATH names one)",
        }
    runs, not_run = [], []
    for target, cmd in sanitizer_targets(ctx).items():
        for which in SANITIZER_TOOLS:
            if ctx.left() < 20:
                not_run.append(f"{which} on {target}")
                continue
            full = [tool, "--tool", which, "--error-exitcode", "9", "--print-limit", "20", *cmd]
            run = _run(full, ctx.child_env(), min(ctx.left() - 10, 90))
            errors = re.findall(r"ERROR SUMMARY: (\d+) error", run["output_tail"])
            run.update(tool=which, target=target, errors=int(errors[-1]) if errors else None)
            runs.append(run)
    bad = [f"{r['tool']} on {r['target']}" for r in runs if r["rc"] != 0 or r["errors"]]
    row = {"status": "failed" if bad else "passed", "sanitizer": tool, "runs": runs}
    if not_run:
        row["not_run"] = not_run
        row["reason"] = f"time budget: {len(not_run)} runs left out"
    if bad:
        row["reason"] = f"errors or a failed run: {', '.join(bad)}"
    return row


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``cmd`` (from the repository root, in a session of its own) with a time limit: rc,
    seconds, the output's tail. On timeout the whole session is killed: compute-sanitizer's
    Python child with it, so nothing is left on the GPU."""
    t0 = time.monotonic()
    p = subprocess.Popen(
        cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = p.communicate(timeout=max(timeout, 1))
        rc, timed_out = p.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc, timed_out = 124, True
    return {
        "command": " ".join(Path(c).name if i < 2 else c for i, c in enumerate(cmd)),
        "rc": rc,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - t0, 1),
        "output_tail": (out or "")[-3000:],
    }


def tools_driver(backend: str) -> int:
    """``--tools-driver``: every ``pk.tools`` call at small sizes on ``backend``, checked against
    numpy (what compute-sanitizer watches); exit status 1 on a wrong answer."""
    from alpyka_testing import warp_cases
    from alpyka_testing.kernels import download, upload

    q = pk.Queue(pk.device(backend))
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 50, 3000).astype(np.int32)
    wrong = []
    if not warp_cases.run(q, 100, blocks=2)["passed"]:  # block_sum after divergent loops
        wrong.append("block_sum / warps")
    src = upload(q, keys.astype(np.int64))
    dst = pk.Buffer(q.device, keys.size, np.int64)
    pk.tools.prefix_scan(q, src, dst)
    if not (download(q, dst) == np.cumsum(keys)).all():
        wrong.append("prefix_scan")
    offsets, content = pk.tools.one_to_many(q, upload(q, keys), 50)
    off, con = download(q, offsets), download(q, content)
    if not (off == np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=50))])).all() or not all(
        sorted(con[off[b] : off[b + 1]]) == list(np.flatnonzero(keys == b)) for b in range(50)
    ):
        wrong.append("one_to_many")
    if not (download(q, pk.tools.argsort(q, upload(q, keys))) == np.argsort(keys, kind="stable")).all():
        wrong.append("argsort")
    floats = rng.normal(size=2000).astype(np.float32)
    if not (download(q, pk.tools.radix_sort(q, upload(q, floats))) == np.sort(floats)).all():
        wrong.append("radix_sort")
    print(f"pk.tools on {backend}: " + (f"WRONG {', '.join(wrong)}" if wrong else "all right"))
    return 1 if wrong else 0


# ----------------------------------------------------------------------------- kernels
@pk.kernel
def _philox_draws(acc, words, n64, n32, seed, n):
    for i in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, i)
        words[i] = acc.rand_u32(eng)
        n64[i] = acc.rand_normal(eng, np.float64)
        n32[i] = acc.rand_normal(eng, np.float32)


@pk.kernel
def _stream_copy(acc, dst, src, n):
    for i in acc.uniform_elements(n):
        dst[i] = src[i]


@pk.kernel
def _stream_triad(acc, dst, a, b, s, n):
    for i in acc.uniform_elements(n):
        dst[i] = a[i] + s * b[i]


#: name -> (check, seconds it needs at least to be worth starting)
CHECKS: dict[str, tuple[Callable[[Context], dict], float]] = {
    "warps": (check_warps, 20),
    "handoffs": (check_handoffs, 15),
    "philox": (check_philox, 20),
    "bandwidth": (check_bandwidth, 15),
    "clustering": (check_clustering, 60),
    "sanitizer": (check_sanitizer, 30),
}


# ----------------------------------------------------------------------------- the run
def device_slug(device: Any, dry: bool, backend: str) -> str:
    """The results folder's name, from the device's whole name in lower case, every run of other
    characters than letters and digits one ``-``: ``nvidia-h100-80gb-hbm3`` for "NVIDIA H100 80GB
    HBM3" (its first two words alone named an H100 PCIe's folder the same, and one run's document
    replaced the other's); ``emulated-cuda`` for the emulator; the backend's name where nothing is
    left."""
    if dry:
        return f"emulated-{backend}"
    return "-".join(re.sub(r"[^a-z0-9]+", " ", device.name.lower()).split()) or backend


def _error(exc: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return f"{type(exc).__name__}: {exc}"[:500] + " | " + tb[-1500:]


def run_check(name: str, ctx: Context) -> dict:
    """One check's row: its own, or skipped for want of time, or the error it raised."""
    fn, needs = CHECKS[name]
    if ctx.left() < needs:
        return {"name": name, "status": "skipped", "reason": f"time budget: {ctx.left():.0f} s left, needs {needs:.0f}"}
    t0 = time.monotonic()
    try:
        row = fn(ctx)
    except Exception as exc:
        row = {"status": "error", "reason": _error(exc)}
    return {"name": name, **row, "seconds": round(time.monotonic() - t0, 2)}


def write_document(ctx: Context, rows: list[dict], t0: float) -> Path:
    summary = {r["name"]: {"passed": r["status"] == "passed", "seconds": r.get("seconds")} for r in rows}
    bw = next((r for r in rows if r["name"] == "bandwidth" and "GBps" in r), None)
    if bw is not None:
        summary["bandwidth GB/s"] = bw["GBps"]
    doc = common.result_document(
        "gpu_check",
        f"{ctx.device} ({ctx.backend}{', emulated' if ctx.dry else ''})",
        ctx.dry,
        rows,
        summary,
        dry_run=ctx.dry,
        budget_s=ctx.args.budget,
        elapsed_s=round(time.monotonic() - t0, 1),
        statuses={r["name"]: r["status"] for r in rows},
    )
    return common.write_json(ctx.out_dir, "gpu_check", doc)


def plot(rows: list[dict], out_dir: Path) -> None:
    """The bandwidth figures (or why there are none) as ``gpu_check.png``."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bw = next((r for r in rows if r["name"] == "bandwidth"), {})
    if "GBps" in bw:
        names = list(bw["GBps"])
        ax.bar(range(len(names)), [bw["GBps"][k] for k in names], color=["C0", "C0", "0.5"])
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel(f"GB/s, {bw['bytes'] / GIB:g} GiB arrays")
    else:
        ax.text(0.5, 0.5, f"bandwidth not measured: {bw.get('reason', 'not run')}"[:120], ha="center", wrap=True)
        ax.set_axis_off()
    common.save_figure(fig, out_dir, "gpu_check")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cuda", help="the GPU backend to check (cuda or rocm; default cuda)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the GPU emulator (ALPYKA_EMULATE), on a CPU")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run (default 450)")
    p.add_argument("--out", type=Path, default=common.DEFAULT_OUT, help="results folder (holds the device folder)")
    p.add_argument("--only", default="", help=f"comma-separated checks (default all: {', '.join(CHECKS)})")
    p.add_argument("--sanitizer", default=None, help="path of compute-sanitizer (default: found on PATH or in CUDA)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--tools-driver", action="store_true", help=argparse.SUPPRESS)  # compute-sanitizer's target
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run and args.backend not in emulated():
        os.environ["ALPYKA_EMULATE"] = ",".join([*emulated(), args.backend])  # for the child scripts too
        emulate([args.backend])
    if args.tools_driver:
        return tools_driver(args.backend)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(CHECKS)
    unknown = sorted(set(names) - set(CHECKS))
    if unknown:
        raise SystemExit(f"unknown checks {unknown}; choose from {', '.join(CHECKS)}")
    t0 = time.monotonic()
    queue = pk.Queue(pk.device(args.backend))
    out_dir = Path(args.out) / device_slug(queue.device, args.dry_run, args.backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(args, queue, out_dir, t0 + args.budget)
    rows: list[dict] = []
    bar = common.progress(names, desc="gpu_check", disable=args.no_progress)
    for name in bar:
        bar.set_postfix_str(name)
        rows.append(run_check(name, ctx))
        write_document(ctx, rows, t0)  # a run killed later keeps what it measured
        r = rows[-1]
        print(f"{name:<11} {r['status']:<8} {r.get('seconds', 0):7.1f} s  {r.get('reason', '')[:150]}", flush=True)
    plot(rows, out_dir)
    print(f"wrote {write_document(ctx, rows, t0)}")
    return 1 if any(r["status"] in ("failed", "error") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
