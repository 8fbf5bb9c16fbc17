"""Field declarations of a SoA layout: plain columns, Eigen-style vectors and matrices, scalars."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._errors import ArgumentError, ArgumentTypeError

# dtypes a SoA column may hold: fixed-size numeric and boolean types only.
_ALLOWED_KINDS = "biufc"


def checked_dtype(dtype: Any, what: str) -> np.dtype:
    """Return ``np.dtype(dtype)`` or raise an ArgumentTypeError naming ``what`` for unsupported types."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentTypeError(
            f"{what}: {dtype!r} is not a numpy dtype ({exc}); give a numpy dtype such as np.float32"
        ) from None
    if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise ArgumentTypeError(
            f"{what}: dtype {dt} is not supported in a SoA layout; use a fixed-size "
            "numeric or boolean dtype (int8..int64, uint8..uint64, float16/32/64, "
            "complex64/128, bool)"
        )
    return dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt


@dataclass(eq=False)
class Field:
    """One member of a layout.

    ``kind`` is ``"column"``, ``"vector"``, ``"matrix"`` or ``"scalar"``; ``shape`` is the
    per-element component shape: ``()`` for columns and scalars, ``(R,)`` for vectors,
    ``(R, C)`` for matrices. Components of vectors and matrices are stored as separate
    padded columns, matrices in column-major component order (as Eigen does).
    """

    kind: str
    raw_dtype: Any
    shape: tuple[int, ...] = ()
    name: str = ""
    dtype: np.dtype = field(default=None, init=False)  # type: ignore[assignment]

    def validate(self, owner: str) -> None:
        """Check the dtype, naming ``owner.name`` in the error."""
        self.dtype = checked_dtype(self.raw_dtype, f"field {owner}.{self.name} (soa.{self.kind})")

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def components(self) -> int:
        """Number of padded columns this field occupies (1 for columns and scalars)."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        dims = "" if not self.shape else ", " + ", ".join(map(str, self.shape))
        dt = self.dtype if self.dtype is not None else self.raw_dtype
        return f"soa.{self.kind}({dt}{dims})" + (f" as {self.name!r}" if self.name else "")


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"{what} must be a positive integer (1, 2, 3, ...), got {value!r}")
    return int(value)


def column(dtype: Any) -> Field:
    """A plain column: one value of ``dtype`` per element."""
    return Field("column", dtype)


def vector(dtype: Any, size: int) -> Field:
    """An Eigen-style column vector of ``size`` components per element."""
    return Field("vector", dtype, (_positive_int(size, "soa.vector size"),))


def matrix(dtype: Any, rows: int, cols: int) -> Field:
    """An Eigen-style ``rows x cols`` matrix per element, components stored column-major."""
    shape = (_positive_int(rows, "soa.matrix rows"), _positive_int(cols, "soa.matrix cols"))
    return Field("matrix", dtype, shape)


def scalar(dtype: Any) -> Field:
    """One value of ``dtype`` for the whole collection."""
    return Field("scalar", dtype)
