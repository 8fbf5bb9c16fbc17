"""Remote (Triton, SONIC-style) vs local inference throughput, side by side in one run.

For 1, 2, 4, 8, 16 concurrent clients (threads, each producing events: fill a SoA collection,
run the model on it, read the outputs) this measures events/s for:

- local: ``inference.Model`` on each client's own queue (the same TorchScript file);
- remote sync / async (one request in flight while the next event is produced), with and
  without server-side dynamic batching, with and without system shared memory.

The remote server is ``inference.serve`` (PyTriton) on 127.0.0.1 in a child process, stopped at
the end. The SONIC model (docs/remote.md; Krupa et al., CMS SONIC) predicts the remote time per event from quantities
measured here at one client: t_SONIC = (1-p) t_CPU + t_GPU [1 + max(0, N_CPU/N_GPU - t_ideal/t_GPU)]
+ t_latency. Writes benchmarks/results/remote.json and remote.png. ``--quick`` for a short run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import _common as common  # also puts the repository on sys.path
import numpy as np

import portable as pk
import soa

N_FEATURES, N_OUT = 16, 8


class Features(soa.Layout):
    f = soa.vector(np.float32, N_FEATURES)


class Scores(soa.Layout):
    s = soa.vector(np.float32, N_OUT)


def make_model(path: Path) -> None:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, N_OUT),
    )
    torch.jit.script(net.eval()).save(str(path))


class Client:
    """One producer: its own collections, metadata and queue."""

    def __init__(self, rows: int, seed: int) -> None:
        from inference import ModelMetadata, SoAMetadata

        self.rng = np.random.default_rng(seed)
        self.inp = pk.PortableCollection(Features, rows, pk.host())
        self.out = pk.PortableCollection(Scores, rows, pk.host())
        self.md = ModelMetadata(
            SoAMetadata(self.inp).append_block("features", "f"), SoAMetadata(self.out).append_block("scores", "s")
        )
        self.queue = pk.Queue(pk.host(), blocking=True)
        self.checksum = 0.0

    def produce(self) -> None:
        """The event's CPU work besides inference: fill the inputs."""
        v = self.inp.view()
        v.f[:] = self.rng.standard_normal(v.f.shape, dtype=np.float32)

    def consume(self) -> None:
        self.checksum += float(self.out.view().s[0, 0])


def run_clients(n_clients: int, seconds: float, make_step, rows: int) -> float:
    """events/s of ``n_clients`` threads, each looping ``step(client)`` for ``seconds``."""
    return common.closed_loop(n_clients, seconds, lambda i: make_step(Client(rows, 1000 + i)))


def local_step(model):
    def make(c: Client):
        def step() -> int:
            c.produce()
            model.forward(c.md, queue=c.queue)
            c.consume()
            return 1

        return step

    return make


def remote_sync_step(remote):
    def make(c: Client):
        def step() -> int:
            c.produce()
            remote.forward(c.md)
            c.consume()
            return 1

        return step

    return make


def remote_async_step(remote):
    """Two events per step: the second is produced while the first request is in flight."""

    def make(c: Client):
        other = Client(c.inp.size, 77)

        def step() -> int:
            c.produce()
            fut = remote.forward_async(c.md)
            other.produce()  # the CPU keeps working during the request
            fut2 = remote.forward_async(other.md)
            fut.wait()
            c.consume()
            fut2.wait()
            other.consume()
            return 2

        return step

    return make


def sonic_prediction(t_cpu: float, p: float, t_gpu: float, t_latency: float, n_cpu: int, n_gpu: int = 1) -> float:
    """Time per event (s) of the SONIC model (docs/remote.md; Krupa et al., CMS SONIC)."""
    t_ideal = (1 - p) * t_cpu + t_gpu + t_latency
    return (1 - p) * t_cpu + t_gpu * (1 + max(0.0, n_cpu / n_gpu - t_ideal / t_gpu)) + t_latency


def main(argv: list[str] | None = None) -> int:
    ap = common.make_parser(__doc__)
    ap.add_argument("--rows", type=int, default=256, help="rows per event")
    common.add_load_options(ap)
    args = common.parse_args(ap, argv)
    clients, seconds = common.load_plan(
        args,
        {"smoke": [1, 4], "quick": [1, 4, 16], "full": [1, 2, 4, 8, 16]},
        {"smoke": 0.3, "quick": 0.6, "full": 2.0},
    )
    from tqdm import tqdm

    from inference import Model
    from inference.remote import RemoteModel
    from inference.serving import serve

    tmp = common.scratch_dir("alpyka-bench-remote-")
    path = tmp / "mlp.pt"
    make_model(path)
    decl = {"inputs": [f"features:float32:{N_FEATURES}"], "outputs": [f"scores:float32:{N_OUT}"]}
    server = serve(
        {
            "mlp_db": {"path": str(path), **decl, "dynamic_batching": True},
            "mlp": {"path": str(path), **decl, "dynamic_batching": False},
        },
        max_batch_size=4096,
        max_queue_delay_us=500,
        threads=1,
    )
    results: dict = {"rows_per_event": args.rows, "seconds_per_point": seconds, "clients": clients, "series": {}}
    try:
        local = Model(str(path))
        remotes = {
            "remote sync": RemoteModel(server.grpc_url, "mlp", shared_memory=None, mode="sync"),
            "remote sync +dynbatch": RemoteModel(server.grpc_url, "mlp_db", shared_memory=None, mode="sync"),
            "remote sync +dynbatch +shm": RemoteModel(server.grpc_url, "mlp_db", shared_memory="system", mode="sync"),
            "remote async": RemoteModel(server.grpc_url, "mlp", shared_memory=None, mode="async"),
            "remote async +dynbatch": RemoteModel(server.grpc_url, "mlp_db", shared_memory=None, mode="async"),
            "remote async +dynbatch +shm": RemoteModel(server.grpc_url, "mlp_db", shared_memory="system", mode="async"),
        }
        configs = [("local", local_step(local))]
        for name, r in remotes.items():
            configs.append((name, (remote_async_step if "async" in name else remote_sync_step)(r)))
        # one-client measurements for the SONIC model
        c = Client(args.rows, 1)
        for _ in range(20):  # warm up
            c.produce()
            local.forward(c.md, queue=c.queue)
        n = 50 if args.smoke else 200 if args.quick else 1000
        t0 = time.perf_counter()
        for _ in range(n):
            c.produce()
        t_other = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            local.forward(c.md, queue=c.queue)
        t_inf = (time.perf_counter() - t0) / n
        r = remotes["remote sync"]
        for _ in range(20):
            r.forward(c.md)
        before, cstats = r.server_statistics(), r.statistics().client
        t0 = time.perf_counter()
        for _ in range(n):
            r.forward(c.md)
        t_req = (time.perf_counter() - t0) / n
        t_gpu, t_queue = common.server_seconds(r.server_statistics, before, n)
        t_latency = max(t_req - t_gpu - t_queue, 0.0)
        t_cpu = t_other + t_inf
        p = t_inf / t_cpu
        results["sonic_inputs"] = {
            "t_cpu_s": t_cpu,
            "p": p,
            "t_gpu_s": t_gpu,
            "t_latency_s": t_latency,
            "t_request_s": t_req,
            "t_other_s": t_other,
            "t_local_inference_s": t_inf,
        }
        del cstats
        bar = tqdm(total=len(configs) * len(clients), desc="remote bench", unit="point", disable=args.no_progress)
        for name, step in configs:
            rates = []
            for k in clients:
                rates.append(run_clients(k, seconds, step, args.rows))
                bar.update()
            results["series"][name] = rates
        bar.close()
        results["series"]["SONIC prediction"] = [k / sonic_prediction(t_cpu, p, t_gpu, t_latency, k) for k in clients]
        db = remotes["remote async +dynbatch"].server_statistics()
        results["server_mlp_db"] = {
            "requests": db.requests,
            "inferences": db.inferences,
            "executions": db.executions,
            "mean_executed_batch_rows": db.mean_executed_batch,
            "mean_request_batch_rows": db.mean_request_batch,
        }
        nodb = remotes["remote async"].server_statistics()
        results["server_mlp"] = {"requests": nodb.requests, "executions": nodb.executions}
        for r in remotes.values():
            r.close()
    finally:
        server.stop()
    loc = results["series"]["local"]
    results["ratios_vs_local"] = {
        name: [round(v / l, 3) for v, l in zip(vals, loc)]
        for name, vals in results["series"].items()
        if name != "local"
    }
    out = args.out
    rows = [
        {"config": name, "clients": k, "events_per_s": v, "ratio_vs_local": v / loc[i]}
        for name, vals in results["series"].items()
        for i, (k, v) in enumerate(zip(clients, vals))
    ]
    summary = {
        name: {f"{k} clients": r for k, r in zip(clients, ratios)}
        for name, ratios in results["ratios_vs_local"].items()
    }
    doc = common.result_document(
        "remote",
        "cpu (Triton via PyTriton on 127.0.0.1)",
        args.quick,
        rows,
        summary,
        **{k: v for k, v in results.items() if k not in ("series",)},
    )
    common.write_json(out, "remote", doc)
    plot(results, out / "remote.png")
    w = max(len(n) for n in results["series"])
    print(f"{'events/s':<{w}} " + " ".join(f"{k:>9}" for k in clients))
    for name, vals in results["series"].items():
        print(f"{name:<{w}} " + " ".join(f"{v:9.0f}" for v in vals))
    s = results["sonic_inputs"]
    print(
        f"SONIC inputs: t_CPU {s['t_cpu_s'] * 1e6:.0f} us (p={s['p']:.2f}), t_GPU {s['t_gpu_s'] * 1e6:.0f} us, "
        f"t_latency {s['t_latency_s'] * 1e6:.0f} us; dynamic batching: "
        f"{results['server_mlp_db']['requests']} requests in {results['server_mlp_db']['executions']} executions"
    )
    print(f"wrote {out / 'remote.json'} and {out / 'remote.png'}")
    return 0


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    ks = results["clients"]
    for name, vals in results["series"].items():
        style = dict(ls="--", color="0.4") if name == "SONIC prediction" else dict(marker="o")
        if name == "local":
            style = dict(marker="s", lw=2.5, color="k")
        ax.plot(ks, vals, label=name, **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("events / s")
    ax.set_title(f"Remote (Triton via PyTriton) vs local, {results['rows_per_event']} rows/event")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
