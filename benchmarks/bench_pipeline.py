"""The main job's throughput: events/s of the fragment-merging pipeline, side by side in one run.

- zero-copy (``Model.forward`` on the SoA blocks) vs the naive copy route (columns gathered into
  numpy, ``torch.tensor``, the model, the outputs copied back), same model, same events;
- scaling with framework streams (1, 2, 4 queues, one event in flight per stream);
- per backend (cpu_serial, cpu_threads, opencl where available).

Writes pipeline.json and pipeline.png (``--quick``: fewer events).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402 - also puts the repository on sys.path
import portable as pk  # noqa: E402


class NaiveCopyModel:
    """The route without alpyka's tensors: copy the columns out, run, copy the outputs back."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def forward(self, metadata: Any, queue: pk.Queue) -> None:
        import torch

        ins, outs = metadata.inputs, metadata.outputs

        def step() -> None:
            coll = ins.collection.view()
            arrays = [np.stack([np.array(getattr(coll, c)) for c in ins.block(b).columns], axis=1)
                      for b in ins.block_names]
            with torch.inference_mode():
                result = self.module(*[torch.tensor(a) for a in arrays]).numpy()
            target = outs.collection.view()
            for k, c in enumerate(outs.block(outs.block_names[0]).columns):
                getattr(target, c)[:] = result[:, k]

        queue.enqueue(step)


def main(argv: list[str] | None = None) -> int:
    ap = common.make_parser(__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=None)
    args = common.parse_args(ap, argv)
    import torch

    from inference import Model
    from inference.demo import pipeline, train

    events = args.events or (12 if args.smoke else 60 if args.quick else 300)
    model_path = train.ensure_model("jit", log=not args.no_progress)
    jit = torch.jit.load(str(model_path))
    backends = [b for b in ("cpu_serial", "cpu_threads", "opencl") if b in pk.available_backends()]
    configs = [(b, s, route) for b in backends for s in (1, 2, 4) for route in ("zero-copy", "naive copy")
               if route == "zero-copy" or b != "opencl"]
    rows = []
    for backend, streams, route in common.progress(configs, desc="pipeline", disable=args.no_progress):
        model = Model(str(model_path)) if route == "zero-copy" else NaiveCopyModel(jit)
        dev = pk.device(backend)
        report = pipeline.Report(backend, events, streams, route)
        pipeline._run_streams(dev, model, report, n_particles=40, progress=False)
        rows.append({"backend": backend, "streams": streams, "route": route, "events": events,
                     "events_per_s": report.events_per_s, "gnn_purity": report.gnn.purity,
                     "gnn_efficiency": report.gnn.efficiency,
                     **{f"{k}_ms_per_event": 1e3 * v / events for k, v in report.step_s.items()}})
    by = {(r["backend"], r["streams"], r["route"]): r["events_per_s"] for r in rows}
    summary: dict[str, dict[str, float]] = {}
    for b in backends:
        summary[f"{b} events/s (zero-copy)"] = {f"{s} streams": by[(b, s, "zero-copy")] for s in (1, 2, 4)}
        if (b, 1, "naive copy") in by:
            summary[f"{b} zero-copy / naive copy"] = {
                f"{s} streams": by[(b, s, "zero-copy")] / by[(b, s, "naive copy")] for s in (1, 2, 4)}
        summary[f"{b} scaling vs 1 stream"] = {
            f"{s} streams": by[(b, s, "zero-copy")] / by[(b, 1, "zero-copy")] for s in (1, 2, 4)}
    doc = common.result_document("pipeline", "cpu: " + ", ".join(str(pk.device(b)) for b in backends),
                                 args.quick, rows, summary, model=str(model_path.name))
    out = common.write_json(args.out, "pipeline", doc)
    plot(rows, backends, args.out)
    for k, v in summary.items():
        print(f"{k:<36} " + "  ".join(f"{s}: {x:8.2f}" for s, x in v.items()))
    print(f"wrote {out}")
    return 0


def plot(rows: list[dict], backends: list[str], out_dir: Path) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for b in backends:
        for route, style in (("zero-copy", "-o"), ("naive copy", "--s")):
            pts = [(r["streams"], r["events_per_s"]) for r in rows if r["backend"] == b and r["route"] == route]
            if pts:
                ax.plot(*zip(*pts), style, label=f"{b}, {route}")
    ax.set_xlabel("framework streams (queues)")
    ax.set_ylabel("events / s")
    ax.set_xticks([1, 2, 4])
    ax.set_title("fragment-merging pipeline: generate -> edges -> GNN -> merge")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    common.save_figure(fig, out_dir, "pipeline")


if __name__ == "__main__":
    sys.exit(main())
