"""Compile-time values of the front-end: what a Python name or expression stands for while a
kernel is translated (a scalar IR expression, an array, a view, ``acc``, a tuple, a module...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import ir
from .types import ScalarType


@dataclass
class TupleVal:
    """A tuple known at compile time (index tuples, extents); items are values."""

    items: list[Any]


@dataclass
class ViewVal:
    """A SoA view argument: one ArrayRef per field; ``label`` names it in messages."""

    layout: Any
    const: bool
    fields: dict[str, ir.ArrayRef]
    size: ir.Expr
    label: str


@dataclass
class AccVal:
    """The ``acc`` parameter."""


@dataclass
class ModuleVal:
    """``math`` or ``numpy``."""

    name: str
    module: Any


@dataclass
class DTypeVal:
    """A numpy scalar type (``np.float32``): a cast when called, a dtype argument otherwise."""

    type: ScalarType


@dataclass
class BuiltinVal:
    """``min``, ``max``, ``abs``, ``range``, ``int``, ``float``, ``bool``, ``len``."""

    name: str


@dataclass
class AccMember:
    """``acc.<name>`` not called yet."""

    name: str


@dataclass
class LoopVal:
    """``acc.uniform_elements(...)`` and friends: only valid as a ``for`` loop's iterable."""

    kind: str
    args: list[Any]
    dim: int | None
    line: int


@dataclass
class RangeVal:
    start: ir.Expr
    stop: ir.Expr
    step: ir.Expr


@dataclass
class DeviceFunctionVal:
    function: Any  # the DeviceFunction object


@dataclass
class MultiCall:
    """A call of a device function that returns several values: assigned (``a, b = f(...)``,
    ``t = f(...)``), returned or called as a statement, never used as one number."""

    call: ir.DeviceCall
    name: str  # the device function's Python name (for messages)


@dataclass
class FieldAccess:
    """``view.<scalar field>``: readable as a value, writable, usable as an atomic target."""

    array: ir.ArrayRef
    label: str


@dataclass
class Labels:
    """Human names of arrays for messages (``column 'x' of argument 'out'``)."""

    by_name: dict[str, str] = field(default_factory=dict)
