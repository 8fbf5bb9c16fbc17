"""What a new process pays before its first result on a CPU backend (docs/runtime.md, "What the
first result costs"), each in a fresh Python process: a built-in backend loads without a scan
of the installed packages' metadata, cpu_threads' first device imports no ``statistics``, and
the launch that starts cpu_threads' pool leaves the pool's calibration to the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import portable as pk

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, source: str, *args: str) -> dict:
    """Run ``source`` in a fresh process (alpyka from this tree); the JSON of its last line."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_builtin_backend_loads_without_reading_the_installed_metadata(tmp_path):
    """~10 ms of CPU at a process's first ``pk.device``: only listing every backend (plugins
    included) reads the ``alpyka.backends`` entry points."""
    got = _run(
        tmp_path,
        """
        import importlib.metadata, json
        read = []
        real = importlib.metadata.entry_points
        def counted(*a, **k):
            read.append(k.get("group"))
            return real(*a, **k)
        importlib.metadata.entry_points = counted
        import portable as pk
        dev = pk.device("cpu_serial")
        first = list(read)
        names = pk.backends()
        print(json.dumps({"first": first, "then": read, "names": names, "device": dev.backend_name}))
        """,
    )
    assert got["device"] == "cpu_serial" and got["first"] == [], got
    assert "alpyka.backends" in got["then"] and got["names"][:2] == ["cpu_serial", "cpu_threads"], got


def test_an_unknown_backend_is_still_refused_with_the_known_ones(tmp_path):
    got = _run(
        tmp_path,
        """
        import json
        import portable as pk
        try:
            pk.device("fpga")
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
    )
    assert "unknown backend 'fpga'; known backends are cpu_serial, cpu_threads" in got["error"]


PARALLEL_LAUNCHES = """
    import json, sys
    import numpy as np
    import portable as pk
    from backends import _launch_cost as cost, _thread_pool as tp

    @pk.kernel
    def inc(acc, out, x, n):
        for i in acc.uniform_elements(n):
            out[i] = x[i] + 1

    dev = pk.device("cpu_threads")
    statistics = "statistics" in sys.modules
    calls = []
    calibrate = tp._pool.calibrate
    tp._pool.calibrate = lambda *a: calls.append(1) or calibrate(*a)
    cost.INLINE_S = cost._UNTIMED_S = 0.0  # every grid of more than one block goes parallel
    cost.PARALLEL_GAIN = float("inf")
    q = pk.Queue(dev, blocking=True)
    n = 1000
    x, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    seen = []
    for _ in range(2):
        pk.exec(q, pk.make_workdiv(dev, 8, 125), inc, out, x, n)
        seen.append([tp._pool.started, tp._pool.nworkers, len(calls)])
    print(json.dumps({"statistics": statistics, "seen": seen, "ok": bool((out == x + 1).all())}))
"""


@pytest.mark.skipif("cpu_threads" not in pk.available_backends(), reason="cpu_threads is unavailable here")
def test_the_launch_that_starts_the_pool_leaves_the_calibration_to_the_next(tmp_path):
    """The pool's calibration (15 hand-overs to a worker and back, up to ~25 ms on a busy
    2-core machine) is not part of a new process's first parallel launch."""
    got = _run(tmp_path, PARALLEL_LAUNCHES)
    assert got["ok"] and got["statistics"] is False, got
    (started, workers, calibrations), second = got["seen"]
    if not workers:
        pytest.skip("one core: no pool workers, every launch runs inline")
    assert started and calibrations == 0, got
    assert second[2] == 1, got  # the next parallel launch measures it
