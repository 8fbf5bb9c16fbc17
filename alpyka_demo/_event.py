"""One event of the demo: its steps (kernels, the edge classifier, the merge), their timing
report, and the model the classifier step calls (local or on a Triton server). Used by the
demo's streams (:mod:`alpyka_demo.pipeline`) and its Dask workers (:mod:`alpyka_demo._dask`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import portable as pk

from . import _events as E

STEPS = ("produce", "model", "merge", "to_host")


@dataclass
class Report:
    backend: str
    events: int
    streams: int
    model: str
    wall_s: float = 0.0
    gnn: E.Score = field(default_factory=E.Score)
    baseline: E.Score = field(default_factory=E.Score)
    step_s: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STEPS})
    edges: int = 0
    dropped_edges: int = 0
    #: where the events came from; ``truth`` is False for a file (no fragment truth: not scored)
    source: str = "generated"
    truth: bool = True

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0

    def table(self) -> str:
        rows = [
            ("backend", self.backend),
            ("model", self.model),
            ("events / streams", f"{self.events} / {self.streams}"),
            ("events from", self.source),
            ("throughput", f"{self.events_per_s:.1f} events/s ({self.wall_s:.2f} s)"),
            ("GNN merging", f"efficiency {self.gnn.efficiency:.3f}, purity {self.gnn.purity:.3f}"),
            ("distance-only baseline", f"efficiency {self.baseline.efficiency:.3f}, purity {self.baseline.purity:.3f}"),
            ("candidate edges", f"{self.edges} ({self.dropped_edges} over capacity)"),
        ]
        if not self.truth:
            rows[5:7] = [("GNN merging", "not scored (the file has no fragment truth)")]
        total = sum(self.step_s.values()) or 1.0
        for s in STEPS:
            rows.append(
                (
                    f"  step {s}",
                    f"{1e3 * self.step_s[s] / max(self.events, 1):.2f} ms/event ({100 * self.step_s[s] / total:.0f}%)",
                )
            )
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _stamp(queue: pk.Queue, stamps: list[float]) -> None:
    """Enqueue a timestamp: host tasks run in queue order, so consecutive stamps bracket a step."""
    queue.enqueue(lambda: stamps.append(time.perf_counter()))


def run_event(
    queue: pk.Queue, model: Any, seed: int, n_particles: int, timed: bool, produce: Any = None
) -> tuple[Any, list[float]]:
    """Enqueue one event; returns the host copy of its fragments/edges and the step stamps."""
    stamps: list[float] = []

    def stamp() -> None:
        if timed:
            _stamp(queue, stamps)

    if hasattr(model, "run_event"):  # --remote-pipeline: fragments here, the rest on the server
        return model.run_event(queue, seed, n_particles, stamp), stamps
    ev = E.allocate(queue, n_particles)
    stamp()
    (produce or E.produce)(queue, ev, seed)  # the generator, or a file's events (_from_file)
    stamp()
    model.forward(E.model_metadata(ev), queue=queue)
    stamp()
    E.merge(queue, ev)
    stamp()
    frags = ev.frags.to_host(queue)
    edges = ev.edges.to_host(queue)
    stamp()
    return (frags, edges), stamps


def load_model(kind: str, remote: str | None, device: pk.Device) -> tuple[Any, str]:
    """The edge classifier: a local Model (exported/aot/jit/eager) or a RemoteModel for ``remote``."""
    # torch, through inference and train, imported when a model is loaded: not by the demo's
    # --help, its Dask client or a pipeline-only run
    from . import train

    if remote:
        from inference import RemoteModel

        path = train.ensure_model("exported")
        if remote == "auto":  # no server given: host the model on a local Triton (stopped at exit)
            model = RemoteModel(None, "edge_gnn", fallback=str(path), fallback_options=train.SERVE_OPTIONS)
            return model, f"remote (local Triton at {model.url}, auto-started)"
        return RemoteModel(remote, "edge_gnn"), f"remote ({remote})"
    from inference import Model

    if kind == "eager":
        model, _ = train.train(log=False)
        return Model(model), "eager"
    path = train.ensure_model(kind)
    return Model(str(path)), f"{kind} ({path.name})"
