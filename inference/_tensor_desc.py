"""One Triton tensor: what the client reads from a server, what ``serve`` declares, what a
pipeline's collections travel as (:mod:`inference.remote`, :mod:`inference.serving`,
:mod:`inference._pipeline._wire`).

``dims`` are per request sample, the batch axis excluded, -1 for any extent; ``batched`` says
that requests carry a leading batch axis (the model batches), which :attr:`TensorDesc.shape`
then puts first as -1, as Triton's model metadata shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from portable import ArgumentError, ArgumentTypeError

__all__ = ["TensorDesc"]

_SYNTAX = "use NAME[:DTYPE[:DIM,DIM,...]], e.g. features:float32:3 (dims exclude the batch axis; -1 is any)"


@dataclass(frozen=True)
class TensorDesc:
    """One model input or output: name, numpy dtype, dims per sample (batch axis excluded; -1
    any) and whether requests carry a batch axis first."""

    name: str
    dtype: np.dtype = np.dtype(np.float32)
    dims: tuple[int, ...] = (-1,)
    batched: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        object.__setattr__(self, "batched", bool(self.batched))

    @classmethod
    def parse(cls, value: Any) -> TensorDesc:
        """From ``"name:dtype:d0,d1"`` (dtype and dims optional), a tuple ``(name, dtype, dims)``
        or a dict ``{"name", "dtype", "dims" (or "shape"), "batched"}``."""
        if isinstance(value, TensorDesc):
            return value
        if isinstance(value, Mapping):
            return cls(
                value["name"],
                value.get("dtype", "float32"),
                value.get("dims", value.get("shape", (-1,))),
                value.get("batched", False),
            )
        if isinstance(value, str):
            parts = value.split(":")
            if not parts[0] or len(parts) > 3:
                raise ArgumentError(f"tensor declaration {value!r}: {_SYNTAX}")
            dtype = parts[1] if len(parts) > 1 and parts[1] else "float32"
            dims = tuple(int(d) for d in parts[2].split(",") if d) if len(parts) > 2 else (-1,)
            return cls(parts[0], dtype, dims)
        if isinstance(value, (tuple, list)) and value:
            name, *rest = value
            return cls(name, rest[0] if rest else "float32", rest[1] if len(rest) > 1 else (-1,))
        raise ArgumentTypeError(f"cannot read a tensor declaration from {value!r}")

    @classmethod
    def from_server(cls, name: str, dtype: Any, shape: Sequence[int], batching: bool) -> TensorDesc:
        """From a server's model metadata: ``shape`` has the batch axis first (-1) when the model
        batches; a tensor without one stays unbatched (the client refuses such a model)."""
        shape = tuple(int(d) for d in shape)
        if batching and shape[:1] == (-1,):
            return cls(name, dtype, shape[1:], True)
        return cls(name, dtype, shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape a request carries as the server declares it: -1 first when batched."""
        return (-1, *self.dims) if self.batched else self.dims

    def matches(self, shape: Sequence[int]) -> bool:
        """True when an array of ``shape`` fits :attr:`shape` (same rank; -1 matches any extent)."""
        want = self.shape
        return len(want) == len(shape) and all(d < 0 or d == a for d, a in zip(want, shape))

    def describe(self) -> str:
        """``name: dtype [d0, d1]`` (the shape as the server declares it)."""
        return f"{self.name}: {self.dtype} [{', '.join('-1' if d < 0 else str(d) for d in self.shape)}]"

    def to_json(self) -> dict[str, Any]:
        """A dict :meth:`parse` reads back."""
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype.name, "dims": list(self.dims)}
        if self.batched:
            out["batched"] = True
        return out
