"""A per-event model fed from a collection of one row per candidate (CMSSW's layout of
particle-flow candidates), its per-event result written into a collection of one row per event.

Run: python examples/per_candidate_model.py [backend]

A DeepMET-like model reads [events, candidates, features]. Stored one row per candidate, the
columns (px, py, pt, eta) are four dense columns of events * candidates rows; the block
``features`` groups each event's rows into one item (``rows_per_item=CANDIDATES``), so the model
receives [events, candidates, 4] (a view, strides [candidates, 1, padded]) and returns
[events, 2], written into the event collection's (met_x, met_y): the same model that would read
one matrix column [candidates, 4] per event, unchanged. For the row-major engines (ONNX Runtime,
AOTInductor) this layout is gathered near the speed of a plain copy, where one matrix column per
event is padded column by column (docs/inference.md, "Per-candidate inputs").
"""

import argparse
import sys

import numpy as np

import portable as pk
import soa
from portable.cli import backend_argument, ctrl_c_as_one_line, description, run_script

with ctrl_c_as_one_line():  # (torch, and inference's models with it, take seconds to import)
    import torch

    from inference import Model, ModelMetadata, SoAMetadata, torch_device

CANDIDATES = 64  # per event, zero-padded


class Candidates(soa.Layout):
    px = soa.column(np.float32)
    py = soa.column(np.float32)
    pt = soa.column(np.float32)
    eta = soa.column(np.float32)


class Events(soa.Layout):
    met_x = soa.column(np.float32)
    met_y = soa.column(np.float32)
    met = soa.column(np.float32)


class WeightedMET(torch.nn.Module):
    """A learned non-negative weight per candidate; the MET is minus the weighted (px, py) sum."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1), torch.nn.Softplus()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [events, candidates, 4]
        return -(self.mlp(x) * x[:, :, 0:2]).sum(dim=1)  # [events, 2]


@pk.kernel
def fill(acc, cands, rows, per_event):
    for i in acc.uniform_elements(rows):
        k = i % per_event
        if k < 10 + (i // per_event) % 40:  # a varying count per event, the rest zero
            cands.px[i] = 0.5 + 0.01 * k
            cands.py[i] = -0.25 + 0.02 * (i % 7)
            cands.pt[i] = 1.0 + 0.1 * k
            cands.eta[i] = -2.0 + 0.05 * (i % 80)
        else:
            cands.px[i] = 0.0
            cands.py[i] = 0.0
            cands.pt[i] = 0.0
            cands.eta[i] = 0.0


@pk.kernel
def magnitude(acc, events, n):
    for i in acc.uniform_elements(n):
        events.met[i] = (events.met_x[i] * events.met_x[i] + events.met_y[i] * events.met_y[i]) ** 0.5


def main(backend: str | None = None) -> None:
    dev = pk.device(backend or pk.default_backend())
    q = pk.Queue(dev)
    n_events = 200
    rows = n_events * CANDIDATES
    cands = pk.PortableCollection(Candidates, rows, q)
    events = pk.PortableCollection(Events, n_events, q)

    torch.manual_seed(0)
    net = WeightedMET().eval()
    model = Model(net).to(q)
    inputs = SoAMetadata(cands).append_block("features", "px", "py", "pt", "eta", rows_per_item=CANDIDATES)
    outputs = SoAMetadata(events).append_block("met", "met_x", "met_y")
    block = inputs.block("features")
    print(
        f"input block: {list(block.shape)} strides {list(block.strides)} ({CANDIDATES} rows per event); "
        f"output block: {list(outputs.block('met').shape)}"
    )

    pk.exec(q, pk.valid_workdiv(dev, rows), fill, cands.view(), np.int32(rows), np.int32(CANDIDATES))
    model.forward(ModelMetadata(inputs, outputs))  # enqueued after fill, before magnitude
    pk.exec(q, pk.valid_workdiv(dev, n_events), magnitude, events.view(), np.int32(n_events))
    got = events.to_dict(q)  # the only wait

    host = cands.to_dict(q)
    x = torch.from_numpy(np.stack([host["px"], host["py"], host["pt"], host["eta"]], axis=1))
    x = x.view(n_events, CANDIDATES, 4)
    with torch.no_grad():
        want = net(x).numpy()
    np.testing.assert_allclose(np.stack([got["met_x"], got["met_y"]], axis=1), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["met"], np.hypot(want[:, 0], want[:, 1]), rtol=1e-4, atol=1e-4)
    print(f"{rows} candidates -> {n_events} events on {dev}: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser, device_check=torch_device)  # a device whose work torch can run
    sys.exit(run_script(main, parser.parse_args().backend))
