"""Every example runs as a newcomer would run it, and says OK (``python examples/<name>.py``, in a
fork of the warm interpreter of alpyka_testing.warm_python: the same run, without each child
importing torch anew)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpyka_testing import warm_python

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


#: runs an example in a child process whose cuda/rocm backend is the cupy stand-in that serves
#: it in this test run (backends/emulator/fake_cupy_kernels.py; the child has no GPU either;
#: the repository root is on its PYTHONPATH)
_ON_STANDIN = """
import runpy, sys
from portable import _registry
_registry.emulate([{backend!r}])
try:
    import torch  # noqa: F401
except ImportError:
    pass
else:
    import pytest
    from alpyka_testing.backends import standin_torch
    standin_torch.patch_torch(pytest.MonkeyPatch())
sys.argv = [{path!r}, *{args!r}]
runpy.run_path({path!r}, run_name="__main__")
"""


def run_example(name: str, *args: str, timeout: float = 300, backend: str | None = None) -> str:
    """Run ``examples/name`` with ``args`` (``backend`` first when given) as a newcomer would."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    path = str(EXAMPLES / name)
    if backend is not None:
        args = (backend, *args)
    argv = [path, *args]
    if backend is not None and backend in _standin_backends():
        argv = ["-c", _ON_STANDIN.format(backend=backend, path=path, args=list(args))]
    res = warm_python.run(argv, timeout=timeout, env=env)  # as `python path *args`, from a warm interpreter
    assert res.returncode == 0, f"{name} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _standin_backends() -> list[str]:
    """The backends tests/conftest.py installed the cupy stand-in as in this test run."""
    from backends.emulator.fake_cupy_kernels import served_here

    return served_here()


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
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_soa_tour():
    out = run_example("soa_tour.py")
    assert "byte alignment=128" in out and "round trip OK" in out


def test_minimal_kernel(backend):
    assert "OK" in run_example("minimal_kernel.py", backend=backend)


def test_model_on_collection(backend):
    pytest.importorskip("torch")
    assert "kernel -> model -> kernel" in run_example("model_on_collection.py", backend=backend)


# one backend per memory path (host memory, the copy path, device memory): the path a model's
# reads and writes take; the rows-in != rows-out forward is tested on every backend in
# tests/inference/test_exported_models.py
@pytest.mark.alpyka_backends("cpu_serial", "opencl", "cuda")
def test_per_candidate_model(backend):
    pytest.importorskip("torch")
    out = run_example("per_candidate_model.py", backend=backend)
    assert "12800 candidates -> 200 events" in out and "OK" in out
    assert "input block: [200, 64, 4] strides [64, 1, 12800]" in out and "output block: [200, 2]" in out


def test_remote_model():
    pytest.importorskip("pytriton", reason="needs nvidia-pytriton (pip install -e '.[triton]')")
    out = run_example("remote_model.py")
    assert "remote and local results agree: OK" in out


def test_pipeline_service():
    pytest.importorskip("pytriton", reason="needs nvidia-pytriton (pip install -e '.[triton]')")
    out = run_example("pipeline_service.py", "--device", "cpu_threads")
    assert "hits__gain float32 [1]" in out and "local and remote agree on 1000 rows" in out


def test_pipeline(demo_model_dir, monkeypatch):
    monkeypatch.setenv("ALPYKA_MODEL_DIR", str(demo_model_dir))
    out = run_example("pipeline.py", "--events", "6", "--streams", "2", "--no-progress")
    assert "GNN merging" in out and "distance-only baseline" in out


def test_dimuon_mass(backend, tmp_path):
    for extra in ("awkward", "uproot", "skhep_testdata"):
        pytest.importorskip(extra, reason="pip install -e '.[data]' scikit-hep-testdata==0.3.12")
    out = run_example("dimuon_mass.py", "--out", str(tmp_path), backend=backend)
    assert out.count("agree with numpy: OK") == 3
    assert (tmp_path / "dimuon_mass.png").exists() or "no plot" in out


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


def test_pixel_clustering_runs_as_a_script(backend):
    out = run_example("pixel_clustering.py", "--modules", "12", "--clusters", "20", "--check", backend=backend)
    assert "matches the plain connected components" in out


def test_cluster_charge_cut_runs_as_a_script(backend):
    out = run_example("cluster_charge_cut.py", "--modules", "40", "--repeats", "2", backend=backend)
    assert "matches the numpy reference: OK" in out and "40 modules" in out
