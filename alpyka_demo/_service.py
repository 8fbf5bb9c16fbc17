"""The demo's server side as a pipeline: edge building + GNN + merging, served by Triton.

``alpyka demo --remote-pipeline auto|URL[,URL]``: the client only generates fragments; the
pipeline :func:`merge_fragments` builds the candidate edges, scores them with the GNN and merges
the fragments on the server, and returns their labels. Serve it yourself with
``alpyka serve alpyka_demo._service:merge_fragments --device cpu_serial``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import portable as pk
import soa
from inference import ModelMetadata, SoAMetadata, pipeline

from . import _events as E
from . import _kernels as K
from ._layouts import FEATURES, INDEX, MAX_FRAGMENTS, Edges, Fragments, edge_capacity


class Merged(soa.Layout):
    """What the server returns per fragment slot: its labels, and the event's edge count."""

    label = soa.column(np.int32)
    baseline = soa.column(np.int32)
    n_edges = soa.scalar(np.int32)


@pk.kernel
def start_labels(acc, frags, merged, edges, n):
    """Labels start as the fragments' own (as the generator set them); the edge count travels."""
    for i in acc.uniform_elements(n):
        merged.label[i] = frags.label[i]
        merged.baseline[i] = frags.baseline[i]
    if acc.once_per_grid():
        merged.n_edges = edges.n_edges


#: the model file the server loads: the local demo's default flavour (a torch.export program)
MODEL_KIND = "exported"
_gnn: Any = None
_gnn_lock = threading.Lock()


def gnn() -> Any:
    """The edge classifier, loaded once per process (once per server)."""
    global _gnn
    with _gnn_lock:
        if _gnn is None:
            from inference import Model

            from . import train

            _gnn = Model(str(train.ensure_model(MODEL_KIND, log=False)))
        return _gnn


@pipeline(inputs={"frags": Fragments}, outputs={"merged": Merged})
def merge_fragments(q: pk.Queue, frags: pk.PortableCollection, merged: pk.PortableCollection) -> None:
    """build_edges -> GNN -> label propagation, on ``q``; labels into ``merged``."""
    n, dev = frags.size, q.device
    cap = edge_capacity(n)
    edges = pk.PortableCollection(Edges, cap, q)
    edges.zero(q)
    pk.exec(q, E.workdiv(dev, n), K.build_edges, frags.const_view(), edges.view(), n, cap)
    inputs = SoAMetadata(edges).append_block("features", *FEATURES).append_block("index", *INDEX)
    gnn().to(q).forward(ModelMetadata(inputs, SoAMetadata(edges).append_block("score", "score")))
    pk.exec(q, E.workdiv(dev, n), start_labels, frags.const_view(), merged.view(), edges.const_view(), n)
    wd = E.workdiv(dev, cap)
    for _ in range(E.MERGE_ROUNDS):
        pk.exec(q, wd, K.merge_step, merged.view(), edges.const_view(), cap, np.float32(E.THRESHOLD))


class _Result:
    """The host copies of one event, shaped as the demo's scoring reads them (after a wait)."""

    def __init__(self, frags: pk.PortableCollection, merged: pk.PortableCollection) -> None:
        self._frags, self._merged = frags, merged
        self.size = edge_capacity(frags.size)

    truth = property(lambda self: self._frags.truth)
    label = property(lambda self: self._merged.label)
    baseline = property(lambda self: self._merged.baseline)
    n_edges = property(lambda self: self._merged.n_edges)


def run_event(queue: pk.Queue, remote: Any, seed: int, n_particles: int, stamp: Any) -> tuple[Any, Any]:
    """One event: fragments generated here, the rest on the server; ``stamp()`` brackets steps
    as the local demo's (produce, model = the remote pipeline, merge = nothing, to_host)."""
    n_slots = n_particles * MAX_FRAGMENTS
    frags = pk.PortableCollection(Fragments, n_slots, queue)
    merged = pk.PortableCollection(Merged, n_slots, queue)
    stamp()
    pk.exec(queue, E.workdiv(queue.device, n_particles), K.generate_fragments, frags.view(), n_particles, seed)
    stamp()
    remote(queue, frags, merged)
    stamp()
    stamp()
    result = _Result(frags.to_host(queue), merged.to_host(queue))
    stamp()
    return result, result


class RemoteDemoPipeline:
    """``merge_fragments`` on the given servers, or on a local Triton started for it (``auto``)."""

    def __init__(self, where: str, backend: str, timeout: float = 60.0) -> None:
        self.server = None
        if where == "auto":
            from inference.serving import serve

            gnn()  # trains the model here first if it is missing (not in the server's startup)
            self.server = serve(merge_fragments, device=backend)
            where = self.server.grpc_url
        try:
            self.remote = merge_fragments.remote(where, timeout=timeout, retries=1)
        except BaseException:
            self.close()
            raise
        self.description = (
            f"remote pipeline (local Triton at {where}, auto-started)" if self.server else f"remote pipeline ({where})"
        )

    def __call__(self, queue: pk.Queue, frags: Any, merged: Any) -> None:
        self.remote(queue, frags, merged)

    def run_event(self, queue: pk.Queue, seed: int, n_particles: int, stamp: Any) -> tuple[Any, Any]:
        """One demo event through this server (see :func:`run_event`)."""
        return run_event(queue, self.remote, seed, n_particles, stamp)

    def close(self) -> None:
        if getattr(self, "remote", None) is not None:
            self.remote.close()
        if self.server is not None:
            self.server.stop()
