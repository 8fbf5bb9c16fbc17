"""A torch.export program deployed on a device other than the one it was exported on: the
devices burnt into its graph move with its weights (``inference._loading.exported_module``).

Exported on the CPU, a ``.to(dtype)`` leaves ``aten._assert_tensor_metadata(device=cpu)`` in
the graph; ``module().to("cuda")`` kept it and failed on CUDA tensors ("Tensor device mismatch!
Expected: cpu, Got: cuda:0"). Without a GPU the move is checked on torch's ``meta`` device."""

from __future__ import annotations

import sys

import pytest
import torch

from inference import Model
from inference._loading import exported_module


class Casts(torch.nn.Module):
    """A Linear and a ``.to(dtype)`` (the node that carries the export's device)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.lin(x) + i.to(torch.float32).unsqueeze(1)


def _inputs(device: str = "cpu"):
    return torch.randn(4, 3, device=device), torch.arange(4, dtype=torch.int32, device=device)


def _graph_devices(module: torch.nn.Module) -> set[str]:
    return {str(torch.device(n.kwargs["device"])) for n in module.graph.nodes if "device" in n.kwargs}


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "casts.pt2"
    torch.export.save(torch.export.export(Casts(), _inputs()), path)
    return str(path)


def test_the_graph_and_the_weights_move_and_the_program_stays(program):
    ep = torch.export.load(program)
    x, i = _inputs()
    want = Casts()(x, i)
    on_meta = exported_module(ep, torch.device("meta"))
    assert all(p.device.type == "meta" for p in on_meta.parameters())
    assert _graph_devices(on_meta) <= {"meta"}
    assert on_meta(x.to("meta"), i.to("meta")).device.type == "meta"
    on_cpu = exported_module(ep, "cpu")  # the program itself was not moved
    assert _graph_devices(on_cpu) <= {"cpu"}
    torch.testing.assert_close(on_cpu(x, i), want)


def test_a_model_deploys_one_program_on_two_devices(program):
    model = Model(program)
    assert model.kind == "exported"
    meta = model.module_for(torch.device("meta"))
    cpu = model.module_for(torch.device("cpu"))
    assert _graph_devices(meta) <= {"meta"} and _graph_devices(cpu) <= {"cpu"}
    x, i = _inputs()
    torch.testing.assert_close(cpu(x, i), Casts()(x, i))


def test_a_torch_without_the_pass_moves_the_weights(program, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.export.passes", None)  # `from ... import` fails
    ep = torch.export.load(program)
    x, i = _inputs()
    torch.testing.assert_close(exported_module(ep, "cpu")(x, i), Casts()(x, i))
    assert all(p.device.type == "meta" for p in exported_module(ep, "meta").parameters())
