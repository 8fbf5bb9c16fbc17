"""benchmarks/gpu_check.py, the prepared check for a lent GPU, runs end to end on a CPU: its
``--dry-run`` runs every check at tiny sizes on the GPU emulator and writes its document; a
failing or raising check never stops the others, a check without time or without its tool is
skipped saying why."""

from __future__ import annotations

import json
import math
import re
import stat
import time
from pathlib import Path

import pytest

from alpyka_testing.bench import PNG_MAGIC, load, run_script, selected

common = load("_common")
gpu_check = load("gpu_check")

# what compute-sanitizer's command line looks like to the script: drop its options, run the
# program, report its summary line (the real tool needs a GPU). Only memcheck runs the program:
# on the emulator the other three tools would run the same pk.tools driver again (~2 s of CPU
# each) and prove nothing more; they echo the program's command line instead
FAKE_SANITIZER = """#!/usr/bin/env bash
tool=
while [[ "$1" == --* ]]; do echo "$1 $2" >> "$0.calls"; [[ "$1" == --tool ]] && tool=$2; shift 2; done
if [[ "$tool" == memcheck ]]; then "$@"; rc=$?; else echo "would run: $*"; rc=0; fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
"""


def _fake_sanitizer(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "compute-sanitizer"
    path.parent.mkdir()
    path.write_text(FAKE_SANITIZER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.slow  # every check, the clustering benchmark's smoke run and a sanitizer run: ~20 s
# a hang guard past the script's own 400 s, which fails with its output: at a load of 18 on 2
# cores the run passed the ini's 240 s and pytest-timeout took the whole worker down
@pytest.mark.timeout(460)
def test_dry_run_runs_every_check_and_writes_its_document(tmp_path: Path) -> None:
    selected(("cuda",))
    sanitizer = _fake_sanitizer(tmp_path)
    proc = run_script(
        [
            "benchmarks/gpu_check.py",
            "--dry-run",
            "--no-progress",
            "--out",
            str(tmp_path / "r"),
            "--sanitizer",
            str(sanitizer),
        ],
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = tmp_path / "r" / "emulated-cuda"
    doc = json.loads((folder / "gpu_check.json").read_text())
    assert common.check_document(doc, "gpu_check") == []
    assert doc["dry_run"] is True and doc["quick"] is True
    rows = {r["name"]: r for r in doc["results"]}
    assert list(rows) == list(gpu_check.CHECKS)
    for name in ("warps", "philox", "bandwidth", "clustering", "sanitizer"):
        assert rows[name]["status"] == "passed", rows[name]
    handoffs = rows["handoffs"]
    assert handoffs["status"] == "passed" or (
        handoffs["status"] == "skipped" and handoffs["reason"].startswith("not present")
    ), handoffs
    assert rows["warps"]["block_sizes"] == [48, 100] and rows["warps"]["warp"] == 32
    philox = rows["philox"]
    assert philox["threads_per_block"] == 1024 and philox["u32_equal_to_cpu_serial"] == philox["n"]
    gbps = rows["bandwidth"]["GBps"]
    assert set(gbps) == {"alpyka copy", "alpyka triad", "cupy D2D copy"}
    assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in gbps.values()), gbps
    runs = rows["sanitizer"]["runs"]
    assert sorted(r["tool"] for r in runs) == sorted(gpu_check.SANITIZER_TOOLS)
    assert all(r["rc"] == 0 and r["errors"] == 0 and r["target"] == "pk.tools" for r in runs), runs
    by_tool = {r["tool"]: r["output_tail"] for r in runs}
    assert "pk.tools on cuda: all right" in by_tool["memcheck"], by_tool["memcheck"]
    for tool in set(gpu_check.SANITIZER_TOOLS) - {"memcheck"}:  # the same program, handed to each tool
        assert "would run: " in by_tool[tool] and "--tools-driver --backend cuda" in by_tool[tool], by_tool[tool]
    calls = (sanitizer.parent / "compute-sanitizer.calls").read_text().splitlines()
    assert {f"--tool {t}" for t in gpu_check.SANITIZER_TOOLS} <= set(calls)
    assert "--error-exitcode 9" in calls
    assert json.loads((folder / "clustering.json").read_text())["benchmark"] == "clustering"
    assert (folder / "gpu_check.png").read_bytes()[:8] == PNG_MAGIC


class _Args:
    sanitizer = None
    budget = 10.0


class _Ctx:
    """A Context without a device: what run_check and check_sanitizer read."""

    def __init__(self, left: float) -> None:
        self.args, self._left = _Args(), left

    def left(self) -> float:
        return self._left


def test_a_raising_check_is_an_error_row_and_a_late_one_is_skipped(monkeypatch) -> None:
    def boom(ctx):
        raise ZeroDivisionError("the check's own bug")

    monkeypatch.setitem(gpu_check.CHECKS, "boom", (boom, 5))
    row = gpu_check.run_check("boom", _Ctx(left=100))
    assert row["name"] == "boom" and row["status"] == "error" and "ZeroDivisionError" in row["reason"]
    row = gpu_check.run_check("boom", _Ctx(left=3))
    assert row["status"] == "skipped" and row["reason"].startswith("time budget: 3 s left, needs 5")


def test_missing_sanitizer_is_skipped_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    monkeypatch.setattr(gpu_check.os, "access", lambda path, mode: False)
    row = gpu_check.check_sanitizer(_Ctx(left=100))
    assert row["status"] == "skipped" and "compute-sanitizer is not installed" in row["reason"]


def test_results_folder_is_named_after_the_device() -> None:
    """From the whole name, made safe for a path and still readable: named from its first two
    words, an H100 SXM and an H100 PCIe (or two A100s of different memory) shared a folder, and
    the later run's document replaced the earlier one's."""

    class Dev:
        name = "NVIDIA H100 80GB HBM3"

    def slug(name: str) -> str:
        Dev.name = name
        return gpu_check.device_slug(Dev, False, "cuda")

    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slug("NVIDIA H200") == "nvidia-h200"
    assert slug("AMD Instinct MI300X") == "amd-instinct-mi300x"
    fakes = ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "Fake GPU 1"]
    slugs = [slug(n) for n in fakes]
    assert len(set(slugs)) == len(fakes), slugs
    assert slug(" ../Weird GPU: x/y\\z*? ") == "weird-gpu-x-y-z"  # no separator, no dot, nothing the shell globs
    assert slug("???") == "cuda"  # nothing left: the backend's name
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s) for s in slugs)
    assert gpu_check.device_slug(Dev, True, "cuda") == "emulated-cuda"


def test_a_child_run_out_of_time_is_killed_with_its_children(tmp_path: Path) -> None:
    """compute-sanitizer runs Python as its child: a timeout kills both, nothing stays on the GPU."""
    pid_file = tmp_path / "child.pid"
    row = gpu_check._run(["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], {"PATH": "/usr/bin:/bin"}, 1)
    assert row["rc"] == 124 and row["timed_out"] is True and row["seconds"] < 30
    pid = int(pid_file.read_text())
    assert _gone(pid), f"the grandchild {pid} outlived the timeout"


def _gone(pid: int, wait: float = 5.0) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for its reaper counts as ended)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False
