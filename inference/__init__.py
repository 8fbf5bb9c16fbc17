"""SoA collections into PyTorch models (zero-copy), and Triton inference as a service.

    from inference import Model, SoAMetadata, ModelMetadata
    inputs = SoAMetadata(in_coll).append_block("features", "x", "y", "z")
    outputs = SoAMetadata(out_coll).append_block("preds", "m", "n")
    Model("model.pt2").to(q).forward(ModelMetadata(inputs, outputs))   # or "model.onnx"

Contract of the metadata objects (stable; ``inference.remote`` builds on it):

- ``SoAMetadata(collection, which=None)``: ``which`` selects a block of a multi-layout collection.
  ``.append_block(name, *columns, rows_per_item=1)`` (chainable), ``.change_order(names)``, ``.block_names``
  (ordered), ``.block(name)`` -> ``.name .columns .dtype`` (numpy) ``.shape`` (batch axis first)
  ``.strides`` (elements); ``.tensor(name)`` (torch tensor over the collection memory),
  ``.numpy(name)`` (zero-copy strided view for host memory, a host copy otherwise),
  ``.write_outputs({name: array_or_tensor})`` (validates every output against its block first,
  then writes; a mismatch leaves the collection unchanged and names the block),
  ``.collection``, ``.size`` (the batch size n).
- ``ModelMetadata(inputs, outputs, batch_size=None, cast_outputs=False, input_dtype=None,
  layout="zero_copy")`` with ``.inputs``, ``.outputs``, ``.batch_size``, ``.layout``;
  ``Model.forward(meta, batch_size=B)`` overrides the batch size. ``layout``: the model reads the
  input blocks in place (``"zero_copy"``), gathered row-major (``"gather"``) or as measured faster
  once per geometry (``"auto"``, see ``inference._layout``); ``Model.input_layout(meta)`` says which.

Shapes and strides follow CMSSW PyTorchAlpaka (see ``inference._block``). Memory torch can
address (cpu_serial, cpu_threads, cuda, rocm) is used in place; OpenCL memory goes through the
copy path (host staging), which ``repr`` of the metadata and the model states.
"""

from __future__ import annotations

import importlib
from typing import Any

from portable import env as _env

from ._block import Block
from ._loading import ModelFileError, load_state_dict
from ._pipeline import OutputsNotFilled, PipelineError
from ._pipeline_api import Pipeline, pipeline
from .remote import RemoteModel, RemotePipeline  # tritonclient itself loads with the first connection
from .serving import serve  # PyTriton itself loads in the server process

# read when a model is first made; a bad value stops the import instead, with one line in a script
_env.reported_at_import(_env.torch_threads)

#: names whose modules import torch, imported at their first use: a process that only serves an
#: ONNX model or a pipeline without models (``serve``'s server process) never loads torch
_WITH_TORCH = {
    "LayoutError": "._layout",
    "ModelMetadata": "._metadata",
    "SoAMetadata": "._metadata",
    "Model": "._model",
    "set_torch_threads": "._runtime",
    "torch_threads": "._runtime",
    "torch_device": "._torch_queue",
}

__all__ = [
    "Block",
    "LayoutError",
    "Model",
    "ModelFileError",
    "ModelMetadata",
    "SoAMetadata",
    "load_state_dict",
    "set_torch_threads",
    "torch_threads",
    "torch_device",
    "aot",
    "export",
    "RemoteModel",
    "serve",
    "OutputsNotFilled",
    "Pipeline",
    "PipelineError",
    "pipeline",
    "RemotePipeline",
]


def __getattr__(name: str) -> Any:
    module = _WITH_TORCH.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # later lookups do not come here
        return value
    if name == "aot":  # imported lazily: `python -m inference.aot` must not find it imported
        return importlib.import_module("inference.aot")
    if name == "export":  # export(module, example_inputs, "x.pt2" | "x.onnx"); lazily, as aot
        return importlib.import_module("inference._export").export
    raise AttributeError(f"module 'inference' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the lazily imported ones included (tab completion, ``help``)."""
    return sorted(set(globals()) | set(__all__))
