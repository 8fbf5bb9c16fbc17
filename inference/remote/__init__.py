"""Inference as a service (CMS SONIC): SoA blocks sent to a Triton server over KServe v2.

    from inference.remote import RemoteModel
    model = RemoteModel("127.0.0.1:8001", "mlp", timeout=5, retries=2).to(q)
    model.forward(ModelMetadata(inputs, outputs))      # in queue order; outputs land in the SoA
    fut = model.forward_async(md); q.wait_for(fut.event)

Needs ``tritonclient[grpc,http]``; :func:`inference.serve` hosts models with PyTriton.
"""

from ._client import RemoteModel
from ._errors import (
    BatchSplitWarning,
    InferenceFailed,
    MetadataMismatch,
    ModelNotFound,
    ModelNotReady,
    RemoteError,
    RemoteTimeout,
    ServerUnavailable,
)
from ._future import RemoteFuture
from ._pipeline import RemotePipeline
from ._statistics import ClientStatistics, RemoteStatistics, ServerStatistics
from ._tensors import TensorSpec
from ._transport import ModelInfo

__all__ = [
    "BatchSplitWarning",
    "ClientStatistics",
    "InferenceFailed",
    "MetadataMismatch",
    "ModelInfo",
    "ModelNotFound",
    "ModelNotReady",
    "RemoteError",
    "RemoteFuture",
    "RemoteModel",
    "RemotePipeline",
    "RemoteStatistics",
    "RemoteTimeout",
    "ServerStatistics",
    "ServerUnavailable",
    "TensorSpec",
]
