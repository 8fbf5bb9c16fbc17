"""A tour of SoA layouts and collections: the CMSSW arithmetic, views, copies, blocks.

Run: python examples/soa_tour.py
"""

import argparse

import numpy as np

import portable as pk
import soa
from portable.cli import description, run_script


class Particles(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)
    momentum = soa.vector(np.float32, 3)  # Eigen-style: one padded column per component
    covariance = soa.matrix(np.float32, 3, 3)  # column-major components
    charge = soa.column(np.int8)
    n_valid = soa.scalar(np.int32)


class Vertices(soa.Layout, alignment=64):
    z = soa.column(np.float64)


def main() -> None:
    n = 10
    print(Particles.describe(n))  # offsets, sizes, padding and pitches, as CMSSW prints them
    print()

    backend = pk.default_backend()
    dev = pk.device(backend)
    q = pk.Queue(dev)

    rng = np.random.default_rng(1)
    data = {
        "x": rng.random(n, dtype=np.float32),
        "y": rng.random(n, dtype=np.float32),
        "momentum": rng.random((n, 3), dtype=np.float32),
        "covariance": np.tile(np.eye(3, dtype=np.float32), (n, 1, 1)),
        "charge": rng.integers(-1, 2, n).astype(np.int8),
        "n_valid": np.int32(n),
    }
    coll = pk.PortableCollection.from_dict(Particles, data, q)  # one aligned buffer on the device
    host = coll.to_host(q)  # asynchronous copy ...
    q.wait()  # ... complete here
    print(f"{coll!r}")
    print(
        "host.momentum is a numpy array onto the buffer: shape",
        host.momentum.shape,
        "byte strides",
        host.momentum.strides,
    )
    assert np.array_equal(host.momentum, data["momentum"])
    assert int(host.n_valid) == n

    # several layouts in one buffer (CMSSW SoABlocks)
    event = pk.PortableCollection({"particles": Particles, "vertices": Vertices}, {"particles": n, "vertices": 3}, q)
    event.zero(q)
    q.wait()
    print(f"{event!r}: vertices start at byte {event.block_offset('vertices')}")
    print("round trip OK on", backend)


if __name__ == "__main__":
    argparse.ArgumentParser(description=description(__doc__)).parse_args()  # (none: an extra one is an error)
    raise SystemExit(run_script(main))
