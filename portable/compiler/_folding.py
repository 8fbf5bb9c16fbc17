"""Constant folding of the front-end: the exact arithmetic of Python int literals and numpy's
fixed-width rules for typed constants, so a folded constant never depends on a backend.

- An expression made only of Python int literals (``1 << 64``, ``2**63 - 1``, ``-5``) is computed
  exactly, as Python computes it, and then typed as numba types a literal: ``int64`` when it
  fits, ``uint64`` from ``2**63`` to ``2**64 - 1``; anything else is a :class:`ConstantError`
  (reported as a ``KernelSyntaxError`` at the user's line). So are what Python itself refuses
  (``1 // 0``, ``1 << -1``, ``2 ** -1`` of integers).
- A typed constant (a numpy scalar, a cast, a literal once it met a typed operand) folds with the
  rules every backend computes at run time (numpy's): integers wrap in their width; ``//`` and
  ``%`` by zero give 0; ``x // -1`` of the most negative value wraps to itself; a shift by a
  count outside ``[0, 64)`` gives 0 (``>>`` of a negative value: -1); an integer ``**`` with a
  negative exponent gives the integral part of the real result (1, -1 or 0); floats follow
  numpy's ``floor_divide``/``remainder`` (``7.0 // 0.0`` is inf).
- A constant converted explicitly or implicitly to a type it does not fit (``np.int32(2**40)``,
  ``int(1e30)``, ``int(math.nan)``, ``np.uint8(-1)``) is a :class:`ConstantError`.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from typing import Any

import numpy as np

from .._errors import AlpykaError
from .operations import OPERATORS, UNARY, int_range, wrap
from .types import INT64, UINT64, ScalarType

#: how far an intermediate of a literal expression may grow before it cannot come back to 64 bits
_LITERAL_BITS = 128
_INT_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_FIT_HINT = "kernel integers are 64-bit (an int literal is int64, or uint64 from 2**63 to 2**64 - 1, as in numba)"


class ConstantError(AlpykaError, ValueError):
    """A constant that does not fit its type, or a literal expression Python refuses; the
    front-end reports it as a ``KernelSyntaxError`` at the line that holds it."""


# ----------------------------------------------------------------------------- Python int literals
def literal_int(node: ast.AST) -> int | None:
    """The exact value of ``node`` when it is an expression of Python int literals only, else None.

    Raises :class:`ConstantError` where Python raises (division by zero, a negative shift count, a
    negative power of an integer) or where an intermediate grows past 128 bits."""
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        a = literal_int(node.operand)
        if a is None:
            return None
        return -a if isinstance(node.op, ast.USub) else (a if isinstance(node.op, ast.UAdd) else ~a)
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        a = literal_int(node.left)
        b = literal_int(node.right) if a is not None else None
        if b is None:
            return None
        return _exact(node.op, a, b, ast.unparse(node))
    return None


def _exact(op: ast.operator, a: int, b: int, text: str) -> int:
    big = ConstantError(f"the constant {text} does not fit in 64 bits; {_FIT_HINT}")
    if isinstance(op, (ast.FloorDiv, ast.Mod)) and b == 0:
        raise ConstantError(f"{text}: integer division by zero")
    if isinstance(op, (ast.LShift, ast.RShift)) and b < 0:
        raise ConstantError(f"{text}: negative shift count")
    if isinstance(op, ast.Pow) and b < 0:
        raise ConstantError(
            f"{text}: integers to negative integer powers are not allowed (write a float, e.g. 2.0 ** -1)"
        )
    if isinstance(op, ast.LShift) and a != 0 and b > _LITERAL_BITS:
        raise big
    if isinstance(op, ast.Pow) and abs(a) > 1 and b > _LITERAL_BITS:
        raise big
    v = _INT_OPS[type(op)](a, b)
    if v.bit_length() > _LITERAL_BITS:
        raise big
    return v


def literal_type(value: int, text: str | None = None) -> ScalarType:
    """The type of an int literal of value ``value``: int64, uint64 from 2**63, else ConstantError."""
    if -(2**63) <= value < 2**63:
        return INT64
    if 2**63 <= value < 2**64:
        return UINT64
    raise ConstantError(
        f"the integer constant {text or value} does not fit in 64 bits; {_FIT_HINT}; "
        "use a float (e.g. 1e20) if an approximate value will do"
    )


def explicit_int(value: int, t: ScalarType, text: str) -> Any:
    """An int literal converted by ``np.<t>(...)``/``int(...)``: refused where it does not fit
    ``t`` (numpy refuses a Python int out of range too)."""
    if t.is_bool or t.is_float:
        return fold_cast(value, t)
    lo, hi = int_range(t)
    if not lo <= value <= hi:
        raise ConstantError(f"the constant {text} does not fit in {t} (range {lo}..{hi})")
    return value


# ----------------------------------------------------------------------------- typed constants
def fold_cast(value: Any, t: ScalarType) -> Any:
    """A constant converted to ``t``: integers wrap into an integer type (numpy's astype); a float
    must fit the integer type it is converted to (else :class:`ConstantError`, as C leaves the
    conversion undefined)."""
    if t.is_bool:
        return bool(value)
    if t.is_float:
        return float(np.array(value).astype(t.dtype))
    if isinstance(value, float):
        lo, hi = int_range(t)
        if not math.isfinite(value) or not lo <= math.trunc(value) <= hi:
            raise ConstantError(
                f"the constant {value!r} does not fit in {t} (range {lo}..{hi}); a float "
                "converted to an integer type must lie in its range"
            )
        value = math.trunc(value)
    return wrap(int(value), t)


def _ufunc(name: str, t: ScalarType, a: Any, b: Any) -> float:
    typ = t.dtype.type
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(getattr(np, name)(typ(a), typ(b)))


def fold_binop(op: str, a: Any, b: Any, t: ScalarType) -> Any:
    """``a <op> b`` for constants already converted to the operand type; ``t`` is the result type
    (the rule declared with the operator in :mod:`portable.compiler.operations`)."""
    if t.is_float:
        return _ufunc(OPERATORS[op].ufunc, t, a, b)  # type: ignore[arg-type]
    if t.is_bool:
        return bool({"&": operator.and_, "|": operator.or_, "^": operator.xor}[op](a, b))
    return OPERATORS[op].fold(int(a), int(b), t)


def fold_unary(op: str, a: Any, t: ScalarType) -> Any:
    """``-a`` / ``~a`` of a constant already converted to ``t`` (integers wrap; the rule declared
    with the operator in :mod:`portable.compiler.operations`)."""
    return UNARY[op].fold(a, t)  # type: ignore[misc]


__all__ = [
    "ConstantError",
    "literal_int",
    "literal_type",
    "explicit_int",
    "fold_cast",
    "fold_binop",
    "fold_unary",
    "wrap",
    "int_range",
]
