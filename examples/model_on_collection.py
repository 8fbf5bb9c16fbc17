"""A PyTorch model reading and writing SoA columns in place, between two kernels.

Run: python examples/model_on_collection.py [backend]

The input block ``features`` = columns (x, y, z) is a [n, 3] tensor with strides [1, padded]
over the collection's own memory (no copy on CPU, CUDA and ROCm); the model's [n, 2] output is
written into the columns (u, v). Kernel -> model -> kernel run on one queue, no wait between.
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


class Hits(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)
    z = soa.column(np.float32)
    u = soa.column(np.float32)
    v = soa.column(np.float32)
    s = soa.column(np.float32)


@pk.kernel
def fill(acc, hits, n):
    for i in acc.uniform_elements(n):
        hits.x[i] = 0.001 * i
        hits.y[i] = 1.0
        hits.z[i] = -0.5 * hits.x[i]


@pk.kernel
def combine(acc, hits, n):
    for i in acc.uniform_elements(n):
        hits.s[i] = hits.u[i] + hits.v[i]


def main(backend: str | None = None) -> None:
    dev = pk.device(backend or pk.default_backend())
    q = pk.Queue(dev)
    n = 10_000
    hits = pk.PortableCollection(Hits, n, q)

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).eval()
    model = Model(net).to(q)  # the queue's device and stream

    inputs = SoAMetadata(hits).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(hits).append_block("preds", "u", "v")
    print("input tensor:", tuple(inputs.block("features").shape), "strides", inputs.block("features").strides)

    wd = pk.valid_workdiv(dev, n)
    pk.exec(q, wd, fill, hits.view(), n)
    model.forward(ModelMetadata(inputs, outputs))  # enqueued after fill, before combine
    pk.exec(q, wd, combine, hits.view(), n)
    host = hits.to_host(q)
    q.wait()

    x = np.stack([host.x, host.y, host.z], axis=1)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    assert np.allclose(host.s, want.sum(axis=1), atol=1e-5)
    print(f"kernel -> model -> kernel on {dev}: OK ({model!r})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser, device_check=torch_device)  # a device whose work torch can run
    sys.exit(run_script(main, parser.parse_args().backend))
