"""Smoke tests of the benchmark suite: the scripts run in their tiniest mode and write documents
that follow the suite's convention; the runner records failures and timeouts. No timing is
asserted, only that measured numbers exist, are finite and positive. The scripts without checks
of their own (bench_backends, clustering, inference, loops, pipeline, remote, tools) are
test_bench_scripts_smoke.py's: one file is one worker's under ``--dist loadfile``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from alpyka_testing.bench import BENCH, PNG_MAGIC, load, positive_finite, selected
from alpyka_testing.bench import run_script as _run

common = load("_common")
engine_of = load("bench_models").engine_of


# ----------------------------------------------------------------------------- bench_models


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
def test_bench_models_smoke(tmp_path: Path) -> None:
    """The DeepMET-shaped model: every route kind, per-candidate ones included. (The ParticleNet-
    shaped one takes the same code paths; its ONNX export alone is ~10 s on a cold cache, so the
    smoke run leaves it to `--quick` and full runs.)"""
    pytest.importorskip("torch")
    proc = _run(
        ["benchmarks/bench_models.py", "--smoke", "--models", "deepmet", "--no-progress", "--out", str(tmp_path)],
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "models.json").read_text())
    assert common.check_document(doc, "models") == []
    assert doc["quick"] is True and doc["mode"] == "smoke"
    assert doc["threads"]["torch_intra_op"] == 1
    gathers = ("soa_gather", "soa_gather_pc")
    ok = [r for r in doc["results"] if r["status"] == "ok" and r["variant"] not in gathers]
    variants = {r["variant"] for r in ok}
    # smoke never compiles AOTInductor: every other route ran, per-candidate ONNX Runtime included
    assert {
        "eager",
        "jit",
        "exported",
        "onnx",
        "onnx_soa",
        "alpyka_jit",
        "alpyka_exported",
        "alpyka_onnx",
        "alpyka_onnx_pc",
    } <= variants, f"only {variants} ran"
    for g in gathers:  # the SoA -> row-major gather alone, for either layout
        timed = [r for r in doc["results"] if r["variant"] == g]
        assert len(timed) == 1 and positive_finite(timed[0]["latency_median_ms"]), timed
    for r in ok:
        if r["variant"].startswith("alpyka") and engine_of(r["variant"]) in variants:
            assert positive_finite(r["throughput_vs_engine_paired"]), r  # paired with its engine's rounds
    for r in ok:
        for key in ("latency_median_ms", "latency_min_ms", "throughput_eps", "repeats"):
            assert positive_finite(r[key]), (key, r)
        assert r["latency_min_ms"] <= r["latency_median_ms"]
        assert r["throughput_eps"] == pytest.approx(r["batch"] / (r["latency_median_ms"] / 1e3))
        if r["variant"] != "eager":  # every compiled path computes what eager computes
            assert r["agrees_with_eager"] is True, r
    for r in doc["results"]:
        if r["status"] != "ok":
            assert r["reason"], r  # a skip or failure always says why
    assert {r["variant"] for r in doc["results"] if r["status"] == "skipped"} == {
        "aot",
        "aot_soa",
        "alpyka_aot",
        "alpyka_aot_pc",
    }
    entry = doc["summary"]["deepmet, batch 4"]
    assert set(doc["summary"]) == {"deepmet, batch 4"}
    for key in (
        "eager events/s",
        "jit / eager",
        "SoA gather ms",
        "per-candidate gather ms",
        "alpyka best / best peer",
        "alpyka best / best peer (paired)",
    ):  # the by-hand ratio exists only for an ORT/AOT best route
        assert positive_finite(entry[key]), key
    assert entry["best peer"] in ("eager", "jit", "exported", "aot", "onnx")  # engines fed row-major, not by hand
    assert (tmp_path / "models.png").read_bytes()[:8] == PNG_MAGIC


def test_models_without_a_per_candidate_form_say_so() -> None:
    """ParticleNet's inputs are per jet: its per-candidate routes are skipped with the reason."""
    pytest.importorskip("torch")
    import models
    from _model_variants import PER_CANDIDATE, ModelVariants

    variants = ModelVariants.__new__(ModelVariants)  # only the per-candidate step, nothing exported
    variants.bm, variants.skipped = models.MODELS["particlenet"], {}
    variants._prepare_per_candidate()
    assert set(variants.skipped) == set(PER_CANDIDATE)
    assert all("no per-candidate form" in why for why in variants.skipped.values())


# ----------------------------------------------------------------------------- bench_kernels


@pytest.mark.slow  # a whole benchmark script in its smoke mode; .ci/run runs it
def test_bench_kernels_smoke(tmp_path: Path) -> None:
    """The kernel benchmark in its smoke mode (about 15 s), with the launch cost against n (on
    the selected backends; its CPU compute comparisons always run cpu_serial and cpu_threads)."""
    cpu = [b for b in selected(("cpu_serial", "cpu_threads", "opencl")) if b != "opencl"]
    proc = _run(["benchmarks/bench_kernels.py", "--smoke", "--no-progress", "--out", str(tmp_path)], timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "kernels.json").read_text())
    assert common.check_document(doc, "kernels") == []
    lvn = doc["launch_vs_n"]
    assert lvn["sizes"] == [100, 1000, 10_000]
    for name in [f"alpyka_{b}_{q}" for b in cpu for q in ("blocking", "nonblocking")] + ["numba_njit", "numba_prange"]:
        assert set(lvn["us"][name]) == {"100", "1000", "10000"}, name
        assert all(positive_finite(v) for v in lvn["us"][name].values()), (name, lvn["us"][name])
    # Warp and opencl are there, or say why not
    assert "warp_cpu" in lvn["us"] or lvn["errors"].get("warp_cpu")
    for n in ("1e+02", "1e+03", "1e+04"):  # one summary row per size, contenders as columns
        assert set(doc["summary"][f"non-blocking adds us, n={n}"]) == set(cpu)
        assert "numba_prange" in doc["summary"][f"launch us, n={n}"]
    assert (tmp_path / "kernels.png").read_bytes()[:8] == PNG_MAGIC


# ----------------------------------------------------------------------------- run_all

_GOOD = """
import sys
sys.path.insert(0, {bench!r})
import _common as common
args = common.parse_args(common.make_parser("good"))
rows = [{{"variant": "a", "value": 2.0}}, {{"variant": "b", "status": "skipped", "reason": "no device"}}]
doc = common.result_document("good", "cpu", args.quick, rows,
                             {{"size 4": {{"b / a": 1.5, "c / a": None}}, "speed-up": 2.0}}, smoke=args.smoke)
common.write_json(args.out, "good", doc)
plt = common.pyplot()
fig, ax = plt.subplots()
ax.plot([1, 2], [3, 4])
common.save_figure(fig, args.out, "good")
"""
_FAILING = "raise RuntimeError('boom in the benchmark')\n"
_SLOW = "import time\ntime.sleep(60)\n"
_SILENT = "import argparse\nargparse.ArgumentParser().parse_known_args()\n"  # exits 0, writes nothing
_BAD = """
import json, sys
out = sys.argv[sys.argv.index("--out") + 1]
json.dump({{"benchmark": "bad", "results": []}}, open(out + "/bad.json", "w"))
"""


def test_run_all_records_results_and_failures(tmp_path: Path) -> None:
    bench_dir, out = tmp_path / "benches", tmp_path / "results"
    bench_dir.mkdir()
    scripts = {"good": _GOOD, "failing": _FAILING, "slow": _SLOW, "silent": _SILENT, "bad": _BAD}
    for name, text in scripts.items():
        (bench_dir / f"bench_{name}.py").write_text(textwrap.dedent(text.format(bench=str(BENCH))))
    (bench_dir / "helper.py").write_text("raise SystemExit('not a benchmark: must not run')\n")
    proc = _run(
        [
            "benchmarks/run_all.py",
            "--quick",
            "--no-progress",
            "--bench-dir",
            str(bench_dir),
            "--out",
            str(out),
            "--timeout",
            "8",
        ],
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some benchmarks failed
    suite = json.loads((out / "suite.json").read_text())
    assert common.check_document(suite, "suite") == []
    assert suite["summary"] == {
        "bad": "bad result",
        "failing": "failed",
        "good": "ok",
        "silent": "no result",
        "slow": "timeout",
    }
    by_name = {r["name"]: r for r in suite["results"]}
    assert "boom in the benchmark" in by_name["failing"]["detail"]
    assert "missing key" in by_name["bad"]["detail"]
    assert by_name["slow"]["wall_s"] < 30
    good = json.loads((out / "good.json").read_text())
    assert good["quick"] is True and good["smoke"] is False  # --quick passed, --smoke not
    md = (out / "SUMMARY.md").read_text()  # made from the valid documents: good's, not bad's
    assert "| good | [good.json](good.json) |" in md and "bad.json" not in md
    assert "| | b / a | c / a |" in md and "| size 4 | 1.5 | — |" in md  # the ratios side by side
    assert "| speed-up | 2 |" in md
    assert "Skipped: b: no device" in md
    assert "![good](good.png)" in md
    assert (out / "logs" / "failing.log").exists()


def test_run_all_only_and_unknown(tmp_path: Path) -> None:
    bench_dir = tmp_path / "benches"
    bench_dir.mkdir()
    (bench_dir / "bench_good.py").write_text(textwrap.dedent(_GOOD.format(bench=str(BENCH))))

    def run_only(name: str):
        args = ["--bench-dir", str(bench_dir), "--out", str(tmp_path / "r"), "--only", name]
        return _run(["benchmarks/run_all.py", "--smoke", "--no-progress", *args], timeout=60)

    proc = run_only("nope")
    assert proc.returncode == 2 and "unknown benchmark" in proc.stderr and "good" in proc.stderr
    assert "run_all.py: error: unknown benchmark" in proc.stderr, proc.stderr  # the usage's prog, as argparse's
    # --timeout 0 was the default, a negative one stopped every benchmark at once as a "timeout"
    for bad in ("0", "-5", "nan", "inf", "soon"):
        proc = _run(
            ["benchmarks/run_all.py", "--smoke", "--no-progress", "--bench-dir", str(bench_dir)]
            + ["--out", str(tmp_path / "t"), "--timeout", bad],
            timeout=60,
        )
        assert proc.returncode == 2 and "argument --timeout: expected a finite number of seconds" in proc.stderr, (
            bad,
            proc.stdout + proc.stderr,
        )
    proc = run_only("good")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    good = json.loads((tmp_path / "r" / "good.json").read_text())
    assert good["smoke"] is True and good["quick"] is True


# ----------------------------------------------------------------------------- _common


def test_an_out_that_cannot_be_a_directory_is_refused_before_the_run(tmp_path: Path, capsys) -> None:
    """``--out FILE`` (or a path under a file) was FileExistsError's traceback from every
    benchmark and from ``alpyka bench``: now argparse's one line naming ``--out``."""
    a_file = tmp_path / "results.txt"
    a_file.write_text("")
    for out, said in ((a_file, " is a file; give a directory"), (a_file / "below", ": cannot make the results")):
        with pytest.raises(SystemExit) as ended:
            common.parse_args(common.make_parser("x"), ["--quick", "--out", str(out)])
        assert ended.value.code == 2
        err = capsys.readouterr().err
        assert f"error: --out {out}{said}" in err, err
    args = common.parse_args(common.make_parser("x"), ["--smoke", "--out", str(tmp_path / "new" / "dir")])
    assert args.quick and args.out.is_dir()


def test_measure_and_document_helpers(tmp_path: Path) -> None:
    calls: list[int] = []
    t = common.measure(lambda: calls.append(1), warmup=2, repeats=4)
    assert len(calls) == 6 and len(t.times) == 4 and t.min <= t.median <= max(t.times)
    t = common.measure(lambda: None, warmup=0, repeats=100, min_repeats=3, budget_s=0.0)
    assert len(t.times) == 3  # the budget stops it once min_repeats calls were timed
    timing = common.Timing([1.0, 2.0, 3.0, 4.0])
    assert timing.percentile(50) == 2.5 and timing.percentile(90) == pytest.approx(3.7)
    assert timing.as_dict("latency")["latency_median_ms"] == 2500.0
    with pytest.raises(ValueError):
        common.measure(lambda: None, repeats=0)
    assert common.ratio(3.0, 2.0) == 1.5 and common.ratio(None, 2.0) is None and common.ratio(1.0, 0) is None

    doc = common.result_document("x", "cpu", False, [{"v": float("nan")}], {"r": float("inf")}, extra_key=1)
    path = common.write_json(tmp_path, "x", doc)
    loaded = json.loads(path.read_text())  # strict JSON: NaN/inf became null
    assert loaded["results"] == [{"v": None}] and loaded["summary"] == {"r": None} and loaded["extra_key"] == 1
    assert common.check_document(loaded, "x") == []
    assert common.check_document(loaded, "y") == ["benchmark is 'x', expected 'y'"]
    assert common.check_document({"benchmark": "x"}, "x")[0] == "missing key 'device'"
    with pytest.raises(ValueError):
        common.result_document("x", "cpu", False, [], {}, machine=1)  # would overwrite a document key
    assert common.format_number(1234.4) == "1,234" and common.format_number(12) == "12"
    assert common.format_number(0.012345) == "0.0123" and common.format_number(None) == "—"
