"""The kernel language's binary promotion table, checked exactly against numba's typing.

Results stored as float32 and compared with a tolerance cannot tell float32 from float64
arithmetic, so the table itself is compared, pair by pair and operator by operator, with what
numba's typing context resolves (numba's rules are the design's rules). Where alpyka
deliberately differs the difference is listed here, and the list is checked too.
"""

import operator

import numpy as np
import pytest

from portable.compiler.types import binary_result, scalar_type

numba_types = pytest.importorskip("numba.core.types")
from numba.core import errors  # noqa: E402
from numba.core.registry import cpu_target  # noqa: E402

NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
}

# alpyka's table where it knowingly differs from numba's (numba gives the value in brackets):
# uint16 with float32 stays float32 as in numpy (numba widens to float64); bool ** int is int64.
DEVIATIONS = {
    (op, a, b): "float32"
    for op in ("+", "-", "*", "/", "//", "%")
    for a, b in (("uint16", "float32"), ("float32", "uint16"))
}
DEVIATIONS[("**", "uint16", "float32")] = "float32"
DEVIATIONS[("**", "bool", "int32")] = "int64"


def _numba(ctx, op, a, b):
    ta = numba_types.boolean if a == "bool" else getattr(numba_types, a)
    tb = numba_types.boolean if b == "bool" else getattr(numba_types, b)
    try:
        sig = ctx.resolve_function_type(OPS[op], (ta, tb), {})
    except errors.TypingError:
        return None
    return None if sig is None else str(sig.return_type)


def _ours(op, a, b):
    try:
        return binary_result(op, scalar_type(np.dtype(a)), scalar_type(np.dtype(b))).name
    except TypeError:
        return None


@pytest.fixture(scope="module")
def numba_table():
    ctx = cpu_target.typing_context
    ctx.refresh()
    return {(op, a, b): _numba(ctx, op, a, b) for op in OPS for a in NAMES for b in NAMES}


@pytest.mark.parametrize("op", list(OPS))
def test_promotion_matches_numba_exactly(numba_table, op):
    wrong = []
    for a in NAMES:
        for b in NAMES:
            want = numba_table[(op, a, b)]
            if want is None:  # numba defines no such operation: alpyka refuses it or types it
                continue
            got = _ours(op, a, b)
            expected = DEVIATIONS.get((op, a, b), want)
            if got != expected:
                wrong.append(f"{a} {op} {b}: alpyka {got}, expected {expected} (numba {want})")
    assert not wrong, "\n".join(wrong)


def test_listed_deviations_are_real():
    """Each listed deviation still differs from numba (a fixed one must leave the list)."""
    ctx = cpu_target.typing_context
    ctx.refresh()
    for (op, a, b), ours in DEVIATIONS.items():
        assert _ours(op, a, b) == ours and _numba(ctx, op, a, b) != ours, (op, a, b)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%"])
def test_float32_with_int32_is_float64(op):
    """The case a tolerance-based kernel test cannot see: float32 op int32 is float64."""
    assert _ours(op, "float32", "int32") == "float64" and _ours(op, "int32", "float32") == "float64"
    assert _ours(op, "float32", "int16") == "float32"
