"""Fixtures of the inference tests: collections on the backend under test and one AOT package."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the inference tests need PyTorch")

import portable as pk  # noqa: E402

from artifact_cache import cached_dir, content_key  # noqa: E402
from inference_testmodels import Particles, Preds, fill_particles  # noqa: E402

HERE = Path(__file__).parent


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
def aot_package() -> str:
    """The test MLP compiled for the CPU through `python -m inference.aot`: built once and kept
    under $ALPYKA_CACHE_DIR, keyed by the model's source, alpyka's compile code, torch's version
    and the CPU (tests/artifact_cache.py)."""
    from inference import aot

    def build(d: Path) -> None:
        model = f"{HERE / 'inference_testmodels.py'}:make_mlp"
        assert aot.main([model, "--input-shape", "64,3", "-o", str(d / "mlp.pt2")]) == 0

    sources = [HERE / "inference_testmodels.py", Path(inspect.getsourcefile(aot))]
    return str(cached_dir("aot-mlp", content_key(sources, ["torch"], compiled=True), build) / "mlp.pt2")


def _double_model():
    class Double(torch.nn.Module):
        def forward(self, x):  # type: ignore[override]
            return x * 2.0 + 1.0

    return Double()


def _export_all(d: Path) -> dict[str, str]:
    from inference import export
    from inference_testmodels import MLP, PerItem, Totals, TwoHeads, UsesEverything

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
            out[f"{name}.{suffix}"] = export(module, example, d / f"{name}.{suffix}",
                                             **(names if suffix == "onnx" else {}))
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
    sources = [HERE / "inference_testmodels.py", Path(__file__), Path(inspect.getsourcefile(export)),
               Path(inspect.getsourcefile(aot))]
    d = cached_dir("exported", content_key(sources, ["torch", "onnx", "onnxscript"]), _export_all)
    files = {p.name: str(p) for p in d.iterdir() if p.suffix in (".onnx", ".pt2")}
    assert len(files) == 11, sorted(files)
    return files
