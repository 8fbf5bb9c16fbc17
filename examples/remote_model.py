"""The same model call, sent to a Triton inference server (the SONIC pattern).

Run: python examples/remote_model.py

Starts a real Triton server on a free loopback port through PyTriton (``inference.serve``,
also ``alpyka serve``), then sends a SoA block with ``RemoteModel.forward`` exactly as a local
``Model`` would; the outputs land in the collection. The server is stopped at the end.
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np

import portable as pk
import soa
from portable.cli import ctrl_c_as_one_line, description, run_script

with ctrl_c_as_one_line():  # (torch, and inference's models with it, take seconds to import)
    import torch

    from inference import Model, ModelMetadata, RemoteModel, SoAMetadata, serve


class Rows(soa.Layout):
    a = soa.column(np.float32)
    b = soa.column(np.float32)
    c = soa.column(np.float32)
    out = soa.column(np.float32)


def main() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.pt"
        torch.jit.script(net).save(str(path))
        run(path)


def run(path: Path) -> None:
    """Serve the model at ``path``, send a block to it, then run the same call locally."""
    q = pk.Queue(pk.device("cpu_serial"))
    n = 500
    rng = np.random.default_rng(0)
    rows = pk.PortableCollection.from_dict(
        Rows,
        {
            "a": rng.random(n, dtype=np.float32),
            "b": rng.random(n, dtype=np.float32),
            "c": rng.random(n, dtype=np.float32),
            "out": np.zeros(n, np.float32),
        },
        q,
    )
    md = ModelMetadata(
        SoAMetadata(rows).append_block("features", "a", "b", "c"), SoAMetadata(rows).append_block("y", "out")
    )

    # dynamic batching, 127.0.0.1, free ports; a request takes as many rows as fit in 32 MiB (a
    # smaller max_batch_size splits a forward into several requests, and the client warns: rows
    # are cheap, round trips are not)
    with serve(str(path), name="mlp", inputs=["features:float32:3"], outputs=["y:float32:1"]) as server:
        print("Triton is serving 'mlp' at", server.grpc_url)
        with RemoteModel(server.grpc_url, "mlp", timeout=30) as remote:
            remote.to(q).forward(md)  # one request, in queue order
            q.wait()
            remote_out = rows.view().out.copy()
            print(remote.statistics())

    Model(str(path)).to(q).forward(md)  # the same call, locally
    q.wait()
    assert np.allclose(remote_out, rows.view().out, atol=1e-5)
    print("remote and local results agree: OK")


if __name__ == "__main__":
    argparse.ArgumentParser(description=description(__doc__)).parse_args()  # (none: an extra one is an error)
    raise SystemExit(run_script(main))
