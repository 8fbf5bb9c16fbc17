"""Smoke tests of the benchmark scripts without a test of their own (bench_backends, clustering,
inference, loops, pipeline, remote, tools): each runs in its tiniest mode in a child process and
writes a document that follows the suite's convention with measured numbers (no timing asserted).
Split from test_bench_smoke.py (the models and kernels benchmarks, the runner, the helpers): with
``--dist loadfile`` one file is one worker's, and the two halves run side by side."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, positive_finite, selected
from alpyka_testing.bench import run_script as _run

common = load("_common")


# (script, document name, modules it needs, timeout): about 5, 5, 9 and 30 s on 2 idle cores;
# bench_pipeline took 176 s with two busy loops on the 2 cores beside other work (load ~8)
_SCRIPTS = [
    ("bench_backends", "backends", (), 180),
    ("bench_clustering", "clustering", (), 240),
    ("bench_inference", "inference", ("torch",), 180),
    ("bench_loops", "loops", (), 180),
    ("bench_pipeline", "pipeline", ("torch",), 480),
    ("bench_remote", "remote", ("torch", "pytriton"), 300),
    ("bench_tools", "tools", (), 180),
]
#: the backends a script measures, where it measures several (the others use a cpu_serial queue
#: for their host-side work); the child process gets the selection (conftest.py)
_MEASURES = {
    "bench_backends": ("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm"),
    "bench_clustering": ("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm"),
    "bench_loops": ("cpu_serial", "cpu_threads"),
    "bench_pipeline": ("cpu_serial", "cpu_threads", "opencl"),
    "bench_tools": ("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm"),
}


def _measured_in_a_child(script: str) -> tuple[str, ...]:
    """What ``script`` can measure in a child process: not the cupy stand-in's backends (it is
    installed in this process only)."""
    from backends.emulator.fake_cupy_kernels import served_here

    return tuple(b for b in _MEASURES[script] if b not in served_here())


def _numbers(value: object) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
@pytest.mark.parametrize(
    "script,name,needs,timeout",
    # the test's limit a minute past the script's: a slow script fails with
    # its output instead of pytest-timeout killing the worker
    [pytest.param(*s, marks=pytest.mark.timeout(s[3] + 60)) for s in _SCRIPTS],
    ids=[s[0] for s in _SCRIPTS],
)
def test_bench_script_smoke(
    tmp_path: Path,
    script: str,
    name: str,
    needs: tuple,
    timeout: int,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each benchmark script runs in --smoke mode and writes a valid document with measured numbers."""
    for mod in needs:
        pytest.importorskip(mod)
    if script == "bench_pipeline":  # the demo's model, trained once and cached (not trained in the child)
        monkeypatch.setenv("ALPYKA_MODEL_DIR", str(request.getfixturevalue("demo_model_dir")))
    if script in _MEASURES:
        selected(_measured_in_a_child(script))
    proc = _run([f"benchmarks/{script}.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert common.check_document(doc, name) == []
    measured = [x for x in _numbers(doc["results"]) if positive_finite(x)]
    assert measured, f"{script}: no measured number in {doc['results']!r:.500}"
    assert all(math.isfinite(x) for x in _numbers(doc["results"]))
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
