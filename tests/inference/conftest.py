"""Fixtures of the inference tests: collections on the backend under test and one AOT package."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the inference tests need PyTorch")

import portable as pk  # noqa: E402
from alpyka_testing import inference as testmodels  # noqa: E402
from alpyka_testing.artifact_cache import cached_dir, content_key  # noqa: E402
from alpyka_testing.inference import Particles, Preds, fill_particles, skip_unless_onnx_runs_on  # noqa: E402

#: the test models' file: `python -m inference.aot` loads it by path (a ``file.py:callable`` spec)
TESTMODELS = Path(inspect.getsourcefile(testmodels))


@pytest.fixture(autouse=True)
def _onnx_route_runs_here(request):
    """A test's ONNX parametrisation (a parameter of value ``"onnx"``: fmt, route, kind) on a
    device this ONNX Runtime has no execution provider for is skipped, naming what to install
    (tests that only run ONNX call ``skip_unless_onnx_runs_on`` themselves). After the root
    conftest's stand-in fixture, so the stand-in's CPU torch device is what is asked about."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "device" not in request.fixturenames:
        return
    if any(isinstance(v, str) and v == "onnx" for v in callspec.params.values()):
        skip_unless_onnx_runs_on(request.getfixturevalue("device"))


@pytest.fixture
def make_particles(queue):
    """``make_particles(n, seed)`` -> (collection on the queue's device, the data as numpy)."""

    def make(n: int, seed: int = 0):
        data = fill_particles(n, seed)
        coll = pk.PortableCollection.from_dict(Particles, data, queue)
        return coll, data

    return make


@pytest.fixture
def make_preds(queue):
    """``make_preds(n, fill=...)`` -> an output collection on the queue's device, every byte of
    every column set from ``fill`` (so unchanged columns can be checked)."""

    def make(n: int, fill: float = -7.0):
        data = {k: np.full(n, fill, dtype=Preds.field(k).dtype) for k in Preds.field_names()}
        return pk.PortableCollection.from_dict(Preds, data, queue)

    return make


def host_columns(coll, queue) -> dict[str, np.ndarray]:
    """Copies of a collection's columns (waits for the queue)."""
    return coll.to_dict(queue)


@pytest.fixture(scope="session")
def aot_packages():
    """``aot_packages(device_type)``: the test MLP compiled for ``"cpu"`` or ``"cuda"`` through
    `python -m inference.aot`: built once and kept under $ALPYKA_CACHE_DIR, keyed by the model's
    source, alpyka's compile code, torch's version, the CPU and the device type
    (alpyka_testing/artifact_cache.py)."""
    from inference import aot

    def package(device_type: str) -> str:
        def build(d: Path) -> None:
            model = f"{TESTMODELS}:make_mlp"
            rc = aot.main([model, "--input-shape", "64,3", "--device", device_type, "-o", str(d / "mlp.pt2")])
            assert rc == 0, f"compiling the test MLP for {device_type} failed"

        sources = [TESTMODELS, Path(inspect.getsourcefile(aot))]
        key = content_key(sources, ["torch"], compiled=True, extra=device_type)
        return str(cached_dir(f"aot-mlp-{device_type}", key, build) / "mlp.pt2")

    return package


@pytest.fixture(scope="session")
def aot_package(aot_packages) -> str:
    """The test MLP compiled for the CPU (:func:`aot_packages`)."""
    return aot_packages("cpu")


@pytest.fixture
def queue_aot_package(queue, aot_packages) -> str:
    """The test MLP compiled for the torch device type models run on for the queue's device (a
    package is fixed to the device type it was compiled for: a cuda queue refuses a CPU one)."""
    from inference._model import torch_device  # after the stand-in fixture: its CPU device there

    return aot_packages(torch_device(queue.device).type)


def _double_model():
    class Double(torch.nn.Module):
        def forward(self, x):  # type: ignore[override]
            return x * 2.0 + 1.0

    return Double()


def _export_all(d: Path) -> dict[str, str]:
    from alpyka_testing.inference import MLP, PerItem, Totals, TwoHeads, UsesEverything
    from inference import export

    n = 8
    f = torch.randn(n, 3)
    every = (f, torch.randn(n, 3), torch.randn(n, 2, 3), torch.randn(n, 1))
    out: dict[str, str] = {}
    for name, module, example, names in (
        ("mlp", MLP(), (f,), {}),
        ("heads", TwoHeads(), (f,), {"output_names": ["preds", "score"]}),
        ("everything", UsesEverything(), every, {}),
        ("totals", Totals(), (f,), {}),
        ("per_item", PerItem(), (torch.randn(n, 5, 3),), {}),
    ):
        for suffix in ("onnx", "pt2"):
            out[f"{name}.{suffix}"] = export(
                module, example, d / f"{name}.{suffix}", **(names if suffix == "onnx" else {})
            )
    out["double.onnx"] = export(_double_model(), (torch.randn(n, 1),), d / "double.onnx")
    return out


@pytest.fixture(scope="session")
def exported_files() -> dict[str, str]:
    """The test models exported by ``inference.export``, once, kept under $ALPYKA_CACHE_DIR
    (keyed by the models' source, this file, alpyka's export code and the versions of torch,
    onnx and onnxscript): ``{"mlp.onnx", "mlp.pt2", "heads.onnx" (outputs named preds/score),
    "heads.pt2", "everything.onnx", "everything.pt2", "totals.onnx", "totals.pt2" ([n, 3] in,
    [1, 2] out), "per_item.onnx", "per_item.pt2" ([n, 5, 3] in, [n, 2] out),
    "double.onnx" (one column in, one out)}``."""
    from inference import aot, export

    # export's module and the aot module it builds on
    sources = [TESTMODELS, Path(__file__), Path(inspect.getsourcefile(export)), Path(inspect.getsourcefile(aot))]
    d = cached_dir("exported", content_key(sources, ["torch", "onnx", "onnxscript"]), _export_all)
    files = {p.name: str(p) for p in d.iterdir() if p.suffix in (".onnx", ".pt2")}
    assert len(files) == 11, sorted(files)
    return files
