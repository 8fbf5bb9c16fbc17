"""``alpyka demo --workers N`` / ``--scheduler ADDRESS``: the demo's events on Dask workers.

Each worker builds its queue, its model (or RemoteModel: with ``--remote URL`` every worker
talks to the same Triton server) and, with ``--input``, its copy of the file's events once
(``setup``); chunks of consecutive events then run there one after another on that queue
(``process``), and the client adds up the workers' counts into one report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import portable as pk

from . import _events as E
from ._event import STEPS, Report, load_model, run_event

#: events per Dask task: large enough that the ~3 ms per task stay small against ~2-3 ms per event
EVENTS_PER_CHUNK = 25


@dataclass
class WorkerSetup:
    """``setup(device)`` for pk.distributed.run (a picklable callable)."""

    model_kind: str
    remote: str | None
    input: str | None

    def __call__(self, device: pk.Device) -> dict:
        from ._from_file import events_source

        source = events_source(self.input, device)
        model, desc = load_model(self.model_kind, self.remote, device)
        queue = pk.Queue(device)
        n_particles = source.n_particles if source is not None else None
        produce = source.produce if source is not None else None
        run_event(queue, model, 10**6 + 7, n_particles or 40, timed=False, produce=produce)  # warm up
        queue.wait()
        return {"queue": queue, "model": model, "desc": desc, "source": source}


def process_events(state: dict, chunk: tuple[int, int, int]) -> dict:
    """Events ``[start, stop)`` on this worker's queue: merging counts, edges and step times."""
    start, stop, n_particles = chunk
    source, queue, model = state["source"], state["queue"], state["model"]
    if source is not None:
        n_particles = source.n_particles
    out = {
        "gnn": [0, 0, 0],
        "baseline": [0, 0, 0],
        "edges": 0,
        "dropped": 0,
        "step_s": dict.fromkeys(STEPS, 0.0),
        "model": state["desc"],
        "source": source.describe() if source is not None else None,
    }
    for seed in range(start, stop):
        (frags, edges), stamps = run_event(
            queue, model, seed, n_particles, timed=True, produce=source.produce if source is not None else None
        )
        queue.wait()
        for k, v in zip(
            ("gnn", "baseline"), (E.pair_scores(frags.truth, frags.label), E.pair_scores(frags.truth, frags.baseline))
        ):
            out[k] = [a + b for a, b in zip(out[k], v)]
        n_edges = int(edges.n_edges)
        out["edges"] += min(n_edges, edges.size)
        out["dropped"] += max(0, n_edges - edges.size)
        for s, (a, b) in zip(STEPS, zip(stamps, stamps[1:])):
            out["step_s"][s] += b - a
    return out


def run_dask(
    backend: str,
    events: int,
    n_particles: int,
    model_kind: str,
    remote: str | None,
    input: str | None,
    workers: int,
    scheduler: str | None,
) -> Report:
    """The demo on Dask: an embedded cluster of ``workers`` processes, or ``scheduler``'s."""
    E.check_particles(n_particles)
    chunks = [(a, min(a + EVENTS_PER_CHUNK, events), n_particles) for a in range(0, events, EVENTS_PER_CHUNK)]
    where = scheduler or f"{workers} local Dask workers"
    report = Report(backend, events, 1, "")
    t0 = time.perf_counter()
    parts = pk.distributed.run(
        process_events,
        chunks,
        setup=WorkerSetup(model_kind, remote, input),
        client=scheduler,
        workers=workers,
        backend=backend,
    )
    report.wall_s = time.perf_counter() - t0  # cluster start and per-worker setup included
    for p in parts:
        report.gnn.add(tuple(p["gnn"]))
        report.baseline.add(tuple(p["baseline"]))
        report.edges += p["edges"]
        report.dropped_edges += p["dropped"]
        for s in STEPS:
            report.step_s[s] += p["step_s"][s]
    report.model = f"{parts[0]['model']} on {where}, one stream each (wall time includes the cluster start)"
    if parts and parts[0]["source"] is not None:
        report.source, report.truth = f"{input}: {parts[0]['source']}", False
    return report
