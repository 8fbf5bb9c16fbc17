"""Pipelines: chains of kernels and models over SoA collections, run locally or served by Triton.

    @pipeline(inputs=Fragments, outputs=Labels)
    def merge(q, frags, labels): ...            # enqueues kernels / Model.forward on q
    merge(q, frags_coll, labels_coll)            # local
    handle = serve(merge, device="cpu_threads")  # Triton config derived from the layouts
    merge.remote(handle.grpc_url)(q, frags_coll, labels_coll)   # the same call, on the server

Modules: :mod:`._declare` (the decorator and the local call), :mod:`._wire` (Triton tensors
derived from layouts, collections <-> arrays, poison fill), :mod:`._server` (the server side),
:mod:`._remote` (the client).
"""

from __future__ import annotations

from typing import Any

from ._declare import OutputsNotFilled, Pipeline, PipelineError, Slot, as_pipeline, pipeline
from ._server import load_reference
from ._wire import derive_config

__all__ = [
    "OutputsNotFilled",
    "Pipeline",
    "PipelineError",
    "RemotePipeline",
    "Slot",
    "as_pipeline",
    "derive_config",
    "load_reference",
    "pipeline",
]


def __getattr__(name: str) -> Any:
    if name == "RemotePipeline":  # tritonclient is optional: imported when asked for
        from ._remote import RemotePipeline

        return RemotePipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
