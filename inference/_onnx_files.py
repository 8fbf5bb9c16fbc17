"""ONNX model files that keep tensors in external data files (weights in ``model.onnx.data``
beside the model): which files a model names, each checked to lie in the model's folder before
ONNX Runtime reads it (a model from elsewhere cannot make it read another file)."""

from __future__ import annotations

import itertools
import ntpath
import os
import re
from collections.abc import Iterator
from typing import Any

from ._loading import ModelFileError


def _tensors(graph: Any) -> Iterator[Any]:
    """Every tensor of an ONNX graph: initializers (sparse ones too) and node attributes,
    subgraphs (``If``/``Loop`` bodies) included."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield from (sp.values, sp.indices)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Any) -> Iterator[Any]:
    for node in nodes:
        for a in node.attribute:
            yield a.t
            yield from a.tensors
            for sp in (a.sparse_tensor, *a.sparse_tensors):
                yield from (sp.values, sp.indices)
            for g in (a.g, *a.graphs):
                yield from _tensors(g)


def external_data_files(data: bytes, path: str) -> list[str]:
    """The external data files the ONNX model ``data`` (read from ``path``) names, as paths in the
    model's folder, checked: each is a relative path inside that folder (no ``..``, not absolute,
    no symlink leading out) and exists. A :class:`ModelFileError` names the tensor otherwise."""
    if b"location" not in data:  # an external tensor names its file in a "location" entry
        return []
    try:
        import onnx
    except ImportError:
        raise ModelFileError(
            f"{path} may keep tensors in external data files; checking where they are needs "
            "the onnx package: pip install 'alpyka[onnx]'"
        ) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and others
        raise ModelFileError(f"{path}: not a valid ONNX model ({exc}); the file is truncated or damaged") from None
    folder = os.path.dirname(os.path.abspath(path))
    tensors = itertools.chain(_tensors(model.graph), *(_node_tensors(f.node) for f in model.functions))
    files: dict[str, None] = {}
    for t in tensors:
        if len(t.external_data):
            files[_external_file(path, folder, t)] = None
    return list(files)


def _external_file(path: str, folder: str, tensor: Any) -> str:
    """The checked file of one external tensor (see :func:`external_data_files`)."""
    entries = {e.key: e.value for e in tensor.external_data}
    where = entries.get("location", "")
    what = f"{path}: tensor {tensor.name!r} keeps its data in external file {where!r}"
    if not where:
        raise ModelFileError(
            f"{path}: tensor {tensor.name!r} has external data without a location; the file is "
            "damaged: re-export the model"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in where):
        raise ModelFileError(
            f"{what}, a name with a NUL or another control character, which no file name in the "
            "model's folder has; refused: the file is damaged or crafted: re-save it with a plain "
            "file name, e.g. onnx.save_model(model, 'model.onnx', save_as_external_data=True, "
            "location='model.onnx.data')"
        )
    if os.path.isabs(where) or ntpath.isabs(where) or ".." in re.split(r"[\\/]", where):
        raise ModelFileError(
            f"{what}, outside the model's folder; refused (a model reads its external data "
            "only from files beside it): re-save it with a plain file name, e.g. onnx.save_model("
            "model, 'model.onnx', save_as_external_data=True, location='model.onnx.data')"
        )
    full = os.path.join(folder, where)
    base = os.path.realpath(folder)
    if os.path.commonpath([base, os.path.realpath(full)]) != base:
        raise ModelFileError(
            f"{what}, a link to {os.path.realpath(full)!r} outside the model's folder; refused: "
            "copy the data file next to the model"
        )
    if not os.path.isfile(full):
        raise ModelFileError(
            f"{what}, which is missing from the model's folder {folder!r}: copy {where!r} there "
            "(external data is read from beside the model, not from the working directory)"
        )
    return full
