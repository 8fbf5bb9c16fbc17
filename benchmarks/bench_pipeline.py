"""The main job's throughput: events/s of the fragment-merging pipeline, side by side in one run.

- zero-copy (``Model.forward`` on the SoA blocks) vs the naive copy route (columns gathered into
  numpy, ``torch.tensor``, the model, the outputs copied back), same model, same events;
- scaling with framework streams (1, 2, 4 queues, one event in flight per stream);
- per backend (cpu_serial, cpu_threads, opencl where available);
- on Dask (``pk.distributed``, the demo's ``--workers`` path): the demo's chunks of events on 1 and
  2 local worker processes vs the same chunks in this process (one queue), on warm clusters
  (cluster start and per-worker setup reported apart), with the Dask overhead per chunk: the
  round trip of an empty ``process``, and worker time not spent in ``process``
  ((wall x workers - sum of in-worker process times) / chunks). ``--no-dask`` leaves them out.

Writes pipeline.json and pipeline.png (``--quick``: fewer events).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

import portable as pk


class NaiveCopyModel:
    """The route without alpyka's tensors: copy the columns out, run, copy the outputs back."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def forward(self, metadata: Any, queue: pk.Queue) -> None:
        import torch

        ins, outs = metadata.inputs, metadata.outputs

        def step() -> None:
            coll = ins.collection.view()
            arrays = [
                np.stack([np.array(getattr(coll, c)) for c in ins.block(b).columns], axis=1) for b in ins.block_names
            ]
            with torch.inference_mode():
                result = self.module(*[torch.tensor(a) for a in arrays]).numpy()
            target = outs.collection.view()
            for k, c in enumerate(outs.block(outs.block_names[0]).columns):
                getattr(target, c)[:] = result[:, k]

        queue.enqueue(step)


# ----------------------------------------------------------------------------- Dask rows
#: the Dask rows' backend: the demo's default (alpyka_demo.pipeline.DEMO_BACKEND)
DASK_BACKEND = "cpu_serial"


def timed_process(state: dict, chunk: tuple[int, int, int]) -> tuple[dict, float]:
    """The demo's ``process_events`` on a worker, with the seconds it took there."""
    from alpyka_demo._dask import process_events

    t0 = time.perf_counter()
    out = process_events(state, chunk)
    return out, time.perf_counter() - t0


def empty_process(state: Any, chunk: Any) -> None:
    """Nothing: its round trip per chunk is what Dask itself costs."""
    return None


def worker_threads(state: Any, chunk: Any) -> dict:
    """A worker's thread pools and malloc setting, as its tasks see them."""
    import numba
    import torch

    return {
        "pid": os.getpid(),
        "torch_intra_op": torch.get_num_threads(),
        "numba": numba.get_num_threads(),
        "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def dask_rows(events: int, per_chunk: int, repeats: int, worker_counts: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Events/s of the demo's chunks in process and on ``worker_counts`` local Dask workers,
    alternating (in process, then each warm cluster) ``repeats`` times; medians are reported.

    Every ``pk.distributed.run`` runs ``setup`` once more on each worker (model load + a warm-up
    event): that fixed cost per run is the time of a run of ``workers`` empty chunks, measured
    beside each run and subtracted for the setup-free figures (both are reported)."""
    from alpyka_demo import train
    from alpyka_demo._dask import WorkerSetup

    train.ensure_model("exported", log=False)  # before any worker looks for it
    setup = WorkerSetup("exported", None, None)
    chunks = [(a, min(a + per_chunk, events), 40) for a in range(0, events, per_chunk)]
    local_state = setup(pk.device(DASK_BACKEND))

    def run(fn: Any, items: Any, client: Any) -> tuple[list, float]:
        t0 = time.perf_counter()
        out = pk.distributed.run(fn, items, setup=setup, client=client, backend=DASK_BACKEND)
        return out, time.perf_counter() - t0

    m: dict[str, dict[str, list[float]]] = {}  # where -> measure -> one value per repeat
    extra: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        clients = {}
        for w in worker_counts:  # started one after the other: cluster start + setup on every worker
            t0 = time.perf_counter()
            client = stack.enter_context(pk.distributed._connect(None, w, 3))
            run(empty_process, range(2 * w), client)
            name = f"{w} worker{'s' if w > 1 else ''}"
            clients[name] = (w, client)
            threads, _ = run(worker_threads, range(4 * w), client)
            extra[name] = {
                "start_and_setup_s": time.perf_counter() - t0,
                "worker_threads": list({t["pid"]: t for t in threads}.values()),
            }
        timed_process(local_state, chunks[0])  # warm, like the workers' setup
        for _ in range(repeats):
            t0 = time.perf_counter()
            parts = [timed_process(local_state, c) for c in chunks]
            wall = time.perf_counter() - t0
            _add(
                m,
                "in process",
                wall=wall,
                fixed=0.0,
                inside=sum(t for _, t in parts),
                model=sum(p["step_s"]["model"] for p, _ in parts),
            )
            for name, (w, client) in clients.items():
                _, fixed = run(empty_process, range(w), client)  # setup on each worker + w empty tasks
                parts, wall = run(timed_process, chunks, client)
                _, empty = run(empty_process, chunks, client)
                _add(
                    m,
                    name,
                    wall=wall,
                    fixed=fixed,
                    inside=sum(t for _, t in parts),
                    empty=empty,
                    model=sum(p["step_s"]["model"] for p, _ in parts),
                )
    med = statistics.median
    rows = []
    for name, v in m.items():
        w = clients[name][0] if name in clients else 0
        busy = [(a - f) * max(w, 1) - b for a, f, b in zip(v["wall"], v["fixed"], v["inside"])]
        row = {
            "backend": DASK_BACKEND,
            "route": "dask" if w else "dask reference (in process, 1 queue)",
            "where": name,
            "workers": w,
            "events": events,
            "chunks": len(chunks),
            "events_per_chunk": per_chunk,
            "repeats": repeats,
            "events_per_s": events / med([a - f for a, f in zip(v["wall"], v["fixed"])]),
            "events_per_s_with_setup": events / med(v["wall"]),
            "wall_s": v["wall"],
            "setup_per_run_s": med(v["fixed"]),
            "model_ms_per_event": 1e3 * med(v["model"]) / events,
            "overhead_ms_per_chunk": 1e3 * med(busy) / len(chunks) if w else 0.0,
        }
        if w and len(chunks) > w:
            row["empty_task_ms_per_chunk"] = (
                1e3 * med([e - f for e, f in zip(v["empty"], v["fixed"])]) / (len(chunks) - w)
            )
        rows.append({**row, **extra.get(name, {})})
    base = rows[0]["events_per_s"]
    dask = [r for r in rows if r["workers"]]
    summary = {
        f"{DASK_BACKEND} Dask events/s (demo chunks)": {r["where"]: r["events_per_s"] for r in rows},
        f"{DASK_BACKEND} Dask / in process": {r["where"]: r["events_per_s"] / base for r in dask},
        f"{DASK_BACKEND} Dask overhead ms/chunk": {r["where"]: r["overhead_ms_per_chunk"] for r in dask},
        f"{DASK_BACKEND} empty task ms/chunk": {r["where"]: r.get("empty_task_ms_per_chunk") for r in dask},
        f"{DASK_BACKEND} Dask setup s per run": {r["where"]: r["setup_per_run_s"] for r in dask},
        f"{DASK_BACKEND} model ms/event": {r["where"]: r["model_ms_per_event"] for r in rows},
    }
    return rows, summary


def _add(m: dict[str, dict[str, list[float]]], where: str, **values: float) -> None:
    for k, x in values.items():
        m.setdefault(where, {}).setdefault(k, []).append(x)


def _dask_available() -> str | None:
    """Why the Dask rows cannot run here, or None."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return "the data extra is not installed (pip install 'alpyka[data]')"
    if DASK_BACKEND not in pk.available_backends():
        return f"backend {DASK_BACKEND} is not available"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = common.make_parser(__doc__)
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--no-dask", action="store_true", help="leave out the Dask rows")
    args = common.parse_args(ap, argv)
    import torch

    from alpyka_demo import pipeline, train
    from inference import Model

    events = args.events or (12 if args.smoke else 60 if args.quick else 300)
    model_path = train.ensure_model("jit", log=not args.no_progress)
    jit = torch.jit.load(str(model_path))
    backends = common.backends(("cpu_serial", "cpu_threads", "opencl"))
    configs = [
        (b, s, route)
        for b in backends
        for s in (1, 2, 4)
        for route in ("zero-copy", "naive copy")
        if route == "zero-copy" or b != "opencl"
    ]
    rows = []
    for backend, streams, route in common.progress(configs, desc="pipeline", disable=args.no_progress):
        model = Model(str(model_path)) if route == "zero-copy" else NaiveCopyModel(jit)
        dev = pk.device(backend)
        report = pipeline.Report(backend, events, streams, route)
        pipeline._run_streams(dev, model, report, n_particles=40, progress=False)
        rows.append(
            {
                "backend": backend,
                "streams": streams,
                "route": route,
                "events": events,
                "events_per_s": report.events_per_s,
                "gnn_purity": report.gnn.purity,
                "gnn_efficiency": report.gnn.efficiency,
                **{f"{k}_ms_per_event": 1e3 * v / events for k, v in report.step_s.items()},
            }
        )
    by = {(r["backend"], r["streams"], r["route"]): r["events_per_s"] for r in rows}
    summary: dict[str, dict[str, float]] = {}
    for b in backends:
        summary[f"{b} events/s (zero-copy)"] = {f"{s} streams": by[(b, s, "zero-copy")] for s in (1, 2, 4)}
        if (b, 1, "naive copy") in by:
            summary[f"{b} zero-copy / naive copy"] = {
                f"{s} streams": by[(b, s, "zero-copy")] / by[(b, s, "naive copy")] for s in (1, 2, 4)
            }
        summary[f"{b} scaling vs 1 stream"] = {
            f"{s} streams": by[(b, s, "zero-copy")] / by[(b, 1, "zero-copy")] for s in (1, 2, 4)
        }
    dask_note = "left out (--no-dask)" if args.no_dask else _dask_available()
    d_rows: list[dict] = []
    if dask_note is None:
        # smoke: 1 worker, 3 chunks of 4 events, 1 repeat (a tiny row: every path, no meaningful
        # figure); quick: 8 chunks of the demo's 25 events; full: 16 chunks
        d_events, per_chunk, repeats = (12, 4, 1) if args.smoke else (200, 25, 3) if args.quick else (400, 25, 5)
        d_rows, d_summary = dask_rows(d_events, per_chunk, repeats, (1,) if args.smoke else (1, 2))
        rows += d_rows
        summary.update(d_summary)
    doc = common.result_document(
        "pipeline",
        "cpu: " + ", ".join(str(pk.device(b)) for b in backends),
        args.quick,
        rows,
        summary,
        model=str(model_path.name),
        dask={"model": "exported (the demo's default)", "backend": DASK_BACKEND, "skipped": dask_note},
    )
    out = common.write_json(args.out, "pipeline", doc)
    plot(rows, backends, args.out)
    for k, v in summary.items():
        print(f"{k:<36} " + "  ".join(f"{s}: {common.format_number(x):>8}" for s, x in v.items()))
    if dask_note:
        print(f"Dask rows: {dask_note}")
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], backends: list[str], out_dir: Path) -> None:
    plt = common.pyplot()
    d_rows = [r for r in rows if r["route"].startswith("dask")]
    fig, axes = plt.subplots(
        1,
        2 if d_rows else 1,
        figsize=(12 if d_rows else 7, 4.5),
        gridspec_kw={"width_ratios": [3, 2]} if d_rows else None,
        squeeze=False,
    )
    ax = axes[0][0]
    for b in backends:
        for route, style in (("zero-copy", "-o"), ("naive copy", "--s")):
            pts = [
                (r["streams"], r["events_per_s"])
                for r in rows
                if r["backend"] == b and r["route"] == route and "streams" in r
            ]
            if pts:
                ax.plot(*zip(*pts), style, label=f"{b}, {route}")
    ax.set_xlabel("framework streams (queues)")
    ax.set_ylabel("events / s")
    ax.set_xticks([1, 2, 4])
    ax.set_title("fragment-merging pipeline: generate -> edges -> GNN -> merge")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if d_rows:
        dx = axes[0][1]
        bars = dx.bar([r["where"] for r in d_rows], [r["events_per_s"] for r in d_rows], color="tab:green")
        for bar, r in zip(bars, d_rows):
            note = "" if r["workers"] == 0 else f"+{r['overhead_ms_per_chunk']:.1f} ms/chunk"
            dx.annotate(
                note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
            )
        dx.set_ylabel("events / s")
        dx.set_title(f"Dask ({d_rows[0]['backend']}, {d_rows[0]['events_per_chunk']} events per chunk, warm)")
        dx.grid(alpha=0.3, axis="y")
    common.save_figure(fig, out_dir, "pipeline")


if __name__ == "__main__":
    sys.exit(main())
