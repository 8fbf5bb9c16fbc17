"""Portable kernels as a service: local vs remote model vs remote pipeline, side by side in one run.

The demo's events (``alpyka_demo``: fragments -> candidate edges -> GNN -> merging) through
three routes, each client a thread with its own queue (cpu_serial):

- ``local``: everything on the client (kernels + ``inference.Model``);
- ``remote model``: kernels on the client, the GNN on Triton (``RemoteModel``; the demo's
  ``--remote``);
- ``remote pipeline``: the client generates fragments; edges + GNN + merging run on Triton as one
  pipeline (``RemotePipeline``; the demo's ``--remote-pipeline``).

For 1..16 concurrent clients, against one server and two (least-outstanding balancing), it
measures events/s and the tensor bytes per event on the wire (gRPC payload, no shared memory),
and puts the SONIC model's prediction (docs/remote.md) from parts measured at one client beside
them. It also measures the per-request overhead of a pipeline over a plain model of the same
size: ``gnn_only`` (a pipeline whose body is the GNN alone) vs the GNN served as a model, same
tensors, sequential requests. Writes ``<out>/service.json`` and ``service.png``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common as common  # also puts the repository on sys.path
import numpy as np

import portable as pk
import soa
from alpyka_demo import _events as E
from alpyka_demo._layouts import FEATURES, INDEX, EdgeInputs
from alpyka_demo.pipeline import run_event
from inference import ModelMetadata, SoAMetadata, pipeline


class EdgeVectors(soa.Layout):
    """The GNN's inputs as two vector fields: exactly the plain model's tensors ([E, 7], [E, 2])."""

    features = soa.vector(np.float32, 7)
    index = soa.vector(np.int32, 2)


class EdgeScores(soa.Layout):
    score = soa.column(np.float32)


@pipeline(inputs={"edges": EdgeInputs}, outputs={"scores": EdgeScores})
def gnn_only(q: pk.Queue, edges: pk.PortableCollection, scores: pk.PortableCollection) -> None:
    """The GNN alone as a pipeline: the same work as the plain model, for the overhead ratio."""
    from alpyka_demo._service import gnn

    ins = SoAMetadata(edges).append_block("features", *FEATURES).append_block("index", *INDEX)
    gnn().to(q).forward(ModelMetadata(ins, SoAMetadata(scores).append_block("score", "score")))


@pipeline(inputs={"edges": EdgeVectors}, outputs={"scores": EdgeScores})
def gnn_vectors(q: pk.Queue, edges: pk.PortableCollection, scores: pk.PortableCollection) -> None:
    """:func:`gnn_only` over vector fields: the request carries the plain model's two tensors."""
    from alpyka_demo._service import gnn

    ins = SoAMetadata(edges).append_block("features", "features").append_block("index", "index")
    gnn().to(q).forward(ModelMetadata(ins, SoAMetadata(scores).append_block("score", "score")))


def sonic_events_per_s(k: int, t_cpu: float, p: float, t_gpu: float, t_latency: float, n_gpu: int) -> float:
    """k clients / t_SONIC (docs/remote.md; Krupa et al., CMS SONIC)."""
    from bench_remote import sonic_prediction

    return k / sonic_prediction(t_cpu, p, t_gpu, t_latency, k, n_gpu)


def run_clients(n: int, seconds: float, event: Callable[[pk.Queue, int], None]) -> float:
    """events/s of ``n`` client threads, each running ``event(queue, seed)`` and waiting."""

    def make_step(i: int) -> Callable[[], int]:
        q = pk.Queue(pk.device("cpu_serial"))
        seeds = itertools.count(1000 * i)

        def step() -> int:
            event(q, next(seeds))
            q.wait()
            return 1

        return step

    return common.closed_loop(n, seconds, make_step)


def per_event(fn: Callable[[], Any], n: int) -> float:
    """Median seconds of ``fn()`` over ``n`` calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = common.make_parser(__doc__)
    ap.add_argument("--particles", type=int, default=40, help="particles per event (default 40)")
    common.add_load_options(ap)
    args = common.parse_args(ap, argv)
    clients, seconds = common.load_plan(
        args,
        {"smoke": [1, 2], "quick": [1, 4, 16], "full": [1, 2, 4, 8, 16]},
        {"smoke": 0.2, "quick": 1.0, "full": 2.0},
    )
    n_seq = 5 if args.smoke else 40 if args.quick else 150

    import torch

    from alpyka_demo import _gnn, train
    from alpyka_demo._service import merge_fragments
    from inference import Model
    from inference.remote import RemoteModel
    from inference.serving import serve

    # an untrained GNN costs what a trained one costs; a private model dir leaves the user's alone
    tmp = common.scratch_dir("alpyka-bench-service-")
    os.environ["ALPYKA_MODEL_DIR"] = str(tmp)  # the servers inherit it
    torch.manual_seed(0)
    paths = train.save(_gnn.EdgeGNN().eval(), tmp)
    hosted = {
        "merge_fragments": merge_fragments,
        "gnn_only": gnn_only,
        "gnn_vectors": gnn_vectors,
        "edge_gnn": {"path": str(paths["exported"]), **train.SERVE_OPTIONS},
    }
    steps = [
        "start 2 servers",
        *[
            f"{r} x{k}"
            for r in (
                "local",
                "remote model",
                "remote model, 2 servers",
                "remote pipeline",
                "remote pipeline, 2 servers",
            )
            for k in clients
        ],
        "overhead",
    ]
    bar = common.progress(steps, desc="service bench", disable=args.no_progress)
    it = iter(bar)
    next(it)
    with ThreadPoolExecutor(2) as pool:  # two start-ups at once (each mostly waits for Triton)
        # one instance a model in the smoke run: half the model stubs handshaking with PyTriton at once
        instances = 1 if args.smoke else 2
        # the second server only balances the two routes that go to 2 servers: no overhead pipelines
        second = {k: v for k, v in hosted.items() if k in ("merge_fragments", "edge_gnn")}
        serving = dict(device="cpu_serial", threads=1, instances=instances)
        starting = [pool.submit(serve, models, **serving) for models in (hosted, second)]
        servers = []
        try:
            servers = [f.result() for f in starting]
        finally:
            if len(servers) < 2:  # one failed: stop the other before the error goes on
                for f in starting:
                    if f.exception() is None:
                        f.result().stop()
    urls = [s.grpc_url for s in servers]
    n = args.particles
    local_model = Model(str(paths["exported"]))
    opts = dict(timeout=60, shared_memory=None)
    routes: dict[str, Any] = {
        "local": local_model,
        "remote model": RemoteModel(urls[0], "edge_gnn", **opts),
        "remote model, 2 servers": RemoteModel(urls, "edge_gnn", **opts),
        "remote pipeline": _Pipe(merge_fragments.remote(urls[0], **opts)),
        "remote pipeline, 2 servers": _Pipe(merge_fragments.remote(urls, **opts)),
    }
    results: dict[str, Any] = {
        "particles_per_event": n,
        "seconds_per_point": seconds,
        "clients": clients,
        "series": {},
        "bytes_per_event": {},
    }
    try:
        for name, model in routes.items():
            warm = pk.Queue(pk.device("cpu_serial"))
            for seed in range(3):  # compile, deploy, connect outside the measured points
                run_event(warm, model, 10**6 + seed, n, False)
            warm.wait()
            rates = []
            for k in clients:
                bar.set_postfix_str(f"{name} x{k}")
                rates.append(run_clients(k, seconds, lambda q, seed, m=model: run_event(q, m, seed, n, False)))
                next(it, None)
            results["series"][name] = rates
            st = (model.remote if isinstance(model, _Pipe) else model).statistics() if name != "local" else None
            if st is not None:
                results["bytes_per_event"][name] = (st.client.bytes_sent + st.client.bytes_received) / max(
                    st.client.events, 1
                )
        results["sonic_inputs"] = sonic_parts(routes, n, n_seq)
        for name in ("remote model", "remote pipeline"):
            s = results["sonic_inputs"][name]
            for n_gpu, suffix in ((1, ""), (2, ", 2 servers")):
                results["series"][f"SONIC prediction: {name}{suffix}"] = [
                    sonic_events_per_s(k, s["t_cpu_s"], s["p"], s["t_gpu_s"], s["t_latency_s"], n_gpu) for k in clients
                ]
        bar.set_postfix_str("overhead")
        results["overhead"] = overhead(urls[0], n, n_seq)
        next(it, None)
    finally:
        for m in routes.values():
            if hasattr(m, "close"):
                m.close()
        with ThreadPoolExecutor(2) as pool:  # side by side: a stop with a client connected waits for an unload
            list(pool.map(lambda s: s.stop(), servers))
        if hasattr(bar, "close"):
            bar.close()
    return report(results, args)


class _Pipe:
    """A RemotePipeline as the demo's run_event takes it (``model.run_event``)."""

    def __init__(self, remote: Any) -> None:
        self.remote = remote

    def run_event(self, queue: pk.Queue, seed: int, n_particles: int, stamp: Any) -> Any:
        from alpyka_demo._service import run_event as service_event

        return service_event(queue, self.remote, seed, n_particles, stamp)

    def close(self) -> None:
        self.remote.close()


def sonic_parts(routes: dict[str, Any], n: int, n_seq: int) -> dict[str, dict[str, float]]:
    """The SONIC model's inputs per remote route, measured at one client: t_CPU (the whole event
    locally), p (the offloaded fraction of it), t_GPU (server compute per request, Triton's
    statistics), t_latency (request time - t_GPU - server queue)."""
    from alpyka_demo import _kernels as K

    q = pk.Queue(pk.device("cpu_serial"))

    def local() -> None:
        run_event(q, routes["local"], 7, n, False)
        q.wait()

    def generate() -> None:  # what the pipeline route leaves on the client
        frags = pk.PortableCollection(E.Fragments, n * E.MAX_FRAGMENTS, q)
        pk.exec(q, E.workdiv(q.device, n), K.generate_fragments, frags.view(), n, 7)
        frags.to_host(q)
        q.wait()

    ev = E.allocate(q, n)
    E.produce(q, ev, 7)
    md = E.model_metadata(ev)
    q.wait()

    def model_step() -> None:  # what the model route offloads
        routes["local"].forward(md, queue=q)
        q.wait()

    t_cpu = per_event(local, n_seq)
    offloaded = {"remote model": per_event(model_step, n_seq), "remote pipeline": t_cpu - per_event(generate, n_seq)}
    out = {}
    for name, model in (("remote model", routes["remote model"]), ("remote pipeline", routes["remote pipeline"])):
        transport = model.remote.model if isinstance(model, _Pipe) else model
        before = transport.server_statistics()
        t_req = per_event(lambda m=model: (run_event(q, m, 7, n, False), q.wait()), n_seq) - (t_cpu - offloaded[name])
        t_gpu, t_queue = common.server_seconds(transport.server_statistics, before, n_seq + 3)  # an event >= 1
        out[name] = {
            "t_cpu_s": t_cpu,
            "p": min(offloaded[name] / t_cpu, 1.0),
            "t_gpu_s": t_gpu,
            "t_latency_s": max(t_req - t_gpu - t_queue, 0.0),
            "t_request_s": t_req,
            "t_offloaded_locally_s": offloaded[name],
        }
    return out


def overhead(url: str, n: int, n_seq: int) -> dict[str, Any]:
    """Per-request time of pipelines vs the plain model ``edge_gnn`` on the same edges, requests
    interleaved one by one (drift on a shared machine hits all alike): ``gnn_vectors`` carries
    the model's own two tensors (the same size: the pipeline machinery's overhead alone);
    ``gnn_only`` carries the nine columns as nine tensors (what per-tensor costs add)."""
    from inference import RemotePipeline
    from inference.remote import RemoteModel

    q = pk.Queue(pk.device("cpu_serial"))
    ev = E.allocate(q, n)
    E.produce(q, ev, 11)
    q.wait()
    src = ev.edges.view()
    cols = pk.PortableCollection(EdgeInputs, ev.capacity, pk.host())
    for f in EdgeInputs.field_names():
        getattr(cols.view(), f)[:] = getattr(src, f)
    vecs = pk.PortableCollection(EdgeVectors, ev.capacity, pk.host())
    vecs.view().features[:] = np.stack([getattr(src, f) for f in FEATURES], axis=1)
    vecs.view().index[:] = np.stack([getattr(src, f) for f in INDEX], axis=1)
    scores = {k: pk.PortableCollection(EdgeScores, ev.capacity, pk.host()) for k in ("cols", "vecs")}
    opts = dict(timeout=60, shared_memory=None)
    model = RemoteModel(url, "edge_gnn", mode="sync", **opts)
    p_cols = RemotePipeline(url, "gnn_only", declaration=gnn_only, **opts)
    p_vecs = RemotePipeline(url, "gnn_vectors", declaration=gnn_vectors, **opts)
    md = E.model_metadata(ev)
    hq = pk.Queue(pk.host(), blocking=True)
    calls = {
        "model": lambda: model.forward(md),
        "pipeline, same tensors": lambda: p_vecs(hq, vecs, scores["vecs"]),
        "pipeline, one tensor per column": lambda: p_cols(hq, cols, scores["cols"]),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    try:
        for _ in range(3):
            for fn in calls.values():
                fn()
        for _ in range(3 * n_seq):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        for k in ("cols", "vecs"):
            np.testing.assert_allclose(scores[k].view().score, src.score, rtol=1e-5, atol=1e-6)
        wire = {
            name: c.statistics().client
            for name, c in (
                ("model", model),
                ("pipeline, same tensors", p_vecs),
                ("pipeline, one tensor per column", p_cols),
            )
        }
    finally:
        for c in (model, p_cols, p_vecs):
            c.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    out: dict[str, Any] = {"edges_per_request": ev.capacity, "requests_each": len(times["model"])}
    for k in calls:
        out[k] = {
            "median_ms": med[k] * 1e3,
            "min_ms": low[k] * 1e3,
            "overhead_vs_model_median": med[k] / med["model"] - 1.0,
            "overhead_vs_model_min": low[k] / low["model"] - 1.0,
            "bytes_per_request": (wire[k].bytes_sent + wire[k].bytes_received) / max(wire[k].requests, 1),
        }
    out["overhead_fraction"] = out["pipeline, same tensors"]["overhead_vs_model_median"]
    return out


def report(results: dict[str, Any], args: Any) -> int:
    clients = results["clients"]
    loc = results["series"]["local"]
    rows = [
        {
            "route": name,
            "clients": k,
            "events_per_s": v,
            "ratio_vs_local": v / loc[i],
            "bytes_per_event": results["bytes_per_event"].get(name, 0.0),
        }
        for name, vals in results["series"].items()
        for i, (k, v) in enumerate(zip(clients, vals))
    ]
    summary = {
        name: {f"{k} clients": v / l for k, v, l in zip(clients, vals, loc)}
        for name, vals in results["series"].items()
        if name != "local"
    }
    summary["pipeline vs model per-request overhead"] = {"fraction": results["overhead"]["overhead_fraction"]}
    doc = common.result_document(
        "service",
        "cpu (clients and Triton servers via PyTriton on 127.0.0.1)",
        args.quick,
        rows,
        summary,
        **{k: v for k, v in results.items() if k != "series"},
        series=results["series"],
    )
    common.write_json(args.out, "service", doc)
    plot(results, args.out)
    w = max(len(n) for n in results["series"])
    print(f"{'events/s':<{w}} " + " ".join(f"{k:>8}" for k in clients) + "  bytes/event")
    for name, vals in results["series"].items():
        b = results["bytes_per_event"].get(name)
        print(f"{name:<{w}} " + " ".join(f"{v:8.0f}" for v in vals) + (f"  {b:,.0f}" if b is not None else ""))
    for name, s in results["sonic_inputs"].items():
        print(
            f"SONIC inputs, {name}: t_CPU {s['t_cpu_s'] * 1e3:.2f} ms, p {s['p']:.2f}, t_GPU "
            f"{s['t_gpu_s'] * 1e3:.2f} ms, t_latency {s['t_latency_s'] * 1e3:.2f} ms"
        )
    o = results["overhead"]
    print(f"per request ({o['edges_per_request']} edges, {o['requests_each']} requests each, interleaved):")
    for k in ("model", "pipeline, same tensors", "pipeline, one tensor per column"):
        r = o[k]
        print(
            f"  {k:<32} median {r['median_ms']:.2f} ms ({100 * r['overhead_vs_model_median']:+.1f}%), min "
            f"{r['min_ms']:.2f} ms ({100 * r['overhead_vs_model_min']:+.1f}%), {r['bytes_per_request']:,.0f} B"
        )
    print(f"wrote {args.out / 'service.json'} and {args.out / 'service.png'}")
    return 0


def plot(results: dict[str, Any], out: Path) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    ks = results["clients"]
    for name, vals in results["series"].items():
        style: dict[str, Any] = dict(marker="o")
        if name.startswith("SONIC"):
            style = dict(ls=":" if "2 servers" in name else "--", color=f"C{1 + 2 * ('pipeline' in name)}", alpha=0.6)
        elif name == "local":
            style = dict(marker="s", lw=2.5, color="k")
        ax.plot(ks, vals, label=name, **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("events / s")
    ax.set_title(f"Demo events: local vs remote model vs remote pipeline ({results['particles_per_event']} particles)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    common.save_figure(fig, out, "service")


if __name__ == "__main__":
    sys.exit(main())
