"""KServe v2 datatype names, and checks of SoA blocks against a model's tensors (:class:`TensorDesc`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from portable import ArgumentTypeError

from .._tensor_desc import TensorDesc
from ._errors import MetadataMismatch

# KServe v2 / Triton datatype names <-> numpy dtypes (tritonclient.utils has the same table).
_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_FROM_NUMPY: dict[np.dtype, str] = {v: k for k, v in _TO_NUMPY.items()}


def triton_dtype(dtype: Any) -> str:
    """The KServe v2 datatype name of a numpy dtype (``float32`` -> ``"FP32"``)."""
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise ArgumentTypeError(
            f"dtype {dt} has no KServe v2 datatype; give the column one of {', '.join(str(d) for d in _FROM_NUMPY)}"
        ) from None


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a KServe v2 datatype name (``"FP32"`` -> ``float32``)."""
    name = name.upper().removeprefix("TYPE_")
    if name == "FLOAT32":
        name = "FP32"
    try:
        return _TO_NUMPY[name]
    except KeyError:
        raise ArgumentTypeError(
            f"KServe v2 datatype {name!r} is not supported by alpyka; it reads {', '.join(_TO_NUMPY)}: "
            "serve the model with tensors of those types"
        ) from None


#: the client's name of a tensor description (public: ``inference.remote.TensorSpec``)
TensorSpec = TensorDesc


def check_block(spec: TensorDesc, block_name: str, dtype: Any, shape: Sequence[int], role: str) -> None:
    """Raise :class:`MetadataMismatch` naming the block when dtype or shape do not fit ``spec``.

    ``shape`` is the block's shape, batch first when the model batches (``spec.batched``).
    """
    if np.dtype(dtype) != spec.dtype:
        raise MetadataMismatch(
            f"{role} block {block_name!r} has dtype {np.dtype(dtype)}, the model's {role} "
            f"{spec.name!r} expects {spec.dtype} ({triton_dtype(spec.dtype)})"
        )
    if not spec.matches(tuple(shape)):
        want = spec.describe().split(": ", 1)[1]
        raise MetadataMismatch(
            f"{role} block {block_name!r} has shape {list(shape)} (batch first), the model's "
            f"{role} {spec.name!r} expects {want}"
        )
