"""Types of the kernel language: scalar types, array types and numba's promotion rules.

Every expression of the IR carries a :class:`ScalarType`; arrays carry an :class:`ArrayType`.
The promotion rules are numba's (measured against numba 0.68's typing context):

- integers: two unsigned operands give ``uint64``, anything else ``int64`` (bool counts as a
  signed integer in arithmetic);
- ``float64`` with anything gives ``float64``; ``float32`` with ``float32``, ``bool``, ``int8``,
  ``int16``, ``uint8``, ``uint16`` gives ``float32``, with wider integers ``float64``;
- ``/`` of two integers gives ``float64``; ``float32 ** integer`` stays ``float32``;
- bitwise ``& | ^`` of two bools stay ``bool``; shifts take the left operand's signedness;
- unary ``-`` and ``~`` of an integer keep its type; of a bool give ``int64`` (declared in
  :mod:`.operations`);
- Python literals: ``int`` is ``int64`` (``uint64`` from ``2**63`` to ``2**64 - 1``; wider is an
  error, see :mod:`._folding`), ``float`` is ``float64``, ``bool`` is ``bool``;
- a local variable assigned values of several types gets their unification (the same rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import ArgumentTypeError

_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")


@dataclass(frozen=True)
class ScalarType:
    """A scalar type named like its numpy dtype (``"float32"``, ``"int64"``, ``"bool"``...)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in _NAMES:
            raise TypeError(f"{self.name!r} is not a kernel scalar type; supported: {', '.join(_NAMES)}")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.name)

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def is_float(self) -> bool:
        return self.name.startswith("float")

    @property
    def is_integer(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.name.startswith(("int", "uint"))

    @property
    def is_unsigned(self) -> bool:
        return self.name.startswith("uint")

    @property
    def bits(self) -> int:
        return 8 if self.is_bool else self.dtype.itemsize * 8

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


BOOL = ScalarType("bool")
INT8, INT16, INT32, INT64 = (ScalarType(n) for n in ("int8", "int16", "int32", "int64"))
UINT8, UINT16, UINT32, UINT64 = (ScalarType(n) for n in ("uint8", "uint16", "uint32", "uint64"))
FLOAT32, FLOAT64 = ScalarType("float32"), ScalarType("float64")
#: the index type of every work-division query and element loop
INDEX = INT64


class VoidType:
    """The type of a device function that returns nothing."""

    name = "void"

    def __repr__(self) -> str:
        return "void"


VOID = VoidType()


@dataclass(frozen=True)
class TupleType:
    """The type of a device function that returns several values (``return a, b``): one scalar
    type per position, each unified over the function's returns as a scalar return's is."""

    items: tuple[ScalarType, ...]

    @property
    def name(self) -> str:
        return "(" + ", ".join(t.name for t in self.items) + ")"

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


def scalar_type(dtype: object) -> ScalarType:
    """The kernel type of a numpy dtype (or anything ``np.dtype`` accepts)."""
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    if dt.name not in _NAMES:
        raise ArgumentTypeError(f"dtype {dt} is not supported in kernels; supported: {', '.join(_NAMES)}")
    return ScalarType(dt.name)


#: array kinds: where an array comes from and how its logical indices map to memory
ARRAY_KINDS = ("column", "vector", "matrix", "scalar_field", "buffer", "shared", "dynamic_shared", "private")


@dataclass(frozen=True)
class ArrayType:
    """An array the kernel indexes.

    ``kind`` (one of :data:`ARRAY_KINDS`) says how logical indices map to memory:

    - ``column``: ``a[i]``, ``i < size``; contiguous.
    - ``vector``: ``a[i, k]`` = element ``k * pitch + i`` (each component a padded column).
    - ``matrix``: ``a[i, r, c]`` = element ``(c * rows + r) * pitch + i`` (column-major components).
    - ``scalar_field``: one element, indexed with no index (``a[]``).
    - ``buffer``: ``ndim`` 1-3, C-contiguous: ``a[i, j]`` = element ``i * extent1 + j``.
    - ``shared`` / ``dynamic_shared``: per-block memory, C-contiguous like a buffer.
    - ``private``: per-thread memory (``acc.local_array``, a random engine's state), C-contiguous
      like a buffer.

    ``component_shape`` is ``(R,)`` for vectors, ``(R, C)`` for matrices, else ``()``.
    ``ndim`` is the number of logical indices.
    """

    dtype: ScalarType
    kind: str
    ndim: int
    const: bool = False
    component_shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ARRAY_KINDS:
            raise ValueError(f"unknown array kind {self.kind!r}")

    def __str__(self) -> str:
        c = "const " if self.const else ""
        comp = f"{list(self.component_shape)}" if self.component_shape else ""
        return f"{c}{self.kind}{comp}<{self.dtype}, {self.ndim}d>"


# ----------------------------------------------------------------------------- promotion
_SMALL_FOR_F32 = {"bool", "int8", "int16", "uint8", "uint16"}


def unify(a: ScalarType, b: ScalarType) -> ScalarType:
    """The type of ``a + b`` (numba); also how a variable assigned both types is typed."""
    if a == b:
        if a.is_float:
            return a
        return UINT64 if a.is_unsigned else INT64
    if a.is_float or b.is_float:
        if FLOAT64 in (a, b):
            return FLOAT64
        other = b if a == FLOAT32 else a
        if other == FLOAT32 or other.name in _SMALL_FOR_F32:
            return FLOAT32
        return FLOAT64
    if a.is_unsigned and b.is_unsigned:
        return UINT64
    return INT64


def variable_type(a: ScalarType, b: ScalarType) -> ScalarType:
    """Type of a local assigned values of types ``a`` and ``b`` (keeps ``a`` when equal)."""
    return a if a == b else unify(a, b)


ARITHMETIC_OPS = ("+", "-", "*", "/", "//", "%", "**")
BITWISE_OPS = ("&", "|", "^", "<<", ">>")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")


def binary_result(op: str, a: ScalarType, b: ScalarType) -> ScalarType:
    """Result type of ``a <op> b``; raises TypeError for an invalid combination."""
    if op == "/":
        if not (a.is_float or b.is_float):
            return FLOAT64
        return unify(a, b)
    if op == "**":
        if a == FLOAT32 and not b.is_float:
            return FLOAT32
        return unify(a, b)
    if op in ("+", "-", "*", "//", "%"):
        return unify(a, b)
    if op in BITWISE_OPS:
        if a.is_float or b.is_float:
            raise ArgumentTypeError(
                f"operator {op} needs integer operands, got {a} and {b}; convert the float first, e.g. int(x)"
            )
        if op in ("<<", ">>"):
            return UINT64 if a.is_unsigned else INT64
        if a.is_bool and b.is_bool:
            return BOOL
        return unify(a, b)
    raise ArgumentTypeError(
        f'operator {op} is not in the kernel language; docs/kernels.md, "Types and arithmetic", lists them'
    )


def operand_type(op: str, a: ScalarType, b: ScalarType) -> ScalarType:
    """The type both operands are converted to before ``a <op> b`` is computed."""
    if op == "/":
        return binary_result(op, a, b)
    if op == "**":
        r = binary_result(op, a, b)
        return r
    if op in ("<<", ">>"):
        return binary_result(op, a, b)
    if op in COMPARE_OPS:
        return a if a == b else unify(a, b)
    return binary_result(op, a, b)


def literal_type(value: object) -> ScalarType:
    """Type of a Python or numpy constant."""
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, np.generic):
        return scalar_type(value.dtype)
    if isinstance(value, int):
        return INT64
    if isinstance(value, float):
        return FLOAT64
    raise ArgumentTypeError(
        f"{value!r} ({type(value).__name__}) is not a kernel constant; use int, float, bool or a numpy scalar"
    )
