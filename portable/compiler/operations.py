"""Every operation of the kernel language declared once: each math function's type rule, numba
spelling and C name, and each binary operator's constant folding (numpy's fixed-width rules),
numba helper and C helper. The front end (``ir.MATH_FUNCTIONS``, the typing of calls in
``_calls``, the folding of ``_folding``), the numba emitter (``backends/_numba_emit.py``) and the C
emitter (``backends/_c_emit.py``, ``_c_dialect.py``) derive theirs from these declarations, as
NVIDIA Warp's ``add_builtin(..., native_func=...)`` declares a builtin once for every target: a
new operation is one declaration here plus its tests (``tests/kernels/test_fuzz.py`` checks the
integer and float rules against numpy on every backend).

The integer rules (numpy's, stated in docs/kernels.md "Fixed-width rules"): integers wrap in their
width; ``//`` and ``%`` by 0 give 0 and ``MIN // -1`` wraps to ``MIN``; a shift by a count outside
``[0, bits)`` gives 0, or -1 for ``>>`` of a negative value; an integer ``**`` a negative exponent
gives the integral part of the real result (1, -1 or 0).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from .types import ScalarType


# ----------------------------------------------------------------------------- integer rules
def int_range(t: ScalarType) -> tuple[int, int]:
    """The smallest and largest value of the integer (or bool) type ``t``."""
    if t.is_bool:
        return 0, 1
    if t.is_unsigned:
        return 0, 2**t.bits - 1
    return -(2 ** (t.bits - 1)), 2 ** (t.bits - 1) - 1


def wrap(value: int, t: ScalarType) -> int:
    """``value`` reduced modulo ``2**bits`` into the range of the integer type ``t`` (numpy's astype)."""
    lo, _ = int_range(t)
    return (value - lo) % 2**t.bits + lo


def int_power(base: int, e: int, t: ScalarType) -> int:
    """``base ** e`` in the integer type ``t`` (wrapping); a negative ``e`` gives the integral
    part of the real result: 1 for base 1, +-1 for base -1, else 0 (0 ** -n included)."""
    if e < 0:
        if base == 1:
            return 1
        if base == -1 and not t.is_unsigned:
            return -1 if e % 2 else 1
        return 0
    return wrap(pow(base, e, 2**t.bits), t)


def shift(op: str, a: int, count: int, t: ScalarType) -> int:
    """``a << count`` / ``a >> count`` in the 64-bit type ``t`` (numpy's rule for a count outside
    ``[0, bits)``: 0, or -1 for ``>>`` of a negative value)."""
    if not 0 <= count < t.bits:
        return -1 if op == ">>" and a < 0 else 0
    return wrap(a << count, t) if op == "<<" else a >> count


def _division(fn: Callable[[int, int], int]) -> Callable[[int, int, ScalarType], int]:
    return lambda a, b, t: 0 if b == 0 else wrap(fn(a, b), t)


def _wrapping(fn: Callable[[int, int], int]) -> Callable[[int, int, ScalarType], int]:
    return lambda a, b, t: wrap(fn(a, b), t)


# numba's operators where they differ from numpy's rules: helpers of the generated module (numba
# gives 0 for MIN // -1, wraps shift counts modulo 64, and its ** goes wrong past 2**62); products
# in uint64, where LLVM assumes no signed wrap of int64 arithmetic
_POW_LOOP = "    while e:\n        if e & 1:\n            r *= b\n        e >>= 1\n        b *= b\n"
NUMBA_HELPERS = {
    "_shl": "def _shl(a, k):\n    if k < 0 or k >= 64:\n        return a ^ a\n    return a << k\n",
    "_shr_s": "def _shr_s(a, k):\n    if k < 0 or k >= 64:\n        return a >> 63\n    return a >> k\n",
    "_shr_u": "def _shr_u(a, k):\n    if k < 0 or k >= 64:\n        return a ^ a\n    return a >> k\n",
    "_floordiv_s": "def _floordiv_s(a, b):\n    if b == -1:\n        return -a\n    return a // b\n",
    "_ipow_s": (
        "def _ipow_s(a, e):\n    if e < 0:\n        if a == 1 or a == -1:\n"
        "            return a if e & 1 else a * a\n        return a ^ a\n"
        "    r = np.uint64(1)\n    b = np.uint64(a)\n" + _POW_LOOP + "    return np.int64(r)\n"
    ),
    "_ipow_u": "def _ipow_u(a, e):\n    r = np.uint64(1)\n    b = a\n" + _POW_LOOP + "    return r\n",
}


@dataclass(frozen=True)
class Operator:
    """A binary operator. ``fold``: its value on exact Python ints already in the operand type,
    given the result type (numpy's fixed-width rule); ``ufunc``: numpy's function of it on floats
    (None: no float form); ``numba_signed``/``numba_unsigned``: the helper of
    :data:`NUMBA_HELPERS` computing it for a signed/unsigned integer result (None: numba's own
    operator, signed ``+ - *`` computed in uint64); ``c_helper``: the C emitter's helper for it
    (a method of ``backends._c_helpers.Helpers``; None: C's operator, signed ``+ - *`` computed in
    the unsigned twin)."""

    symbol: str
    fold: Callable[[int, int, ScalarType], int]
    ufunc: str | None = None
    numba_signed: str | None = None
    numba_unsigned: str | None = None
    c_helper: str | None = None


OPERATORS: dict[str, Operator] = {}


def add_operator(symbol: str, fold: Callable[[int, int, ScalarType], int], **spellings: str | None) -> None:
    """Declare the binary operator ``symbol`` (see :class:`Operator`)."""
    OPERATORS[symbol] = Operator(symbol, fold, **spellings)


add_operator("+", _wrapping(operator.add), ufunc="add")
add_operator("-", _wrapping(operator.sub), ufunc="subtract")
add_operator("*", _wrapping(operator.mul), ufunc="multiply")
add_operator("/", _wrapping(operator.truediv), ufunc="true_divide")  # integers: never (float64)
add_operator("//", _division(operator.floordiv), ufunc="floor_divide", numba_signed="_floordiv_s", c_helper="floordiv")
add_operator("%", _division(operator.mod), ufunc="remainder", c_helper="mod")
add_operator("**", int_power, ufunc="power", numba_signed="_ipow_s", numba_unsigned="_ipow_u", c_helper="ipow")
add_operator("<<", lambda a, k, t: shift("<<", a, k, t), c_helper="shift", numba_signed="_shl", numba_unsigned="_shl")
add_operator(
    ">>", lambda a, k, t: shift(">>", a, k, t), c_helper="shift", numba_signed="_shr_s", numba_unsigned="_shr_u"
)
add_operator("&", _wrapping(operator.and_))
add_operator("|", _wrapping(operator.or_))
add_operator("^", _wrapping(operator.xor))


# ----------------------------------------------------------------------------- math functions
@dataclass(frozen=True)
class MathFunction:
    """A function kernels call (``math.<name>``, ``np.<name>`` or a builtin). ``arity``: 1, 2, or
    0 for two or more (``min``/``max``); ``result``: ``"float"`` (the float type of its
    arguments, integers computed in float64), ``"int64"`` (``floor``/``ceil``/``trunc`` of a
    float, as in Python), ``"bool"`` or ``"same"`` (its arguments' type); ``numba``: its spelling
    in the generated numba module; ``c``: its C name for float64 arguments (CUDA and HIP add
    ``f`` for float32, OpenCL's built-ins are overloaded), None where the C emitter has its own
    rule (``min``/``max``/``abs`` as helpers, ``isnan``...)."""

    name: str
    arity: int
    result: str
    numba: str
    c: str | None


MATH: dict[str, MathFunction] = {}


def add_math(name: str, numba: str, arity: int = 1, result: str = "float", c: bool = True) -> None:
    """Declare the math function ``name`` (see :class:`MathFunction`); ``c``: whether C calls it
    by its own name."""
    MATH[name] = MathFunction(name, arity, result, numba, name if c else None)


for _name in ("sqrt", "exp"):
    add_math(_name, f"math.{_name}")
add_math("exp2", "np.exp2")
for _name in ("expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan"):
    add_math(_name, f"math.{_name}")
add_math("atan2", "math.atan2", arity=2)
for _name in ("sinh", "cosh", "tanh", "asinh", "acosh", "atanh"):
    add_math(_name, f"math.{_name}")
add_math("pow", "math.pow", arity=2)
add_math("hypot", "math.hypot", arity=2)
add_math("fabs", "abs")  # the front end calls it abs; C's fabs is abs of a float
for _name in ("floor", "ceil", "trunc"):
    add_math(_name, f"math.{_name}", result="int64")
add_math("copysign", "math.copysign", arity=2)
add_math("fmod", "np.fmod", arity=2)
for _name in ("erf", "erfc", "lgamma"):
    add_math(_name, f"math.{_name}")
add_math("tgamma", "math.gamma")
for _name in ("isnan", "isinf", "isfinite"):
    add_math(_name, f"math.{_name}", result="bool", c=False)
for _name in ("min", "max"):
    add_math(_name, _name, arity=0, result="same", c=False)
add_math("abs", "abs", result="same", c=False)
del _name


def math_names(result: str | None = None, arity: int | None = None) -> tuple[str, ...]:
    """The declared math functions (in declaration order) of a ``result`` rule and ``arity``."""
    return tuple(
        f.name for f in MATH.values() if (result is None or f.result == result) and (arity is None or f.arity == arity)
    )


__all__ = ["MATH", "NUMBA_HELPERS", "OPERATORS", "MathFunction", "Operator", "add_math", "add_operator"]
__all__ += ["int_power", "int_range", "math_names", "shift", "wrap"]
