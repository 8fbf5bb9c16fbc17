"""Portable kernels as a service: a kernel + model chain, the same call local or on Triton.

Run: python examples/pipeline_service.py [--device cpu_threads]

``@pipeline`` declares the collections a function takes; calling it runs it on your queue.
``serve(pipe)`` hosts it in a real Triton server (PyTriton, free loopback ports) with the Triton
configuration derived from the layouts; ``pipe.remote(url)`` is called exactly like the local
pipeline. The script checks that both give the same columns, then stops the server.
Also from the shell: ``alpyka serve pipeline_service:calibrate --device cpu_threads``
(with examples/ on PYTHONPATH).
"""

import argparse

import numpy as np

import portable as pk
import soa
from portable.cli import ctrl_c_as_one_line, description, run_script

with ctrl_c_as_one_line():  # (torch, and inference's models with it, take seconds to import)
    import torch

    from inference import Model, ModelMetadata, SoAMetadata, pipeline, serve
    from inference.serving import parse_device


class Hits(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)
    energy = soa.column(np.float32)
    gain = soa.scalar(np.float32)  # scalar columns travel too


class Calibrated(soa.Layout):
    r = soa.column(np.float32)
    e = soa.column(np.float32)
    score = soa.column(np.float32)  # written by the model


torch.manual_seed(0)
#: created once per process: once in this script, once in the server that imports this module
MODEL = Model(torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).eval())


@pk.kernel
def calibrate_hits(acc, hits, out, n):
    for i in acc.uniform_elements(n):
        out.r[i] = (hits.x[i] * hits.x[i] + hits.y[i] * hits.y[i]) ** 0.5
        out.e[i] = hits.energy[i] * hits.gain


@pk.kernel
def clip_scores(acc, out, n):
    for i in acc.uniform_elements(n):
        out.score[i] = min(max(out.score[i], -1.0), 1.0)


@pipeline(inputs=Hits, outputs=Calibrated)  # output rows: the input's
def calibrate(q, hits, out):
    """kernel -> model -> kernel, all enqueued on q."""
    n = hits.size
    pk.exec(q, pk.valid_workdiv(q.device, n), calibrate_hits, hits.const_view(), out.view(), n)
    MODEL.to(q).forward(
        ModelMetadata(
            SoAMetadata(out).append_block("features", "r", "e"), SoAMetadata(out).append_block("score", "score")
        )
    )
    pk.exec(q, pk.valid_workdiv(q.device, n), clip_scores, out.view(), n)


def server_device(text: str) -> str:
    """``--device``: a device ``serve`` takes, on a backend usable here; anything else is refused
    with the usage and one line (it was a traceback once the server started)."""
    try:
        name, _ = parse_device(text)
        if name != "cpu":
            pk.get_backend(name)
    except pk.AlpykaError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--device", default="cpu_threads", type=server_device, help="where the server runs the pipeline")
    args = ap.parse_args()
    q = pk.Queue(pk.device("cpu_serial"))
    rng = np.random.default_rng(1)
    n = 1000
    hits = pk.PortableCollection.from_dict(
        Hits,
        {
            "x": rng.standard_normal(n, np.float32),
            "y": rng.standard_normal(n, np.float32),
            "energy": rng.uniform(1, 10, n).astype(np.float32),
            "gain": np.float32(1.1),
        },
        q,
    )
    local_out = pk.PortableCollection(Calibrated, n, q)
    remote_out = pk.PortableCollection(Calibrated, n, q)

    calibrate(q, hits, local_out)  # local: enqueued on q
    with serve(calibrate, device=args.device) as server:
        print(f"serving {calibrate} on {args.device} at {server.grpc_url}")
        for m in server.models:
            print("  Triton inputs: ", ", ".join(f"{t.name} {t.dtype} {list(t.dims)}" for t in m.inputs))
            print("  Triton outputs:", ", ".join(f"{t.name} {t.dtype} {list(t.dims)}" for t in m.outputs))
        with calibrate.remote(server.grpc_url) as remote:
            remote(q, hits, remote_out)  # the same call, run on the server
            q.wait()
            print(remote.statistics())
    a, b = local_out.to_dict(q), remote_out.to_dict(q)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7)
    print(f"local and remote agree on {n} rows: mean score {a['score'].mean():.4f}")


if __name__ == "__main__":
    raise SystemExit(run_script(main))
