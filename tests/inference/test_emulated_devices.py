"""Models on a device of the GPU emulator (``ALPYKA_EMULATE``): torch has no device for its memory,
so a model there is refused with an error naming the fix (was torch's "Torch not compiled with
CUDA enabled" AssertionError from deep inside ``Model.forward``, e.g. ``alpyka demo --backend cuda``)."""

from __future__ import annotations

import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Particles, Preds
from inference import Model, ModelMetadata, SoAMetadata, _model, _tensors, _torch_queue
from inference._torch_queue import torch_device  # the library's own (the suite stands it in on the emulator)


@pytest.fixture
def library_torch_device(monkeypatch):
    """Undo the suite's stand-in of the torch device: what a user's program sees."""
    for module in (_model, _tensors, _torch_queue):
        if hasattr(module, "torch_device"):
            monkeypatch.setattr(module, "torch_device", torch_device)


def test_torch_device_of_every_device(device):
    if device.capabilities.emulated:
        with pytest.raises(pk.ArgumentError, match=r"GPU emulator.*cpu_serial, cpu_threads or opencl.*ALPYKA_EMULATE"):
            torch_device(device)
    else:
        assert torch_device(device) == torch.device("cpu")  # host and copy paths here: no GPU


def test_a_model_on_an_emulated_queue_names_the_fix(queue, library_torch_device):
    n = 16
    inp = pk.PortableCollection(Particles, n, queue).zero(queue)
    out = pk.PortableCollection(Preds, n, queue).zero(queue)
    meta = ModelMetadata(
        SoAMetadata(inp).append_block("features", "x", "y", "z"),
        SoAMetadata(out).append_block("preds", "m", "n"),
    )
    model = Model(MLP().eval()).to(queue)
    if not queue.device.capabilities.emulated:
        model.forward(meta)
        queue.wait()
        return
    with pytest.raises(pk.ArgumentError, match="GPU emulator"):
        model.forward(meta)
        queue.wait()
