"""KServe v2 tensor descriptions: dtype names, shapes with -1, and checks against SoA blocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ._errors import MetadataMismatch

# KServe v2 / Triton datatype names <-> numpy dtypes (tritonclient.utils has the same table).
_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "INT8": np.dtype(np.int8), "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64), "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16), "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
}
_FROM_NUMPY: dict[np.dtype, str] = {v: k for k, v in _TO_NUMPY.items()}


def triton_dtype(dtype: Any) -> str:
    """The KServe v2 datatype name of a numpy dtype (``float32`` -> ``"FP32"``)."""
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise TypeError(f"dtype {dt} has no KServe v2 datatype (supported: "
                        f"{', '.join(str(d) for d in _FROM_NUMPY)})") from None


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a KServe v2 datatype name (``"FP32"`` -> ``float32``)."""
    name = name.upper().removeprefix("TYPE_")
    if name == "FLOAT32":
        name = "FP32"
    try:
        return _TO_NUMPY[name]
    except KeyError:
        raise TypeError(f"KServe v2 datatype {name!r} is not supported by alpyka") from None


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output as the server declares it: shape per request (batch included
    when the model batches; -1 is any extent)."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    def describe(self) -> str:
        dims = ", ".join("-1" if d < 0 else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype} [{dims}]"


def shape_matches(declared: Sequence[int], actual: Sequence[int]) -> bool:
    """True when ``actual`` fits ``declared`` (same rank; -1 matches any extent)."""
    return len(declared) == len(actual) and all(d < 0 or d == a for d, a in zip(declared, actual))


def check_block(spec: TensorSpec, block_name: str, dtype: Any, shape: Sequence[int],
                batching: bool, role: str) -> None:
    """Raise :class:`MetadataMismatch` naming the block when dtype or shape do not fit ``spec``.

    ``shape`` is the block's shape, batch first. With a batching model the server's shape
    excludes nothing: :meth:`RemoteModel` always stores it batch-first (-1 for the batch).
    """
    if np.dtype(dtype) != spec.dtype:
        raise MetadataMismatch(
            f"{role} block {block_name!r} has dtype {np.dtype(dtype)}, the model's {role} "
            f"{spec.name!r} expects {spec.dtype} ({triton_dtype(spec.dtype)})")
    declared = spec.shape[1:] if batching else spec.shape
    actual = tuple(shape)[1:] if batching else tuple(shape)
    if not shape_matches(declared, actual):
        want = spec.describe().split(": ", 1)[1]
        raise MetadataMismatch(
            f"{role} block {block_name!r} has shape {list(shape)} (batch first), the model's "
            f"{role} {spec.name!r} expects {want}")
