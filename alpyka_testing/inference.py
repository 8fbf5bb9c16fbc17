"""Layouts and small models shared by the inference tests (tests/inference; also loaded by file path
by `inference.aot`'s and `alpyka export`'s command lines)."""

from __future__ import annotations

import numpy as np
import torch

import portable as pk
import soa


class Particles(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)
    z = soa.column(np.float32)
    p = soa.vector(np.float32, 3)
    q = soa.vector(np.float32, 3)
    cov = soa.matrix(np.float32, 2, 3)
    cov2 = soa.matrix(np.float32, 2, 3)
    w = soa.column(np.float64)
    charge = soa.column(np.int32)
    n_valid = soa.scalar(np.int32)
    scale = soa.scalar(np.float32)
    shift = soa.scalar(np.float32)


class Preds(soa.Layout):
    m = soa.column(np.float32)
    n = soa.column(np.float32)
    score = soa.column(np.float32)
    extra = soa.column(np.float64)


class MLP(torch.nn.Module):
    """3 features -> 2 outputs; deterministic weights."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1234)
        self.l1 = torch.nn.Linear(3, 16)
        self.l2 = torch.nn.Linear(16, 2)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


def make_mlp() -> MLP:
    return MLP()


class TwoHeads(torch.nn.Module):
    """Features -> (preds [n, 2], score [n]) as a tuple, or as a dict when ``as_dict``."""

    def __init__(self, as_dict: bool = False) -> None:
        super().__init__()
        self.mlp = MLP()
        self.as_dict = as_dict

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        preds = self.mlp(x)
        score = torch.sigmoid(preds.sum(dim=1))
        if self.as_dict:
            return {"score": score, "preds": preds}
        return preds, score


class Totals(torch.nn.Module):
    """Features [n, 3] -> the MLP's outputs summed over all rows, [1, 2]: fewer rows out than in
    (what a per-event result of per-candidate inputs is)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x).sum(dim=0, keepdim=True)


class PerItem(torch.nn.Module):
    """Features [items, R, 3] -> [items, 2]: the MLP's outputs of each item's R rows summed (a
    per-event model of per-candidate inputs, as DeepMET is)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x).sum(dim=1)


class UsesEverything(torch.nn.Module):
    """Features, a vector, a matrix and a scalar block in; a [n, 2] result."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, f, p, cov, scale):  # type: ignore[override]
        out = self.mlp(f + p)
        return out * scale + cov.sum(dim=(1, 2), keepdim=False).unsqueeze(1)


def fill_particles(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(n).astype(np.float32),
        "y": rng.standard_normal(n).astype(np.float32),
        "z": rng.standard_normal(n).astype(np.float32),
        "p": rng.standard_normal((n, 3)).astype(np.float32),
        "q": rng.standard_normal((n, 3)).astype(np.float32),
        "cov": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "cov2": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "w": rng.standard_normal(n),
        "charge": rng.integers(-1, 2, n).astype(np.int32),
        "n_valid": np.int32(n),
        "scale": np.float32(1.5),
        "shift": np.float32(-0.25),
    }


def features(data: dict[str, np.ndarray]) -> torch.Tensor:
    """The [n, 3] features block computed from the data (a copy, for references)."""
    return torch.from_numpy(np.stack([data["x"], data["y"], data["z"]], axis=1).copy())


def onnx_unavailable(device) -> str | None:
    """Why an ONNX model cannot run here for work of ``device``, else None: ONNX Runtime is
    missing, or lacks the execution provider that the device's torch device needs (the CPU-only
    ``onnxruntime`` on a CUDA machine). The library decides, as ``Model(...).to(queue)`` would:
    its message names what to install (``pip install 'alpyka[onnx-gpu]'``)."""
    from inference import _model  # its torch_device, as patch_torch may have replaced it
    from inference._loading import ModelFileError
    from inference._onnx import choose_provider, import_ort

    try:
        ort = import_ort()
        choose_provider(_model.torch_device(device).type, ort.get_available_providers())
    except (ImportError, ModelFileError) as exc:
        return str(exc)
    return None


def skip_unless_onnx_runs_on(device) -> None:
    """Skips the calling test where :func:`onnx_unavailable` gives a reason."""
    reason = onnx_unavailable(device)
    if reason is not None:
        import pytest

        pytest.skip(f"ONNX models cannot run on {device.backend_name} here: {reason}")


@pk.kernel
def fill_xyz(acc, coll, n):
    for i in acc.uniform_elements(n):
        coll.x[i] = i * 0.01
        coll.y[i] = 1.0 - i * 0.02
        coll.z[i] = (i % 7) * 0.25


@pk.kernel
def combine(acc, out, n):
    for i in acc.uniform_elements(n):
        out.score[i] = out.m[i] + 2.0 * out.n[i]


def kernel_model_kernel(device, source, n: int) -> None:
    """``fill_xyz`` -> ``Model(source)`` (the MLP: a module or a file of it) -> ``combine``, all
    enqueued on one non-blocking queue with one wait at the end; checked against the MLP."""
    from inference import Model, ModelMetadata, SoAMetadata

    q = pk.Queue(device)  # non-blocking
    coll = pk.PortableCollection(Particles, n, q)
    out = pk.PortableCollection(Preds, n, q)
    model = Model(source).to(q)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    wd = pk.valid_workdiv(device, n)
    pk.exec(q, wd, fill_xyz, coll.view(), np.int32(n))
    model.forward(meta)
    pk.exec(q, wd, combine, out.view(), np.int32(n))
    cols = out.to_dict(q)  # the only wait
    i = np.arange(n)
    x = np.stack([i * 0.01, 1.0 - i * 0.02, (i % 7) * 0.25], axis=1).astype(np.float32)
    with torch.no_grad():
        ref = MLP()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols["score"], ref[:, 0] + 2 * ref[:, 1], rtol=1e-5, atol=1e-5)
