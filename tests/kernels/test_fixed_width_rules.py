"""One integer and float semantics on every backend: numpy's fixed-width rules, at run time and in
constant folding, and a KernelSyntaxError at the user's line for a constant that does not fit.

Every expected value is numpy's, computed on the host for the same operands (the one rule numpy
has no value for, an integer to a negative power, is the documented one: the integral part of the
real result). Kernels whose body is a table of expressions are written to a file first, so the
kernel and the host evaluate the very same text.
"""

import ast
import importlib.util
import math
import warnings

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from alpyka_testing.numpy_compare import assert_kernel_matches_numpy, for_float_dtypes, same_values
from portable.compiler import KernelSyntaxError

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


@pk.kernel
def int_ops(acc, out, a, b, n):
    for i in acc.uniform_elements(n):
        x = a[i]
        y = b[i]
        out[i, 0] = x // y
        out[i, 1] = x % y
        out[i, 2] = x << y
        out[i, 3] = x >> y
        out[i, 4] = -x
        out[i, 5] = abs(x)
        out[i, 6] = x + y
        out[i, 7] = x - y
        out[i, 8] = x * y
        out[i, 9] = x**y


@pk.kernel
def float_ops(acc, out, a, b, n):
    for i in acc.uniform_elements(n):
        x = a[i]
        y = b[i]
        out[i, 0] = x // y
        out[i, 1] = x % y


def _pairs(xs, ys, dtype):
    a, b = np.meshgrid(np.array(xs, dtype=dtype), np.array(ys, dtype=dtype), indexing="ij")
    return a.ravel(), b.ravel()


def _int_power(a, b):
    """numpy's power where the exponent is >= 0; the documented rule below 0 (numpy raises)."""
    with np.errstate(all="ignore"):
        out = np.power(a, np.where(b < 0, 0, b).astype(b.dtype))
    if a.dtype.kind == "i":
        neg = b < 0
        out[neg] = np.where(a[neg] == 1, 1, np.where(a[neg] == -1, np.where(b[neg] % 2 == 1, -1, 1), 0))
    return out


def _numpy_int_ops(a, b):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = b if a.dtype.kind == "i" else b.astype(np.uint64)
        cols = [
            np.floor_divide(a, b),
            np.remainder(a, b),
            np.left_shift(a, counts),
            np.right_shift(a, counts),
            np.negative(a),
            np.abs(a),
            a + b,
            a - b,
            a * b,
            _int_power(a, b),
        ]
    return np.stack(cols, axis=1).astype(a.dtype)


SIGNED = (
    [I64_MIN, I64_MIN + 1, -8, -7, -1, 0, 1, 2, 3, 7, I64_MAX],
    [-1, 0, 1, 2, 3, -2, -3, 63, 64, 65, -64, 200, I64_MAX, I64_MIN],
)
UNSIGNED = ([0, 1, 2, 7, 12345, 2**63, 2**64 - 1], [0, 1, 2, 3, 63, 64, 65, 2**63, 2**64 - 1])


@pytest.mark.parametrize("dtype,values", [(np.int64, SIGNED), (np.uint64, UNSIGNED)], ids=["int64", "uint64"])
def test_integer_operators_match_numpy_at_run_time(device, queue, dtype, values):
    """MIN // -1, division by zero, shifts by negative or >= 64 counts, -MIN, abs(MIN), wrapping
    + - * and **: the bits numpy gives, not C's undefined behaviour or numba's choice."""
    a, b = _pairs(*values, dtype)
    n = a.size
    out = upload(queue, np.zeros((n, 10), dtype))
    pk.exec(queue, pk.make_workdiv(device, 2, 64), int_ops, out, upload(queue, a), upload(queue, b), n)
    got, want = download(queue, out), _numpy_int_ops(a, b)
    names = ["//", "%", "<<", ">>", "neg", "abs", "+", "-", "*", "**"]
    bad = [(names[c], int(a[r]), int(b[r]), int(got[r, c]), int(want[r, c])) for r, c in zip(*np.nonzero(got != want))]
    assert not bad, f"(op, a, b, got, numpy) {bad[:12]}"


CONSTANT_COUNTS = (0, 1, 7, 31, 32, 63, 64, 65)


@pk.kernel
def shifts_by_constants(acc, out, a, n):
    """Shifts of run-time values by literal counts: the numba emitter writes numba's own operator
    for a count in ``[0, bits)`` and its helper for the others (backends/_numba_function.py)."""
    for i in acc.uniform_elements(n):
        x = a[i]
        out[i, 0] = x << 0
        out[i, 1] = x << 1
        out[i, 2] = x << 7
        out[i, 3] = x << 31
        out[i, 4] = x << 32
        out[i, 5] = x << 63
        out[i, 6] = x << 64
        out[i, 7] = x << 65
        out[i, 8] = x >> 0
        out[i, 9] = x >> 1
        out[i, 10] = x >> 7
        out[i, 11] = x >> 31
        out[i, 12] = x >> 32
        out[i, 13] = x >> 63
        out[i, 14] = x >> 64
        out[i, 15] = x >> 65


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32, np.uint32])
def test_shifts_by_constant_counts_match_numpy(device, queue, dtype):
    """Counts at and past each width's edge, on values with the top and bottom bits set."""
    info = np.iinfo(dtype)
    a = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, 5, info.max, info.max // 3], dtype)
    n = a.size
    out = upload(queue, np.zeros((n, 2 * len(CONSTANT_COUNTS)), dtype))
    pk.exec(queue, pk.make_workdiv(device, 1, 64), shifts_by_constants, out, upload(queue, a), n)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = [np.array(c, dtype) for c in CONSTANT_COUNTS]
        want = np.stack([np.left_shift(a, c) for c in counts] + [np.right_shift(a, c) for c in counts], axis=1)
    np.testing.assert_array_equal(download(queue, out), want.astype(dtype))


def test_numba_writes_its_operator_for_counts_in_range():
    """No helper call for ``x << 63`` or ``x >> 32`` of a 64-bit value (one less call for numba to
    type and LLVM to inline: Philox's rounds), the helper where numba's rule differs."""
    from backends._numba_emit import emit_numba

    a = np.zeros(4, np.uint64)
    ir = shifts_by_constants.ir(shifts_by_constants.signature((np.zeros((4, 16), np.uint64), a, 4)), 1, False)
    body = emit_numba(ir, True).source.split("def launch")[1]
    assert "_shl(" in body and "_shr_u(" in body  # counts 64 and 65
    assert body.count("_shl(") == 2 and body.count("_shr_u(") == 2, body


FLOATS = [0.0, -0.0, 7.0, -7.0, 0.5, -2.5, 3.0, 1e-300, math.inf, -math.inf, math.nan]


@for_float_dtypes()
def test_float_floor_division_and_modulo_match_numpy(device, queue, dtype):
    """``7.0 // 0.0`` is inf, ``7.0 // -0.0`` -inf, ``0.0 // 0.0`` nan, ``x % 0.0`` nan, and the
    signs of zeros and infinities are numpy's on every backend."""
    a, b = _pairs(FLOATS, FLOATS, dtype)
    assert_kernel_matches_numpy(
        queue,
        float_ops,
        lambda a, b: np.stack([np.floor_divide(a, b), np.remainder(a, b)], axis=1),
        a,
        b,
        out_first=True,
        workdiv=pk.make_workdiv(device, 2, 64),
    )


# ----------------------------------------------------------------------------- constant folding
INT_EXPRS = [
    "np.int64(-2**63) // -1",
    "-np.int64(-2**63)",
    "np.int64(-2**63) % -1",
    "np.int64(1) << -1",
    "np.int64(1) << 64",
    "np.int64(1) << 63",
    "np.int64(-8) >> 64",
    "np.int64(-8) >> -1",
    "np.int64(7) // 0",
    "np.int64(-7) % 0",
    "np.int64(2**62) * 4",
    "np.int64(2**63 - 1) + 1",
    "np.int64(3) ** 50",
    "abs(np.int64(-2**63))",
    "-9223372036854775808",
    "~np.int64(5)",
    "np.int64(-7) // 2",
    "np.int64(-7) % 2",
    "np.int64(7) % -2",
    "np.int64(2**62) << 1",
]
UINT_EXPRS = [
    "np.uint64(5) - np.uint64(7)",
    "np.uint64(1) << np.uint64(64)",
    "-np.uint64(1)",
    "np.uint64(7) // np.uint64(0)",
    "2**63",
    "2**64 - 1",
    "0xFFFFFFFFFFFFFFFF",
    "1 << 63",
    "np.uint64(2**64 - 1) * np.uint64(3)",
]
FLOAT_EXPRS = [
    "7.0 // 0.0",
    "-7.0 // 0.0",
    "7.0 // -0.0",
    "-7.0 // -0.0",
    "0.0 // 0.0",
    "7.0 % 0.0",
    "-7.0 % math.inf",
    "7.0 // -math.inf",
    "-0.0 // 3.0",
    "np.float32(7.0) // np.float32(-0.0)",
    "np.float32(-7.0) % np.float32(2.0)",
    "7 // 0.0",
    "np.int64(1) / 0",
    "1e308 * 10.0",
]


class _NumpyFloats(ast.NodeTransformer):
    """Host side: a float literal becomes ``np.float64(...)`` (kernels type it float64, and Python's
    own float ``//`` raises on zero where numpy's gives inf)."""

    def visit_Constant(self, node):
        if isinstance(node.value, float):
            return ast.Call(ast.Attribute(ast.Name("np", ast.Load()), "float64", ast.Load()), [node], [])
        return node


def _host(expr):
    tree = ast.fix_missing_locations(_NumpyFloats().visit(ast.parse(expr, mode="eval")))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return eval(compile(tree, "<expr>", "eval"), {"np": np, "math": math, "abs": abs})


def _kernel_module(tmp_path, name, body):
    """A module ``name`` written to ``tmp_path`` (kernels need a source file) and imported."""
    path = tmp_path / f"{name}.py"
    path.write_text("import math\n\nimport numpy as np\n\nimport portable as pk\n\n" + body)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


def test_folded_constants_match_numpy(device, queue, tmp_path):
    """Constants fold with numpy's fixed-width rules on every backend (``-np.int64(-2**63)`` is
    -2**63 everywhere, not +9.22e18 on some), and agree with the run-time table above."""
    lines = [f"        oi[{k}] = {e}\n" for k, e in enumerate(INT_EXPRS)]
    lines += [f"        ou[{k}] = {e}\n" for k, e in enumerate(UINT_EXPRS)]
    lines += [f"        of[{k}] = {e}\n" for k, e in enumerate(FLOAT_EXPRS)]
    mod, _ = _kernel_module(
        tmp_path,
        "folded_constants",
        "@pk.kernel\ndef folded(acc, oi, ou, of):\n    if acc.once_per_grid():\n" + "".join(lines),
    )
    oi = upload(queue, np.zeros(len(INT_EXPRS), np.int64))
    ou = upload(queue, np.zeros(len(UINT_EXPRS), np.uint64))
    of = upload(queue, np.zeros(len(FLOAT_EXPRS), np.float64))
    pk.exec(queue, pk.make_workdiv(device, 1, 1), mod.folded, oi, ou, of)
    for exprs, buf, dtype in ((INT_EXPRS, oi, np.int64), (UINT_EXPRS, ou, np.uint64), (FLOAT_EXPRS, of, np.float64)):
        got = download(queue, buf)
        want = np.array([np.array(_host(e)).astype(dtype) for e in exprs])
        ok = same_values(got, want) if dtype is np.float64 else got == want
        bad = [(e, got[k], want[k]) for k, e in enumerate(exprs) if not ok[k]]
        assert not bad, f"(expression, kernel, numpy) {bad}"


# ----------------------------------------------------------------------------- constants that do not fit
TOO_BIG = 2**70  # a global the kernel captures

BAD_CONSTANTS = [
    ("100000000000000000000", "does not fit in 64 bits"),
    ("-9223372036854775809", "does not fit in 64 bits"),
    ("1 << 64", "does not fit in 64 bits"),
    ("2**64", "does not fit in 64 bits"),
    ("int(1e30)", "does not fit in int64"),
    ("np.int64(1e19)", "does not fit in int64"),
    ("np.int64(2**63)", "does not fit in int64"),
    ("np.int32(2**40)", "does not fit in int32"),
    ("np.uint8(-1)", "does not fit in uint8"),
    ("np.uint64(-1)", "does not fit in uint64"),
    ("1 << -1", "negative shift count"),
    ("1 // 0", "integer division by zero"),
    ("2 ** -1", "negative integer powers"),
    ("np.int64(5) + 2**70", "does not fit in 64 bits"),
    ("TOO_BIG", "does not fit in 64 bits"),
    ("1e30", "does not fit in int64"),  # stored into an int64 array
    ("10 ** 1000", "does not fit in 64 bits"),
    ("int(math.nan)", "nan"),
    ("np.int8(math.inf)", "inf"),
]


def test_constants_that_do_not_fit_are_syntax_errors_at_their_line(device, queue, tmp_path):
    """``out[0] = 100000000000000000000``, ``1 << 64``, ``int(1e30)``, ``np.int32(2**40)``...: a
    KernelSyntaxError naming the kernel's file and line on every backend, before anything runs
    (they were an asynchronous numba error on the CPU and a silent wrong value on OpenCL/CUDA)."""
    body = "TOO_BIG = 2**70\n\n"
    for k, (expr, _) in enumerate(BAD_CONSTANTS):
        body += f"\n@pk.kernel\ndef bad{k}(acc, out):\n    if acc.once_per_grid():\n        out[0] = {expr}\n\n"
    mod, path = _kernel_module(tmp_path, "bad_constants", body)
    lines = path.read_text().splitlines()
    out = upload(queue, np.zeros(1, np.int64))
    for k, (expr, text) in enumerate(BAD_CONSTANTS):
        line = lines.index(f"        out[0] = {expr}") + 1
        with pytest.raises(KernelSyntaxError) as err:
            pk.exec(queue, pk.make_workdiv(device, 1, 1), getattr(mod, f"bad{k}"), out)
        msg = str(err.value)
        assert text in msg and f"bad_constants.py:{line}:" in msg, (expr, msg)
        assert err.value.lineno == line
    assert download(queue, out)[0] == 0  # nothing ran


def test_literals_in_range_keep_numbas_types():
    """An int literal is int64, or uint64 from 2**63 to 2**64 - 1 (numba's rule); literal
    arithmetic is exact before it is typed, as Python evaluates it."""
    from portable.compiler._folding import ConstantError, literal_int, literal_type

    assert literal_type(literal_int(ast.parse("2**63 - 1", mode="eval").body)).name == "int64"
    assert literal_type(literal_int(ast.parse("(1 << 64) - 1", mode="eval").body)).name == "uint64"
    assert literal_type(literal_int(ast.parse("-(2**63)", mode="eval").body)).name == "int64"
    assert literal_int(ast.parse("(2**100) >> 90", mode="eval").body) == 1024
    with pytest.raises(ConstantError):
        literal_type(-(2**63) - 1)
