"""The smallest portable kernel: y = a*x + y over a SoA collection, on any backend.

Run: python examples/minimal_kernel.py [backend]      (default: the fastest CPU backend)
"""

import argparse
import sys

import numpy as np

import portable as pk
import soa
from portable.cli import backend_argument, description, run_script


class Points(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)


@pk.kernel
def axpy(acc, out, inp, a, n):
    for i in acc.uniform_elements(n):  # each thread takes its elements, grid-strided
        out.y[i] = a * inp.x[i] + inp.y[i]


def main(backend: str | None = None) -> None:
    dev = pk.device(backend or pk.default_backend())
    q = pk.Queue(dev)  # non-blocking: work runs in order, the caller goes on
    n = 100_000
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)

    inp = pk.PortableCollection.from_dict(Points, {"x": x, "y": y}, q)
    out = pk.PortableCollection(Points, n, q)
    wd = pk.valid_workdiv(dev, n)  # alpaka's valid work division for this device
    pk.exec(q, wd, axpy, out.view(), inp.const_view(), np.float32(2.0), n)
    host = out.to_host(q)
    q.wait()

    assert np.allclose(host.y, 2.0 * x + y)
    print(f"axpy on {dev} with {wd}: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=description(__doc__))
    backend_argument(parser)
    sys.exit(run_script(main, parser.parse_args().backend))
