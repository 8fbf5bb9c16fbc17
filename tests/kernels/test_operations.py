"""Each operation declared once (portable/compiler/operations.py): the front end, the numba emitter
and the C dialects read their vocabulary and spellings from the declarations, and each operator's
constant folding is numpy's fixed-width rule (the differential fuzzer's oracle)."""

import math

import numpy as np
import pytest

from alpyka_testing import fuzz
from backends import _numba_emit
from backends._c_dialect import DIALECTS
from portable.compiler import ir, operations
from portable.compiler._calls import _BOOL_RESULT, _INT_RESULT, _TWO_ARGS
from portable.compiler._folding import fold_binop
from portable.compiler.types import FLOAT32, FLOAT64, INT64, UINT64


def test_the_vocabulary_is_derived_from_the_declarations():
    assert ir.MATH_FUNCTIONS == tuple(operations.MATH)
    assert _BOOL_RESULT == ("isnan", "isinf", "isfinite") and _INT_RESULT == ("floor", "ceil", "trunc")
    assert _TWO_ARGS == ("atan2", "pow", "hypot", "copysign", "fmod")
    assert {op for op, _ in _numba_emit._ARITH_HELPER} == {"//", "**", "<<", ">>"}


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
        assert dialect.math(name, FLOAT32) == (f.c if dialect.is_opencl else f.c + "f")


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
