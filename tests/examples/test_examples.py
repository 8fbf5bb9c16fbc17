"""Every example runs as a newcomer would run it, and says OK: once as a script (``python
examples/<name>.py [args]``: the script's ``__main__``, its argument parsing and default
backend), and, where an example takes a backend, its ``main`` in this process on every backend of
the matrix (the same code as the script but for the process start: the cuda/rocm rows on the GPU
emulator tests/conftest.py installs)."""

import ast
import functools
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import portable as pk

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

if importlib.util.find_spec("torch") is not None:
    # the torch examples' layer, imported before tests/conftest.py's autouse fixture looks for it
    # (it puts torch's CUDA device on the GPU emulator for the cuda/rocm rows)
    import inference  # noqa: F401


def run_example(name: str, *args: str, timeout: float = 300) -> str:
    """Run ``examples/name`` with ``args`` as a newcomer would (``python examples/name args``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert res.returncode == 0, f"{name} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res.stdout


@functools.cache
def example(name: str) -> ModuleType:
    """``examples/name.py`` imported as a module (once per process), for its ``main``."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main_output(capsys, name: str, *args) -> str:
    """What ``examples/name``'s ``main(*args)`` prints, run in this process; it must not fail."""
    capsys.readouterr()
    assert example(name).main(*args) in (None, 0)
    return capsys.readouterr().out


def test_every_example_is_tested():
    tested = {
        "soa_tour.py",
        "minimal_kernel.py",
        "model_on_collection.py",
        "remote_model.py",
        "pipeline.py",
        "dimuon_mass.py",
        "pipeline_service.py",
        "per_candidate_model.py",
        "pixel_clustering.py",
        "cluster_charge_cut.py",
        "sort_by_pt2.py",
        "broken_line_fit.py",  # its script and main run in test_broken_line_fit.py (its compiled kernels)
        "broken_line_reference.py",
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "broken_line_reference.py"))
def test_an_argument_an_example_does_not_take_is_an_error(name):
    """A newcomer's mistyped or extra argument is refused with the usage (exit status 2), never
    ignored: soa_tour.py and remote_model.py ran as if it were not there (``python
    examples/soa_tour.py opencl`` ran on cpu_threads and said OK), and the backend examples
    ignored what followed the backend and took a flag for a backend's name (a traceback)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--no-such-flag"], capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 2, f"{name} ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert "unrecognized arguments: --no-such-flag" in res.stderr and "Traceback" not in res.stderr, res.stderr


COUNTS = [
    ("broken_line_fit.py", "--tracks"),
    ("broken_line_fit.py", "--repeats"),
    ("broken_line_reference.py", "--tracks"),
    ("cluster_charge_cut.py", "--modules"),
    ("cluster_charge_cut.py", "--clusters"),
    ("cluster_charge_cut.py", "--repeats"),
    ("pixel_clustering.py", "--modules"),
    ("pixel_clustering.py", "--clusters"),
    ("sort_by_pt2.py", "--events"),
    ("sort_by_pt2.py", "--vertices"),
    ("sort_by_pt2.py", "--repeats"),
]


#: the arguments before the flag: the backend, where the example takes one
BACKEND_ARG = {"broken_line_reference.py": []}


@pytest.mark.parametrize(("name", "flag"), COUNTS)
def test_a_count_below_one_is_refused_with_the_usage(name, flag):
    """``--tracks 0``, ``--modules -1``, ``--repeats 0``...: a numpy error's traceback deep in the
    example (``zero-size array to reduction operation``, ``lam < 0``, ``min() arg is an empty
    sequence``), or a run that said ``0 digis in -1 modules`` and exited 0; now argparse's one
    line naming the flag (portable.cli.at_least)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *BACKEND_ARG.get(name, ["cpu_serial"]), flag, "0"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 2, f"{name} {flag} 0 ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert f"argument {flag}: expected a whole number of at least 1, got 0" in res.stderr, res.stderr


#: (example, flag, a value past what the example's kernel or reference can take, what is said)
BEYOND = [
    ("sort_by_pt2.py", "--vertices", "5000", "at most 1024"),  # ran, then printed MISMATCH
    ("cluster_charge_cut.py", "--threshold", "4294967396", "at most 2147483647"),  # int32 wrapped: MISMATCH
    ("cluster_charge_cut.py", "--threshold", "-1", "at least 0"),
    ("cluster_charge_cut.py", "--clusters", "100000", "at most 1024"),  # ran 1024 a module, said nothing
    ("broken_line_fit.py", "--seed", "-1", "at least 0"),  # numpy's traceback
    ("broken_line_reference.py", "--seed", "-1", "at least 0"),
]


@pytest.mark.parametrize(("name", "flag", "value", "said"), BEYOND)
def test_a_value_past_what_the_example_can_take_is_refused_with_the_usage(name, flag, value, said):
    """``sort_by_pt2.py --vertices 5000`` (past the kernel's 1024 shared sums, CMSSW's MAXVTX) and
    ``cluster_charge_cut.py --threshold 4294967396`` (past its int32) ran and ended in MISMATCH,
    ``--seed -1`` in numpy's traceback: now argparse's one line naming the flag and the bound."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *BACKEND_ARG.get(name, ["cpu_serial"]), flag, value],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 2, f"{name} {flag} {value} ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert f"argument {flag}: expected a whole number of {said}, got {value}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["model_on_collection.py", "per_candidate_model.py"])
def test_a_model_example_refuses_an_emulated_gpu_with_the_usage(name):
    """``ALPYKA_EMULATE=cuda python examples/model_on_collection.py cuda`` was accepted, then ended
    in a traceback at the first ``Model.forward`` (torch has no device for the emulator's memory):
    the backend argument is refused with the usage and the one line naming the fix."""
    pytest.importorskip("torch", reason="the model examples need torch (pip install -e '.[torch]')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    env["ALPYKA_EMULATE"] = "cuda"
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "cuda"], capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 2, f"{name} cuda ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert "argument backend: cuda:0 (CUDA emulated on the CPU (ALPYKA_EMULATE)): torch has no device" in res.stderr
    assert "Traceback" not in res.stderr and not res.stdout, res.stderr


def test_sort_by_pt2_events_keep_to_the_kernels_vertices():
    """A mean near the kernel's limit drew events of more than 1024 vertices (Poisson), which the
    kernel left unsorted: the generator keeps each event within it."""
    mod = example("sort_by_pt2")
    vertex_start = mod.generate_events(50, mod.MAX_VERTICES, seed=3)[1]
    assert np.diff(vertex_start).max() == mod.MAX_VERTICES


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "pipeline.py"))
def test_help_describes_the_example_with_its_whole_first_paragraph(name):
    """``--help`` showed the docstring's first line, cut mid-sentence ("CMSSW's Broken Line track
    fit (RecoTracker/PixelTrackFitting's ``brokenline`` namespace and"), or nothing
    (pipeline_service.py): now the whole first paragraph (pipeline.py is ``alpyka demo``'s)."""
    from portable.cli import description

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--help"], capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = ast.get_docstring(ast.parse((EXAMPLES / name).read_text()), clean=False)
    said = " ".join(res.stdout.split()).replace("``", "`")
    assert description(doc) in said, res.stdout


BACKEND_EXAMPLES = [
    "broken_line_fit.py",
    "cluster_charge_cut.py",
    "dimuon_mass.py",
    "minimal_kernel.py",
    "model_on_collection.py",
    "per_candidate_model.py",
    "pixel_clustering.py",
    "sort_by_pt2.py",
]


@pytest.mark.parametrize("name", BACKEND_EXAMPLES)
def test_an_unknown_backend_is_refused_with_the_usage(name):
    """``python examples/minimal_kernel.py nope`` (a typo, or ``cuda`` without cupy) ended in a
    traceback from ``pk.device`` inside the example's ``main``, exit status 1: argparse's one line
    naming the known backends now, exit status 2 (portable.cli.backend_argument); and a bad
    ``ALPYKA_BACKEND`` behind the default backend the same, naming the variable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("ALPYKA_BACKEND", None)
    for args, extra, needle in [
        (["nope"], {}, "argument backend: unknown backend 'nope'; known backends are"),
        ([], {"ALPYKA_BACKEND": "nope"}, "argument backend: environment variable ALPYKA_BACKEND='nope': unknown"),
    ]:
        res = subprocess.run(
            [sys.executable, str(EXAMPLES / name), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, **extra},
        )
        assert res.returncode == 2, f"{name} {args} ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
        assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("device", ["nope", "cpu_serial:x"])
def test_pipeline_service_refuses_an_unknown_device_with_the_usage(device):
    """``python examples/pipeline_service.py --device nope`` ran the local pipeline, then ended in
    a DeviceStringError traceback as the server started, exit status 1: argparse's one line now."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / "pipeline_service.py"), "--device", device],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 2, f"({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert "argument --device: device must be 'cpu', 'cuda[:N]' or an alpyka backend" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "out,said",
    [("a-file", "a-file is a file; give a directory"), ("a-file/sub", "is not a directory this user can write")],
    ids=["a_file", "under_a_file"],
)
def test_dimuon_mass_refuses_a_file_as_its_out_directory(tmp_path, out, said):
    """``python examples/dimuon_mass.py --out some-file`` (or a folder under a file, or one it
    cannot write) did all its work, then ended in a traceback as it saved the plot: argparse's one
    line, before the work, now."""
    pytest.importorskip("skhep_testdata")
    pytest.importorskip("awkward")
    (tmp_path / "a-file").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / "dimuon_mass.py"), "cpu_serial", "--out", str(tmp_path / out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 2, f"({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert "OK" not in res.stdout, res.stdout


def test_soa_tour():
    out = run_example("soa_tour.py")
    assert "byte alignment=128" in out and "round trip OK" in out


def test_minimal_kernel_runs_as_a_script():
    out = run_example("minimal_kernel.py")  # no argument: the default backend
    assert f"axpy on {pk.device(pk.default_backend())} " in out and "OK" in out


def test_minimal_kernel(backend, capsys):
    assert "OK" in main_output(capsys, "minimal_kernel", backend)


def test_model_on_collection_runs_as_a_script():
    pytest.importorskip("torch")
    assert "kernel -> model -> kernel on cpu_serial" in run_example("model_on_collection.py", "cpu_serial")


def test_model_on_collection(backend, capsys):
    pytest.importorskip("torch")
    assert "kernel -> model -> kernel" in main_output(capsys, "model_on_collection", backend)


def test_per_candidate_model_runs_as_a_script():
    pytest.importorskip("torch")
    out = run_example("per_candidate_model.py")
    assert "12800 candidates -> 200 events" in out and "OK" in out


# one backend per memory path (host memory, the copy path, device memory): the path a model's
# reads and writes take; the rows-in != rows-out forward is tested on every backend in
# tests/inference/test_exported_models.py
@pytest.mark.alpyka_backends("cpu_serial", "opencl", "cuda")
def test_per_candidate_model(backend, capsys):
    pytest.importorskip("torch")
    out = main_output(capsys, "per_candidate_model", backend)
    assert "12800 candidates -> 200 events" in out and "OK" in out
    assert "input block: [200, 64, 4] strides [64, 1, 12800]" in out and "output block: [200, 2]" in out


def test_remote_model():
    """It runs and agrees, with no warning: it served with max_batch_size=256 and sent 500 rows,
    and the client's BatchSplitWarning told the reader to serve it otherwise."""
    pytest.importorskip("pytriton", reason="needs nvidia-pytriton (pip install -e '.[triton]')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / "remote_model.py")], capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "remote and local results agree: OK" in res.stdout
    assert "Warning" not in res.stderr, res.stderr


def test_pipeline_service():
    pytest.importorskip("pytriton", reason="needs nvidia-pytriton (pip install -e '.[triton]')")
    out = run_example("pipeline_service.py", "--device", "cpu_threads")
    assert "hits__gain float32 [1]" in out and "local and remote agree on 1000 rows" in out


def test_pipeline(demo_model_dir, monkeypatch):
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(demo_model_dir))
    out = run_example("pipeline.py", "--events", "6", "--streams", "2", "--no-progress")
    assert "GNN merging" in out and "distance-only baseline" in out


def _dimuon_mass() -> ModuleType:
    """examples/dimuon_mass.py as the data tests import it (one copy of its layouts and kernels)."""
    for extra in ("awkward", "uproot", "skhep_testdata"):
        pytest.importorskip(extra, reason="pip install -e '.[data]' scikit-hep-testdata==0.3.12")
    importlib.import_module("alpyka_testing.data")  # puts examples/ on sys.path
    return importlib.import_module("dimuon_mass")


def test_dimuon_mass_runs_as_a_script(tmp_path):
    _dimuon_mass()
    out = run_example("dimuon_mass.py", "cpu_serial", "--out", str(tmp_path))
    assert out.count("agree with numpy: OK") == 3
    assert (tmp_path / "dimuon_mass.png").exists() or "no plot" in out


def test_dimuon_mass(backend, capsys, monkeypatch, tmp_path):
    """The kernels and checks of main on every backend; the plot (host code, the same on every
    backend) is the script run's."""
    dm = _dimuon_mass()
    plotted = []
    monkeypatch.setattr(dm, "plot", lambda out, *masses: plotted.append(out))
    monkeypatch.setattr(sys, "argv", ["dimuon_mass.py", backend, "--out", str(tmp_path)])
    capsys.readouterr()
    assert dm.main() == 0
    assert capsys.readouterr().out.count("agree with numpy: OK") == 3 and plotted == [tmp_path]


def test_dimuon_mass_names_the_extra_when_its_data_packages_are_missing(tmp_path):
    """Where scikit-hep-testdata (or awkward/uproot) is missing, the example says what to install
    instead of a raw ModuleNotFoundError: run it with skhep_testdata hidden (awkward and uproot
    present, so the message is about that one alone)."""
    for extra in ("awkward", "uproot"):
        pytest.importorskip(extra, reason="the data extra: pip install -e '.[data]'")
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'skhep_testdata':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), str(EXAMPLES.parent)])}
    res = subprocess.run(
        [sys.executable, str(EXAMPLES / "dimuon_mass.py"), "cpu_serial"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert "missing: skhep_testdata" in res.stderr and 'pip install -e ".[test]"' in res.stderr, res.stderr


def test_pixel_clustering_runs_as_a_script():
    out = run_example("pixel_clustering.py", "cpu_serial", "--modules", "12", "--clusters", "20", "--check")
    assert "cpu_serial: " in out and "12 modules" in out and "matches the plain connected components" in out


def test_pixel_clustering(backend, capsys):
    out = main_output(capsys, "pixel_clustering", [backend, "--modules", "12", "--clusters", "20", "--check"])
    assert "matches the plain connected components" in out


def test_cluster_charge_cut_runs_as_a_script():
    out = run_example("cluster_charge_cut.py", "cpu_serial", "--modules", "40", "--repeats", "2")
    assert "matches the numpy reference: OK" in out and "40 modules" in out


def test_cluster_charge_cut(backend, capsys):
    out = main_output(capsys, "cluster_charge_cut", [backend, "--modules", "40", "--repeats", "2"])
    assert "matches the numpy reference: OK" in out and "40 modules" in out


def test_sort_by_pt2_runs_as_a_script():
    out = run_example("sort_by_pt2.py", "cpu_serial", "--events", "20", "--repeats", "2")
    assert "equal numpy's: OK" in out and "20 events" in out


@pytest.mark.parametrize("sort", ["radix", "rank"])
def test_sort_by_pt2(backend, capsys, sort):
    out = main_output(capsys, "sort_by_pt2", [backend, "--events", "20", "--repeats", "1", "--sort", sort])
    assert "equal numpy's: OK" in out and f"{sort} sort" in out


def test_broken_line_reference_runs_as_a_script():
    out = run_example("broken_line_reference.py", "--tracks", "3000")
    assert out.count("hits: phi") == 3, out


def test_broken_line_reference_prints_no_nan_for_an_absent_hit_count():
    """``--tracks 1`` printed "nan/nan" pulls for the hit counts no track had, exit status 0: only
    the hit counts that have tracks are printed now."""
    out = run_example("broken_line_reference.py", "--tracks", "1")
    assert out.count("hits: phi") == 1 and "nan" not in out, out
