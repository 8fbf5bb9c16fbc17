"""Time to the first result: a fresh process from ``import portable`` to a new kernel's result on
the host, against numba's first ``njit(cache=True)`` call of the same loop, cold and warm.

Each sample is one new Python process running one of two small programs (:data:`ALPYKA`,
:data:`NUMBA_TWIN`): import, define a saxpy loop, run it once over ``n`` float32 elements and have the
result on the host (alpyka: buffers, copies, ``pk.exec``, the copy back, ``q.wait()``). The time is
taken inside the process, from its first statement to the result (the interpreter's own start is
the same for both and left out; the process's wall time is recorded too), with the CPU time the
process used meanwhile (all its threads) and that of the whole process and what it waited for
(g++ for the emulated cuda backend), which other processes disturb less. **Cold**: every cache
is new and empty (``ALPYKA_CACHE_DIR``, ``NUMBA_CACHE_DIR``, ``XDG_CACHE_HOME`` for pyopencl,
``POCL_CACHE_DIR``); **warm**: a second process on the caches the cold one filled. Python's own
bytecode is compiled before the first sample (``PYTHONPYCACHEPREFIX`` in a scratch directory), as
an installed package's is.

Every round runs alpyka on each backend (``cuda``: the GPU emulator, ``ALPYKA_EMULATE=cuda``,
where no GPU is) in a new order (a seeded shuffle), each beside a pair of numba's twin of its own:
the two run interleaved, cold, cold, warm, warm, which of them first drawn each time. The ratio
alpyka/numba is taken per such pair, processes a second apart (paired: one load for both; the
machine's speed here drifts by up to ~1.5x within seconds, which a ratio to one twin per round
of ten processes caught as noise), and its median over rounds is reported with the best-of ratio
(each side's fastest sample). The load (``os.getloadavg()``) and the cores other processes kept
busy during each round are recorded; ``--busy N`` runs every round with ``N`` processes spinning
on the CPU, started by the benchmark (a loaded machine, as CMS runs: every core busy). Writes
``first_result.json`` and ``first_result.png``.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common

NAME = "first_result"
NUMBA = "numba njit(cache=True)"
#: alpyka's backends measured where available; ``cuda`` runs on the GPU emulator where no GPU is
CANDIDATES = ("cpu_serial", "cpu_threads", "opencl", "cuda")
#: the issue's goal: alpyka's time over numba's, cold and warm
TARGETS = {"cold": 1.1, "warm": 1.0}

#: the alpyka program: the time from its first statement to the result on the host, as JSON
ALPYKA = """\
import time
_t0, _c0 = time.perf_counter(), time.process_time()
import json
import sys
import numpy as np
import portable as pk
_t_import = time.perf_counter()


@pk.kernel
def saxpy(acc, out, x, y, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i] + y[i]


dev = pk.device(sys.argv[1])
q = pk.Queue(dev)
n = int(sys.argv[2])
x, y, res = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
bx, by, bo = (pk.Buffer(dev, n, np.float32) for _ in range(3))
pk.memcpy(q, bx, x)
pk.memcpy(q, by, y)
pk.exec(q, pk.valid_workdiv(dev, n), saxpy, bo, bx, by, np.float32(2), n)
pk.memcpy(q, res, bo)
q.wait()
_t1, _c1 = time.perf_counter(), time.process_time()
ok = bool((res == 2 * x + y).all())
print(json.dumps({"s": _t1 - _t0, "cpu_s": _c1 - _c0, "import_s": _t_import - _t0, "ok": ok}))
"""

#: numba's twin: the same loop as one ``njit(cache=True)`` function
NUMBA_TWIN = """\
import time
_t0, _c0 = time.perf_counter(), time.process_time()
import json
import sys
import numpy as np
from numba import njit
_t_import = time.perf_counter()


@njit(cache=True)
def saxpy(out, x, y, a, n):
    for i in range(n):
        out[i] = a * x[i] + y[i]


n = int(sys.argv[2])
x, y, res = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
saxpy(res, x, y, np.float32(2), n)
_t1, _c1 = time.perf_counter(), time.process_time()
ok = bool((res == 2 * x + y).all())
print(json.dumps({"s": _t1 - _t0, "cpu_s": _c1 - _c0, "import_s": _t_import - _t0, "ok": ok}))
"""


def _contenders(backends: list[str], baseline: Path | None) -> dict[str, tuple[str, str, Path]]:
    """``{contender: (program file name, backend argument, alpyka's tree)}``: numba's twin, then
    alpyka's backends (and each again from the ``baseline`` tree, another checkout, where given)."""
    out = {NUMBA: ("numba_twin.py", "-", common.REPO_ROOT)}
    out.update({f"alpyka {b}": ("alpyka_program.py", b, common.REPO_ROOT) for b in backends})
    if baseline is not None:
        out.update({f"alpyka {b} (baseline)": ("alpyka_program.py", b, baseline) for b in backends})
    return out


def _env(caches: Path, pycache: Path, backend: str, root: Path) -> dict[str, str]:
    """The child's environment: alpyka from ``root``, every cache under ``caches``, Python's
    bytecode under ``pycache``."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for var, sub in (
        ("ALPYKA_CACHE_DIR", "alpyka"),
        ("NUMBA_CACHE_DIR", "numba"),
        ("XDG_CACHE_HOME", "xdg"),
        ("POCL_CACHE_DIR", "pocl"),
    ):
        env[var] = str(caches / sub)
    if backend == "cuda" and "cuda" not in _real_backends():
        env["ALPYKA_EMULATE"] = "cuda"
    return env


def _real_backends() -> list[str]:
    import portable as pk

    return pk.available_backends()


def _run(program: Path, backend: str, n: int, env: dict[str, str]) -> dict:
    """One fresh process of ``program``: its in-process seconds to the result, its import
    seconds, its wall seconds and the cores others kept busy meanwhile."""
    before = common.cpu_ticks()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(program), backend, str(n)], env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the process and what it waited for (g++)
    tree_cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    if done.returncode != 0:
        raise RuntimeError(f"{program.name} {backend} failed: {done.stderr.strip()[-1500:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not got["ok"]:
        raise RuntimeError(f"{program.name} {backend} computed a wrong result")
    busy = common.others_cores(before, common.cpu_ticks(), os.cpu_count() or 1)
    return {k: got[k] for k in ("s", "cpu_s", "import_s")} | {
        "wall_s": wall,
        "process_tree_cpu_s": tree_cpu,
        "cores_busy_elsewhere": busy,
    }


def _available(scratch: Path, pycache: Path) -> tuple[list[str], dict[str, str]]:
    """The backends to measure (``$ALPYKA_BACKENDS`` applies; cuda is emulated where no GPU is)."""
    real = _real_backends()
    chosen = {b.strip() for b in os.environ.get(common.BACKENDS_ENV, "").split(",") if b.strip()}
    picked, skipped = [], {}
    for b in CANDIDATES:
        if chosen and b not in chosen:
            continue
        if b in real:
            picked.append(b)
        elif b == "cuda":
            picked.append(b)  # the emulator's; _warm_up drops it where the emulator cannot run
        else:
            skipped[f"alpyka {b}"] = "not available here"
    return picked, skipped


def _warm_up(contenders: dict, scratch: Path, pycache: Path, n: int) -> dict[str, str]:
    """One unmeasured run of each contender (Python's bytecode compiled, the OS's file cache warm);
    ``{contender: why}`` for those that cannot run."""
    failed = {}
    for name, (program, backend, root) in contenders.items():
        caches = Path(tempfile.mkdtemp(dir=scratch))
        try:
            _run(scratch / program, backend, n, _env(caches, pycache, backend, root))
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            failed[name] = f"failed: {str(exc)[-500:]}"
    return failed


def measure(
    rounds: int, n: int, no_progress: bool = False, baseline: Path | None = None, busy: int = 0
) -> tuple[list[dict], dict[str, str]]:
    """``rounds`` rounds of every contender's cold and warm process, interleaved: the rows and
    ``{contender: why not}`` (``baseline``: another alpyka checkout measured beside this one;
    ``busy``: processes spinning meanwhile)."""
    scratch = common.scratch_dir("alpyka-first-result-")
    pycache = scratch / "pycache"
    (scratch / "alpyka_program.py").write_text(ALPYKA, encoding="utf-8")
    (scratch / "numba_twin.py").write_text(NUMBA_TWIN, encoding="utf-8")
    backends, skipped = _available(scratch, pycache)
    contenders = _contenders(backends, baseline)
    skipped.update(_warm_up(contenders, scratch, pycache, n))
    live = {k: v for k, v in contenders.items() if k not in skipped}
    rows: list[dict] = []
    order = random.Random(0x5EED)
    bar = common.progress(range(rounds), total=rounds, desc="bench_first_result", disable=no_progress)
    with common.BusyCores(busy):
        for r in bar:
            rows += _round(r, live, order, scratch, pycache, n, busy)
            bar.set_postfix_str(f"round {r + 1}, load {os.getloadavg()[0]:.1f}")
    return rows, skipped


def _round(r: int, live: dict, order: random.Random, scratch: Path, pycache: Path, n: int, busy: int) -> list[dict]:
    """Round ``r``: each alpyka contender's cold and warm process beside a twin pair of its own
    (see the module doc), contenders in a new order."""
    rows = []
    names = [k for k in live if k != NUMBA]
    order.shuffle(names)
    load = os.getloadavg()[0]
    for name in names:
        pair = [name, NUMBA] if NUMBA in live else [name]
        envs = {}
        for who in pair:
            program, backend, root = live[who]
            envs[who] = (program, backend, _env(Path(tempfile.mkdtemp(dir=scratch)), pycache, backend, root))
        for state in ("cold", "warm"):
            order.shuffle(pair)
            for who in pair:
                program, backend, env = envs[who]
                row = {"contender": who, "round": r, "state": state, "pair": f"{r}:{name}"}
                row |= {"load_average_1min": round(load, 2), "busy_processes": busy}
                rows.append(row | _run(scratch / program, backend, n, env))
    return rows


def _paired(rows: list[dict], name: str, state: str, key: str = "s") -> list[float]:
    """alpyka's seconds (``key``: wall ``"s"`` or CPU ``"cpu_s"``) over numba's, per pair (its
    own twin, same state)."""
    base = {r["pair"]: r[key] for r in rows if r["contender"] == NUMBA and r["state"] == state}
    return [
        r[key] / base[r["pair"]]
        for r in rows
        if r["contender"] == name and r["state"] == state and base.get(r["pair"], 0) > 0
    ]


def summarize(rows: list[dict]) -> dict:
    """Per contender and state: median and best seconds, paired median and best-of ratios to
    numba's twin and whether the goal is met; then the load while measured."""
    summary: dict = {}
    for name in dict.fromkeys(r["contender"] for r in rows):
        entry = summary.setdefault(name, {})
        for state in ("cold", "warm"):
            mine = [r for r in rows if r["contender"] == name and r["state"] == state]
            if not mine:
                continue
            entry[f"{state} s"] = statistics.median(r["s"] for r in mine)
            entry[f"{state} best s"] = min(r["s"] for r in mine)
            entry[f"{state} import s"] = statistics.median(r["import_s"] for r in mine)
            entry[f"{state} CPU s"] = statistics.median(r["cpu_s"] for r in mine)
            if name == NUMBA:
                continue
            pairs = _paired(rows, name, state)
            base = [r["s"] for r in rows if r["contender"] == NUMBA and r["state"] == state]
            entry[f"{state} vs numba"] = statistics.median(pairs) if pairs else None
            entry[f"{state} vs numba, best"] = min(r["s"] for r in mine) / min(base) if base else None
            cpu = _paired(rows, name, state, "cpu_s")
            entry[f"{state} CPU vs numba"] = statistics.median(cpu) if cpu else None
            tree = _paired(rows, name, state, "process_tree_cpu_s")  # with the compilers it ran (g++)
            entry[f"{state} process tree CPU vs numba"] = statistics.median(tree) if tree else None
            met = entry[f"{state} vs numba"]
            entry[f"{state} met (<= {TARGETS[state]})"] = None if met is None else bool(met <= TARGETS[state])
    busy = [r["cores_busy_elsewhere"] for r in rows if r["cores_busy_elsewhere"] is not None]
    summary["machine while measured"] = {
        "load average (1 min), median": statistics.median(r["load_average_1min"] for r in rows) if rows else None,
        "cores busy with other work": statistics.median(busy) if busy else None,
        "spinning processes started by the benchmark": max((r.get("busy_processes", 0) for r in rows), default=0),
        "rounds": max((r["round"] for r in rows), default=-1) + 1,
    }
    return summary


def plot(rows: list[dict], out_dir: Path) -> None:
    """alpyka's time over numba's per backend, cold and warm: the paired median (bars), each
    round (dots) and the goal (dashed)."""
    plt = common.pyplot()
    names = [n for n in dict.fromkeys(r["contender"] for r in rows) if n != NUMBA]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for k, state in enumerate(("cold", "warm")):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(names))]
        per = [_paired(rows, n, state) for n in names]
        ax.bar(xs, [statistics.median(p) if p else 0 for p in per], width=0.36, label=state, alpha=0.8)
        for x, p in zip(xs, per):
            ax.plot([x] * len(p), p, "k.", ms=3)
        ax.axhline(TARGETS[state], ls="--", lw=0.8, color=f"C{k}")
    ax.set_xticks(range(len(names)), [n.removeprefix("alpyka ") for n in names])
    ax.set_ylabel("time to first result / numba's")
    loads = [r["load_average_1min"] for r in rows]
    spin = max((r.get("busy_processes", 0) for r in rows), default=0)
    busy = f", {spin} spinning" if spin else ""
    span = f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f}"
    ax.set_title(f"first result vs {NUMBA} (load {span}{busy})", fontsize=9)
    ax.legend(fontsize=8)
    common.save_figure(fig, out_dir, NAME)


def main(argv: list[str] | None = None) -> int:
    parser = common.make_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: 7 full, 2 quick, 1 smoke)")
    parser.add_argument(
        "--busy", type=int, default=0, help="processes spinning on the CPU meanwhile (a loaded machine)"
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another alpyka checkout to measure beside this one (before/after)"
    )
    args = common.parse_args(parser, argv)
    rounds = args.rounds or (1 if args.smoke else 2 if args.quick else 7)
    n = 1 << 10 if args.smoke else 1 << 16
    rows, skipped = measure(rounds, n, args.no_progress, args.baseline, args.busy)
    summary = summarize(rows)
    rows += [{"contender": b, "status": "skipped", "reason": why} for b, why in skipped.items()]
    doc = common.result_document(
        NAME,
        "the host CPU: numba, cpu_serial, cpu_threads, OpenCL's default device, cuda on the GPU emulator",
        args.quick,
        rows,
        summary,
        mode=common.mode(args),
        n=n,
        cores=len(os.sched_getaffinity(0)),
        load_average=[round(x, 2) for x in os.getloadavg()],
        busy_processes=args.busy,
        opencl_device=os.environ.get("ALPYKA_OPENCL_DEVICE", "(default)"),
        ratios="alpyka's seconds to the first result over numba's twin's, paired per round (lower is better)",
        programs={"alpyka": ALPYKA, "numba": NUMBA_TWIN},
    )
    out = common.write_json(args.out, NAME, doc)
    plot([r for r in rows if "s" in r], args.out)
    common.print_summary(summary, 26, skipped)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
