"""The benchmark figures in README.md and benchmarks/results/SUMMARY.md are what the committed JSON
documents give (benchmarks/summary.py): a figure edited by hand, or a document changed without
regenerating them, fails here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alpyka_testing.bench import BENCH, load
from alpyka_testing.bench import REPO as ROOT

common = load("_common")
summary = load("summary")


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "summary.py"), "--check", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_committed_figures_are_generated_from_the_json() -> None:
    proc = _check()
    assert proc.returncode == 0, proc.stderr + "\n(run `python benchmarks/summary.py` and commit the result)"


def test_every_readme_figure_has_its_document_and_keys() -> None:
    missing: list[str] = []
    table = summary.render_figures(summary.load(), missing)
    assert missing == []
    assert table.count("\n") == len(summary.FIGURES) + 1  # header, rule, one row per figure
    assert "—" not in table


def test_rows_name_their_machine_and_never_a_question_mark() -> None:
    docs = summary.load()
    assert {d.path for d in docs} >= {"kernels.json", "nvidia-h100/backends.json", "nvidia-h100/clustering.json"}
    text = (summary.RESULTS / "SUMMARY.md").read_text(encoding="utf-8")
    assert "?:" not in text and "one run on one machine" not in text
    assert "(nvidia-h100/README.md)" in text
    for d in docs:
        assert f"| {d.machine} | {d.date} |" in text, d.path
    gpu = {d.path: d.machine for d in docs}["nvidia-h100/clustering.json"]
    assert gpu.startswith("NVIDIA H100") and "cores" in gpu


def _copy_tree(tmp_path: Path) -> tuple[Path, Path]:
    results, readme = tmp_path / "results", tmp_path / "README.md"
    shutil.copytree(summary.RESULTS, results, ignore=shutil.ignore_patterns("logs", "tmp", "suite.json"))
    shutil.copy(summary.README, readme)
    return results, readme


def test_check_fails_on_a_hand_edited_figure(tmp_path: Path) -> None:
    results, readme = _copy_tree(tmp_path)
    assert _check("--results", str(results), "--readme", str(readme)).returncode == 0
    text = readme.read_text(encoding="utf-8")
    assert "| 1.79x (numba prange" in text
    readme.write_text(text.replace("| 1.79x (numba prange", "| 1.95x (numba prange"), encoding="utf-8")
    proc = _check("--results", str(results), "--readme", str(readme))
    assert proc.returncode == 1 and "README.md: differs" in proc.stderr
    assert summary.main(["--results", str(results), "--readme", str(readme)]) == 0  # regenerates
    assert readme.read_text(encoding="utf-8") == text


def test_check_fails_when_a_document_changes(tmp_path: Path) -> None:
    results, readme = _copy_tree(tmp_path)
    path = results / "kernels.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["summary"]["compute-bound speed-up"]["cpu_threads/cpu_serial"] = 1.5
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = _check("--results", str(results), "--readme", str(readme))
    assert proc.returncode == 1
    assert "SUMMARY.md: differs" in proc.stderr and "README.md: differs" in proc.stderr
    del doc["summary"]["compute-bound speed-up"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = _check("--results", str(results), "--readme", str(readme))
    assert proc.returncode == 1 and "kernels.json: summary / compute-bound speed-up" in proc.stderr


def test_machine_labels_and_skipped_rows() -> None:
    cpu = {"machine": {"cpu": "Intel(R) Xeon(R) Processor", "cpus_usable": 2}, "device": "cpu"}
    assert summary.machine_label(cpu) == "Intel Xeon, 2 cores"
    for device in ("cuda: NVIDIA H100 80GB HBM3", "cpu_serial:0 (X), cuda:0 (NVIDIA H100 80GB HBM3); numba"):
        assert summary.machine_label({**cpu, "device": device}) == "NVIDIA H100 80GB HBM3 (Intel Xeon, 2 cores)"
    # odd names: a GPU's "(TM)" made its name unmatched (the label lost the GPU), a CPU's "(R)"
    # and "@ 2.00GHz" beside it must not confuse the GPU's
    xeon = {"machine": {"cpu": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "cpus_usable": 2}}
    for device, want in [
        ("rocm:0 (AMD Radeon(TM) Pro W7900)", "AMD Radeon Pro W7900 (Intel Xeon Gold 6338, 2 cores)"),
        ("rocm: AMD Instinct(TM) MI210", "AMD Instinct MI210 (Intel Xeon Gold 6338, 2 cores)"),
        (
            "cpu_serial:0 (Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz), cuda:0 (NVIDIA H100 80GB HBM3)",
            "NVIDIA H100 80GB HBM3 (Intel Xeon Gold 6338, 2 cores)",
        ),
        ("cpu_threads:0 (Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz)", "Intel Xeon Gold 6338, 2 cores"),
    ]:
        assert summary.machine_label({**xeon, "device": device}) == want, device
    amd = {"machine": {"cpu": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 2}, "device": "cpu"}
    assert summary.machine_label(amd) == "AMD EPYC 7B13 64-Core, 2 cores"
    rows = [
        {"section": "launch", "backend": "rocm", "status": "skipped", "reason": "no HIP"},
        {"model": "m", "variant": "v", "status": "skipped", "reason": "no form"},
        {"contender": "opencl", "status": "failed", "reason": "boom"},
    ]
    assert summary.skipped({"results": rows}) == ["opencl: boom", "rocm (launch): no HIP", "v (m): no form"]
    doc = common.result_document("x", "cpu", True, [{"status": "skipped", "reason": "?"}], {})
    assert "name no contender" in common.check_document(doc, "x")[0]


def test_markers_are_required() -> None:
    with pytest.raises(ValueError, match="markers"):
        summary.replace_between_markers("no markers here", "| table |")


def test_every_per_event_benchmark_has_a_readme_row() -> None:
    """Issue 33: each per-event figure reaches the README with its peer (pk.tools, captured graphs,
    the ClusterChargeCut kernel), read from its benchmark's document."""
    text = summary.README.read_text(encoding="utf-8")
    table = text[text.index(summary.BEGIN) : text.index(summary.END)]
    for document in ("tools.json", "graph.json", "charge_cut.json", "clustering.json"):
        assert f"(benchmarks/results/{document})" in table, document
    assert {f.document for f in summary.FIGURES} >= {"tools.json", "graph.json", "charge_cut.json"}


def _gpu_clustering() -> summary.Figure:
    return next(f for f in summary.FIGURES if f.document == "nvidia-h100/clustering.json")


def test_a_row_reads_the_keys_its_document_has() -> None:
    """The GPU clustering row reads a run with the union-find peer, or an older run whose one numba
    peer was a flood fill, and says which; a document with neither names the first row's keys."""
    figure = _gpu_clustering()
    entry = {"M digis/s": 2.0, "speed vs union-find": 1.5}
    new = {"summary": {k: dict(entry) for k in ("cuda", "numba union-find (1 thread)", "cpu_serial", "cpu_threads")}}
    missing: list[str] = []
    row, text = summary.fill(figure, new, missing)
    assert row is figure and "union-find 2.00" in text and missing == []
    peers = ("cuda", "numba (1 thread)", "cpu_serial", "cpu_threads")
    old = {"summary": {k: {"M digis/s": 2.0, "speed vs numba": 1.5} for k in peers}}
    row, text = summary.fill(figure, old, missing)
    assert row is figure.or_else and "flood fill 2.00" in text and "flood fill" in row.what and missing == []
    row, text = summary.fill(figure, {"summary": {}}, missing)
    assert row is figure and "—" in text
    assert any("numba union-find (1 thread)" in m for m in missing)
