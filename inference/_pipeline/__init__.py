"""Pipeline declarations, what a pipeline's client and server agree on: the declared collections
(:mod:`._declare`) and the Triton tensors derived from their layouts, collections <-> arrays and
the poison fill (:mod:`._wire`).

By role, as PyTriton's packages: the server side is :mod:`inference.serving._pipelines` (import
a pipeline by reference, run requests on a server queue), the client
:class:`inference.remote.RemotePipeline`, and the user's ``@pipeline`` / :class:`inference.Pipeline`
(:mod:`inference._pipeline_api`) sits above both. This package imports neither.
"""

from __future__ import annotations

from ._declare import (
    PIPELINE_ERROR_MARK,
    OutputsNotFilled,
    PipelineDeclaration,
    PipelineError,
    Slot,
    as_pipeline,
)
from ._wire import derive_config

__all__ = [
    "PIPELINE_ERROR_MARK",
    "OutputsNotFilled",
    "PipelineDeclaration",
    "PipelineError",
    "Slot",
    "as_pipeline",
    "derive_config",
]
