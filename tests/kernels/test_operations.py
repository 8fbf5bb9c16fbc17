"""Each operation declared once (portable/compiler/operations.py): the front end, the numba emitter
and the C dialects read their vocabulary and spellings from the declarations, and each operator's
constant folding is numpy's fixed-width rule (the differential fuzzer's oracle)."""

import math

import numpy as np
import pytest

from alpyka_testing import fuzz
from backends import _numba_function
from backends._c_dialect import DIALECTS, Cuda
from portable.compiler import ir, operations
from portable.compiler._calls import _BOOL_RESULT, _INT_RESULT, _TWO_ARGS
from portable.compiler._folding import fold_binop
from portable.compiler.types import BOOL, FLOAT32, FLOAT64, INT32, INT64, UINT8, UINT32, UINT64


def test_the_vocabulary_is_derived_from_the_declarations():
    assert ir.MATH_FUNCTIONS == tuple(operations.MATH)
    assert _BOOL_RESULT == ("isnan", "isinf", "isfinite") and _INT_RESULT == ("floor", "ceil", "trunc")
    assert _TWO_ARGS == ("atan2", "pow", "hypot", "copysign", "fmod")
    assert {op for op, _ in _numba_function.ARITH_HELPER} == {"//", "**", "<<", ">>"}


@pytest.mark.parametrize("name", list(operations.MATH))
def test_every_math_function_is_spelled_for_every_target(name):
    """Its numba spelling names a function of the generated module's namespace; its C name (or
    the C emitter's own rule) exists in every dialect, with CUDA's and HIP's float32 suffix."""
    f = operations.MATH[name]
    assert callable(eval(f.numba, {"math": math, "np": np}))
    for dialect in DIALECTS.values():
        if f.c is None:
            with pytest.raises(KeyError):
                dialect.math(name, FLOAT64)
            continue
        assert dialect.math(name, FLOAT64) == f.c
        assert dialect.math(name, FLOAT32) == (f.c + "f" if isinstance(dialect, Cuda) else f.c)


EDGES = {
    INT64: [-(2**63), -(2**63) + 1, -64, -7, -1, 0, 1, 2, 3, 63, 64, 65, 2**62, 2**63 - 1],
    UINT64: [0, 1, 2, 3, 7, 63, 64, 65, 2**63, 2**64 - 1],
}


@pytest.mark.parametrize("t", [INT64, UINT64], ids=str)
@pytest.mark.parametrize("op", [op for op in operations.OPERATORS if op != "/"])
def test_each_operators_folding_is_numpys_rule(op, t):
    """The folding declared with the operator gives what the fuzzer's numpy oracle gives, for
    every pair of edge values (``MIN // -1``, ``x % 0``, shift counts 64 and -1, ``**`` below 0)."""
    values = EDGES[t]
    bits = np.array([v % 2**64 for v in values], np.uint64)  # the wrapped bits of each value
    a, b = np.meshgrid(bits, bits, indexing="ij")
    cols = {(t.name, 0): a.ravel().astype(t.dtype), (t.name, 1): b.ravel().astype(t.dtype)}
    want = fuzz.evaluate(fuzz.binop(op, fuzz.col(t.name, 0), fuzz.col(t.name, 1)), cols)
    for x, y, w in zip(cols[(t.name, 0)].tolist(), cols[(t.name, 1)].tolist(), want.tolist()):
        assert fold_binop(op, x, y, t) == w, (x, op, y)
    assert fold_binop(op, 7, 2, INT64) == eval(f"7 {op} 2")


@pytest.mark.parametrize("t", [INT64, UINT64, INT32, UINT8, FLOAT32, FLOAT64], ids=str)
@pytest.mark.parametrize("op", ["-", "~"])
def test_each_unary_operators_type_rule_and_folding_are_numpys(op, t):
    """The type rule and folding declared with ``-`` and ``~`` give numpy's result type and bits
    (``-MIN`` wraps to ``MIN``, ``-np.uint8(3)`` is 253); ``~`` refuses a float as numba does."""
    u = operations.UNARY[op]
    if op == "~" and t.is_float:
        with pytest.raises(TypeError, match="integer operand"):
            u.result(t)
        return
    assert u.result(t) == t
    if t.is_float:
        values = [0.0, -0.0, 1.5, -math.inf, math.nan]
    else:
        lo, hi = operations.int_range(t)
        values = [lo, lo + 1, -1 if lo else 0, 0, 1, 3, hi]
    with np.errstate(all="ignore"):
        for v in values:
            want = (-t.dtype.type(v)) if op == "-" else (~t.dtype.type(v))
            got = u.fold(v, t)
            assert np.array(got, t.dtype).tobytes() == np.array(want, t.dtype).tobytes(), (op, t, v)


def test_unary_operators_are_spelled_from_their_declarations():
    """``-`` of a signed 32/64-bit value is negated in the unsigned twin in C, a narrow result is
    converted back to its type in both emitters, ``+`` is the operand itself, ``not`` never folds."""
    neg, inv, not_ = operations.UNARY["-"], operations.UNARY["~"], operations.UNARY["not"]
    assert neg.c_text("x", INT64) == "((i64)((u64)0 - (u64)x))"
    assert neg.c_text("x", INT32) == "((i32)((u32)0 - (u32)x))"
    assert neg.c_text("x", UINT8) == "((u8)(-x))" and neg.c_text("x", FLOAT32) == "(-x)"
    assert inv.c_text("x", UINT64) == "(~x)" and not_.c_text("p", BOOL) == "(!p)"
    assert neg.numba_text("x", INT32) == "np.int32(-x)" and not_.numba_text("p", BOOL) == "(not p)"
    assert operations.UNARY["+"].identity and not_.fold is None
    assert operations.UNARY["-"].result(BOOL) == INT64 and not_.result(FLOAT64) == BOOL


@pytest.mark.parametrize("t", [INT32, INT64, UINT32, UINT64], ids=str)
def test_each_c_helper_is_one_declaration_named_by_its_type(t):
    """Every C helper an operator or math function declares is named after its type and defines
    that name, in every dialect (the float forms call the dialect's math names)."""
    helpers = [op.c_helper for op in operations.OPERATORS.values() if op.c_helper is not None]
    helpers += [f.c_helper for f in operations.MATH.values() if f.c_helper is not None]
    for helper in helpers:
        for dialect in DIALECTS.values():
            for tt in (t, FLOAT32, FLOAT64):
                if helper in (operations.OPERATORS["<<"].c_helper, operations.OPERATORS[">>"].c_helper) and tt.is_float:
                    continue
                name, src = helper(tt, dialect.math)
                assert name.endswith("_" + operations.c_type(tt)) and f" {name}(" in src
