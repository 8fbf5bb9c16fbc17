"""Every operation of the kernel language declared once: each math function's type rule, numba
spelling and C name (or C helper), each unary and binary operator's type rule, constant folding
(numpy's fixed-width rules), numba spelling or helper and C spelling or helper (the C source of
the functions giving numpy's integer rules). The front end (``ir.MATH_FUNCTIONS``, the typing of
operators in ``_expressions`` and of calls in ``_calls``, the folding of ``_folding``), the numba
emitter (``backends/_numba_function.py``) and the C emitter (``backends/_c_emit.py``,
``_c_helpers.py``, ``_c_dialect.py``) derive theirs from these declarations, as
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
from typing import Any

from .._errors import ArgumentTypeError
from ._bit_helpers import NUMBA_BIT_HELPERS, opencl_brev, opencl_ffs
from .types import BOOL, INT32, INT64, UINT32, UINT64, ScalarType


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


# ----------------------------------------------------------------------------- C helpers
#: the C name of a math function on a float type, in the dialect being emitted (``Dialect.math``)
MathName = Callable[[str, ScalarType], str]
#: a C helper's declaration: ``(type, math names) -> (its C name, its C source)``; the emitter
#: includes the source once per kernel and calls the name
CHelper = Callable[[ScalarType, MathName], tuple[str, str]]


def c_type(t: ScalarType) -> str:
    """The C spelling of ``t`` (the typedefs of every dialect's prologue: ``i64``, ``u8``, ``f32``...)."""
    if t.is_bool:
        return "bool"
    return ("f" if t.is_float else "u" if t.is_unsigned else "i") + str(t.bits)


def _unsigned_twin(t: ScalarType) -> str:
    c = c_type(t)
    return c if t.is_unsigned else "u" + c[1:]


def _c_floordiv(t: ScalarType, m: MathName) -> tuple[str, str]:
    """numpy's ``//``: floats as ``np.floor_divide`` (``x // 0.0`` is ``x / 0.0``: +-inf or nan);
    integers floor, ``x // 0`` is 0 and ``MIN // -1`` wraps to ``MIN``."""
    c = c_type(t)
    name = f"alpyka_floordiv_{c}"
    if t.is_float:
        k, cs = "F32" if t.bits == 32 else "F64", m("copysign", t)
        # x // +-0.0 is x / +-0.0 (inf of the signs' product, nan for 0 or nan), spelled
        # without the division: PoCL's compiler gave +inf for a positive x // a constant -0.0
        return (
            name,
            f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0) return (a == 0 || a != a) ? ALPYKA_NAN_{k} : {cs}(ALPYKA_INF_{k}, a) * {cs}(({c})1, b);
    {c} mod = {m("fmod", t)}(a, b);
    {c} div = (a - mod) / b;
    if (mod != 0) {{ if ((b < 0) != (mod < 0)) {{ div -= 1; }} }}
    if (div != 0) {{
        {c} fl = {m("floor", t)}(div);
        if (div - fl > ({c})0.5) fl += 1;
        return fl;
    }}
    return {m("copysign", t)}(({c})0, a / b);
}}
""",
        )
    if t.is_unsigned:
        return name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return b == 0 ? ({c})0 : a / b; }}\n"
    u = _unsigned_twin(t)
    return (
        name,
        f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0) return 0;
    if (b == -1) return ({c})(({u})0 - ({u})a);
    {c} q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}}
""",
    )


def _c_mod(t: ScalarType, m: MathName) -> tuple[str, str]:
    """numpy's ``%``: the sign of the divisor; ``x % 0`` is 0 for integers, nan for floats."""
    c = c_type(t)
    name = f"alpyka_mod_{c}"
    if t.is_float:
        return (
            name,
            f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    {c} r = {m("fmod", t)}(a, b);
    if (r != 0) {{ if ((b < 0) != (r < 0)) r += b; }}
    else {{ r = {m("copysign", t)}(({c})0, b); }}
    return r;
}}
""",
        )
    if t.is_unsigned:
        return name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return b == 0 ? ({c})0 : a % b; }}\n"
    return (
        name,
        f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0 || b == -1) return 0;
    {c} r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}}
""",
    )


def _c_ipow(t: ScalarType, m: MathName) -> tuple[str, str]:
    """Integer ``**``, wrapping (computed unsigned); a negative exponent gives the integral part
    of the real result: 1 for base 1, +-1 for base -1, else 0."""
    c, u = c_type(t), _unsigned_twin(t)
    name = f"alpyka_ipow_{c}"
    neg = (
        ""
        if t.is_unsigned
        else f"""
    if (e < 0) return base == 1 ? ({c})1 : (base == -1 ? ((e & 1) ? ({c})-1 : ({c})1) : ({c})0);"""
    )
    return (
        name,
        f"""ALPYKA_FN {c} {name}({c} base, {c} e) {{{neg}
    {u} r = 1, b = ({u})base, k = ({u})e;
    while (k) {{ if (k & 1) r *= b; k >>= 1; b *= b; }}
    return ({c})r;
}}
""",
    )


def _c_shift(op: str) -> CHelper:
    """``a << k`` / ``a >> k`` with numpy's rule for a count outside ``[0, bits)``: 0, or -1 for
    ``>>`` of a negative value (C leaves such shifts undefined). The count arrives as an unsigned
    64-bit value, so a negative one is out of range too."""

    def helper(t: ScalarType, m: MathName) -> tuple[str, str]:
        c, u = c_type(t), _unsigned_twin(t)
        name = f"alpyka_{'shl' if op == '<<' else 'shr'}_{c}"
        if op == "<<":
            body = f"return k < {t.bits} ? ({c})(({u})a << k) : ({c})0;"
        elif t.is_unsigned:
            body = f"return k < {t.bits} ? a >> k : ({c})0;"
        else:  # ~((~a) >> k): a negative value shifts in ones without relying on C's choice
            body = f"return k < {t.bits} ? (a < 0 ? ~((~a) >> k) : a >> k) : (a < 0 ? ({c})-1 : ({c})0);"
        return name, f"ALPYKA_FN {c} {name}({c} a, u64 k) {{ {body} }}\n"

    return helper


def _c_minmax(func: str) -> CHelper:
    """Python's ``min``/``max`` of two values: the first one wins ties (and NaN compares)."""

    def helper(t: ScalarType, m: MathName) -> tuple[str, str]:
        c = c_type(t)
        name = f"alpyka_{func}_{c}"
        cmp = "<" if func == "min" else ">"
        return name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return (b {cmp} a) ? b : a; }}\n"

    return helper


def _c_iabs(t: ScalarType, m: MathName) -> tuple[str, str]:
    """``abs`` of an integer; ``abs(MIN)`` wraps to ``MIN`` as numpy's does (C's ``-MIN`` is undefined)."""
    c = c_type(t)
    name = f"alpyka_abs_{c}"
    if t.is_unsigned or t.is_bool:
        body = "return a;"
    else:  # negated unsigned
        body = f"return a < 0 ? ({c})(({_unsigned_twin(t)})0 - ({_unsigned_twin(t)})a) : a;"
    return name, f"ALPYKA_FN {c} {name}({c} a) {{ {body} }}\n"


# ----------------------------------------------------------------------------- binary operators
@dataclass(frozen=True)
class Operator:
    """A binary operator. ``fold``: its value on exact Python ints already in the operand type,
    given the result type (numpy's fixed-width rule); ``ufunc``: numpy's function of it on floats
    (None: no float form); ``numba_signed``/``numba_unsigned``: the helper of
    :data:`NUMBA_HELPERS` computing it for a signed/unsigned integer result (None: numba's own
    operator, signed ``+ - *`` computed in uint64); ``c_helper``: the C helper computing it (None:
    C's operator, signed ``+ - *`` computed in the unsigned twin); ``c_float``: the math function
    C computes it with on floats instead of the helper (``**``: ``pow``)."""

    symbol: str
    fold: Callable[[int, int, ScalarType], int]
    ufunc: str | None = None
    numba_signed: str | None = None
    numba_unsigned: str | None = None
    c_helper: CHelper | None = None
    c_float: str | None = None


OPERATORS: dict[str, Operator] = {}


def add_operator(symbol: str, fold: Callable[[int, int, ScalarType], int], **spellings: Any) -> None:
    """Declare the binary operator ``symbol`` (see :class:`Operator`)."""
    OPERATORS[symbol] = Operator(symbol, fold, **spellings)


add_operator("+", _wrapping(operator.add), ufunc="add")
add_operator("-", _wrapping(operator.sub), ufunc="subtract")
add_operator("*", _wrapping(operator.mul), ufunc="multiply")
add_operator("/", _wrapping(operator.truediv), ufunc="true_divide")  # integers: never (float64)
add_operator("//", _division(operator.floordiv), ufunc="floor_divide", numba_signed="_floordiv_s", c_helper=_c_floordiv)
add_operator("%", _division(operator.mod), ufunc="remainder", c_helper=_c_mod)
add_operator(
    "**", int_power, ufunc="power", numba_signed="_ipow_s", numba_unsigned="_ipow_u", c_helper=_c_ipow, c_float="pow"
)
add_operator(
    "<<", lambda a, k, t: shift("<<", a, k, t), c_helper=_c_shift("<<"), numba_signed="_shl", numba_unsigned="_shl"
)
add_operator(
    ">>", lambda a, k, t: shift(">>", a, k, t), c_helper=_c_shift(">>"), numba_signed="_shr_s", numba_unsigned="_shr_u"
)
add_operator("&", _wrapping(operator.and_))
add_operator("|", _wrapping(operator.or_))
add_operator("^", _wrapping(operator.xor))


# ----------------------------------------------------------------------------- unary operators
@dataclass(frozen=True)
class UnaryOperator:
    """A unary operator. ``result``: its type rule (the operand is converted to the result type
    first; raises TypeError for an operand it refuses); ``fold``: its value on a constant already
    of the result type (None: not folded); ``numba``/``c``: its prefix in numba and C; ``identity``:
    the front end gives the operand itself (no IR node); ``wraps``: a signed 32- or 64-bit operand
    is negated in its unsigned twin (``-MIN`` wraps to ``MIN``, numpy's rule, where C leaves it
    undefined). A narrow integer result is converted back to its type (numba widens ``-x`` to 64
    bits, C to ``int``)."""

    symbol: str
    result: Callable[[ScalarType], ScalarType]
    fold: Callable[[Any, ScalarType], Any] | None
    numba: str
    c: str
    identity: bool = False
    wraps: bool = False

    def numba_text(self, x: str, t: ScalarType) -> str:
        """The numba source of the operator on the rendered operand ``x`` with result type ``t``."""
        r = f"({self.numba}{x})"
        return f"np.{t.name}{r}" if t.is_integer and t.bits < 64 else r

    def c_text(self, x: str, t: ScalarType) -> str:
        """The C source of the operator on the rendered operand ``x`` with result type ``t``."""
        c = c_type(t)
        if self.wraps and t.is_integer and not t.is_unsigned and t.bits >= 32:
            u = _unsigned_twin(t)
            return f"(({c})(({u})0 - ({u}){x}))"
        if t.is_integer and t.bits < 64:
            return f"(({c})({self.c}{x}))"
        return f"({self.c}{x})"


UNARY: dict[str, UnaryOperator] = {}


def add_unary(
    symbol: str, result: Callable[[ScalarType], ScalarType], fold: Any, numba: str, c: str, **kw: Any
) -> None:
    """Declare the unary operator ``symbol`` (see :class:`UnaryOperator`)."""
    UNARY[symbol] = UnaryOperator(symbol, result, fold, numba, c, **kw)


def _negation_type(t: ScalarType) -> ScalarType:
    """numba's rule: ``-x`` of an integer keeps its type (``-np.uint8(3)`` is 253), of a bool is int64."""
    return INT64 if t.is_bool else t


def _invert_type(t: ScalarType) -> ScalarType:
    if t.is_float:
        raise ArgumentTypeError(f"operator ~ needs an integer operand, got {t}; convert it first, e.g. ~int(x)")
    return _negation_type(t)


def _fold_negation(a: Any, t: ScalarType) -> Any:
    return float(-t.dtype.type(a)) if t.is_float else wrap(-int(a), t)


add_unary("+", lambda t: t, lambda a, t: a, "+", "+", identity=True)  # numba's +x: x itself
add_unary("-", _negation_type, _fold_negation, "-", "-", wraps=True)
add_unary("~", _invert_type, lambda a, t: wrap(~int(a), t), "~", "~")
add_unary("not", lambda t: BOOL, None, "not ", "!")


# ----------------------------------------------------------------------------- math functions
@dataclass(frozen=True)
class MathFunction:
    """A function kernels call (``math.<name>``, ``np.<name>`` or a builtin). ``arity``: 1, 2, or
    0 for two or more (``min``/``max``); ``result``: ``"float"`` (the float type of its
    arguments, integers computed in float64), ``"int64"`` (``floor``/``ceil``/``trunc`` of a
    float, as in Python), ``"bool"`` or ``"same"`` (its arguments' type); ``numba``: its spelling
    in the generated numba module; ``c``: its C name for float64 arguments (CUDA and HIP add
    ``f`` for float32, OpenCL's built-ins are overloaded), None where a C helper computes it or
    the C emitter has its own rule (``isnan``...); ``c_helper``: the C helper computing it
    (``min``/``max``; ``abs`` of an integer, C's ``fabs`` of a float)."""

    name: str
    arity: int
    result: str
    numba: str
    c: str | None
    c_helper: CHelper | None = None


MATH: dict[str, MathFunction] = {}


def add_math(
    name: str, numba: str, arity: int = 1, result: str = "float", c: bool = True, c_helper: CHelper | None = None
) -> None:
    """Declare the math function ``name`` (see :class:`MathFunction`); ``c``: whether C calls it
    by its own name."""
    MATH[name] = MathFunction(name, arity, result, numba, name if c else None, c_helper)


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
    add_math(_name, _name, arity=0, result="same", c=False, c_helper=_c_minmax(_name))
add_math("abs", "abs", result="same", c=False, c_helper=_c_iabs)
del _name


# ----------------------------------------------------------------------------- bit intrinsics
@dataclass(frozen=True)
class Intrinsic:
    """A bit intrinsic ``acc.<name>(x)`` of a 32- or 64-bit integer (signed or unsigned: its bits
    are what count; a narrower type or a bool is refused, a float too). ``fold``: its value on
    the bits of ``x`` (an int in ``[0, 2**bits)``) and ``bits``; ``same_type``: the result has
    ``x``'s type (the bits reinterpreted), else it is an int32; ``numba``: the helper of
    :data:`NUMBA_HELPERS` called with the bits zero-extended to a uint64 (and ``bits`` where it
    takes two arguments); ``cuda``: CUDA's and HIP's functions for 32 and 64 bits, with the C type
    they take; ``opencl``: OpenCL C's built-in (overloaded), or ``opencl_helper`` where it has none."""

    name: str
    fold: Callable[[int, int], int]
    same_type: bool
    numba: str
    numba_bits: bool
    cuda: tuple[str, str]
    cuda_arg: str
    opencl: str | None = None
    opencl_helper: CHelper | None = None

    def result(self, t: ScalarType) -> ScalarType:
        """The type rule (TypeError for an argument it refuses, with the fix)."""
        if t.is_integer and t.bits in (32, 64):
            return t if self.same_type else INT32
        what = f"acc.{self.name}(x) takes a 32- or 64-bit integer, got {t}"
        if not t.is_integer:
            raise ArgumentTypeError(f"{what}: convert it first, e.g. acc.{self.name}(int(x))")
        keep = f"np.uint32(np.uint{t.bits}(x))" if not t.is_unsigned else "np.uint32(x)"
        raise ArgumentTypeError(
            f"{what}: convert it first, e.g. acc.{self.name}({keep}) (the {t.bits} bits of x zero-extended; "
            "np.uint32(x) of a negative value sign-extends)"
        )

    def fold_value(self, x: int, t: ScalarType) -> int:
        """The constant ``acc.<name>(x)`` for ``x`` of type ``t``."""
        r = self.fold(x % 2**t.bits, t.bits)
        return wrap(r, t) if self.same_type else r

    def numba_text(self, x: str, t: ScalarType, helper: Callable[[str], str]) -> str:
        """Its numba source on the rendered ``x`` (``helper(name)`` adds a helper to the module)."""
        v = f"np.uint64(np.uint32({x}))" if t.bits == 32 else f"np.uint64({x})"
        call = f"{helper(self.numba)}({v}, {t.bits})" if self.numba_bits else f"{helper(self.numba)}({v})"
        return f"np.{t.name}({call})" if self.same_type else call

    def cuda_text(self, x: str, t: ScalarType) -> str:
        """Its CUDA/HIP source on the rendered ``x``: the intrinsic for ``t``'s width."""
        arg = (UINT32 if t.bits == 32 else UINT64) if self.cuda_arg == "u" else (INT32 if t.bits == 32 else INT64)
        return f"(({self._c_result(t)}){self.cuda[t.bits == 64]}(({c_type(arg)})({x})))"

    def opencl_text(self, x: str, t: ScalarType, helper: Callable[[CHelper, ScalarType], str]) -> str:
        """Its OpenCL C source on the rendered ``x``: the overloaded built-in, or the declared
        helper where OpenCL has none (``helper`` includes it)."""
        u = UINT32 if t.bits == 32 else UINT64
        fn = self.opencl if self.opencl is not None else helper(self.opencl_helper, u)  # type: ignore[arg-type]
        return f"(({self._c_result(t)}){fn}(({c_type(u)})({x})))"

    def _c_result(self, t: ScalarType) -> str:
        return c_type(t) if self.same_type else "i32"


INTRINSICS: dict[str, Intrinsic] = {}


def add_intrinsic(name: str, fold: Callable[[int, int], int], numba: str, cuda: tuple[str, str], **kw: Any) -> None:
    """Declare the bit intrinsic ``acc.<name>`` (see :class:`Intrinsic`)."""
    INTRINSICS[name] = Intrinsic(name, fold, kw.pop("same_type", False), numba, kw.pop("numba_bits", False), cuda, **kw)


# alpaka's popcount and ffs (alpaka/intrinsic/), CUDA's clz (bits for 0) and brev
add_intrinsic(
    "popcount", lambda v, bits: bin(v).count("1"), "_popcount", ("__popc", "__popcll"), cuda_arg="u", opencl="popcount"
)
add_intrinsic(
    "clz",
    lambda v, bits: bits - v.bit_length(),
    "_clz",
    ("__clz", "__clzll"),
    cuda_arg="i",
    opencl="clz",
    numba_bits=True,
)
add_intrinsic(
    "ffs", lambda v, bits: (v & -v).bit_length(), "_ffs", ("__ffs", "__ffsll"), cuda_arg="i", opencl_helper=opencl_ffs
)
add_intrinsic(
    "brev",
    lambda v, bits: int(format(v, f"0{bits}b")[::-1], 2),
    "_brev",
    ("__brev", "__brevll"),
    cuda_arg="u",
    opencl_helper=opencl_brev,
    same_type=True,
    numba_bits=True,
)
NUMBA_HELPERS.update(NUMBA_BIT_HELPERS)


def math_names(result: str | None = None, arity: int | None = None) -> tuple[str, ...]:
    """The declared math functions (in declaration order) of a ``result`` rule and ``arity``."""
    return tuple(
        f.name for f in MATH.values() if (result is None or f.result == result) and (arity is None or f.arity == arity)
    )


__all__ = ["MATH", "NUMBA_HELPERS", "OPERATORS", "UNARY", "MathFunction", "Operator", "UnaryOperator"]
__all__ += ["INTRINSICS", "Intrinsic", "add_intrinsic"]
__all__ += ["add_math", "add_operator", "add_unary", "c_type", "int_power", "int_range", "math_names", "shift", "wrap"]
