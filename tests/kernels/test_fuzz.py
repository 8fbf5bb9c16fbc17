"""The differential fuzzer (alpyka_testing/fuzz.py) on every backend and every device of it (both
OpenCL runtimes where present): random typed expressions against numpy's bits, fixed seeds here
(``ALPYKA_FUZZ_SEEDS=N`` adds N more seeds of 200 expressions each: the long run), and the
differences it found, minimized, kept as one regression test per class."""

import math
import os

import numpy as np
import pytest

import portable as pk
from alpyka_testing import fuzz
from alpyka_testing.fuzz import binop, call, cast, col, const, select
from alpyka_testing.kernels import download, upload

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
#: CI's seed (about 11 s of CPU on a numba backend, mostly numba's compile; on emulated cuda 14 s,
#: 9 of them the HIP check's compile of its 40-expression kernel). The suite's time (CONTRIBUTING.md)
#: keeps one: seed 2, which CI ran as well until the suite passed 15 minutes, and ``N`` seeds of 200
#: expressions join with ``ALPYKA_FUZZ_SEEDS=N`` (the long run); what a seed found is kept below
_LONG = int(os.environ.get("ALPYKA_FUZZ_SEEDS", "0") or 0)
SEEDS = [(1, 40)] + ([(2, 40)] if _LONG else [])
SEEDS += [(1000 + k, 200) for k in range(_LONG)]


def _devices(device):
    """One device of each kind that ``device``'s backend has (both OpenCL runtimes where both are
    installed; one of two like emulated GPUs)."""
    kinds = {}
    for dev in pk.devices(device.backend_name):
        kinds.setdefault(dev.name, dev)
    return list(kinds.values())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed,count", SEEDS, ids=[f"seed{s}" for s, _ in SEEDS])
def test_random_expressions_give_numpys_bits(device, seed, count):
    found = []
    for dev in _devices(device):
        found += [f"{dev}: {m}" for m in fuzz.run_seed(pk.Queue(dev), seed, count)]
    assert not found, "differences from numpy (minimized):\n" + "\n".join(found)


# ----------------------------------------------------------------------------- the classes found
def _data(rows, **columns):
    """Fuzzer inputs of ``rows`` rows, zero but for ``a_<type>=[values]`` / ``b_<type>=[...]``."""
    data = {t: np.zeros((rows, fuzz.COLUMNS), np.dtype(t)) for t in fuzz.TYPES}
    for name, values in columns.items():
        k, t = "ab".index(name[0]), name[2:]
        if np.dtype(t).kind in "iu":  # numpy refuses -1 for a uint64 array: the wrapped bits
            values = np.array([v % 2**64 for v in values], np.uint64)
        data[t][:, k] = np.array(values).astype(t)
    return data


def _check(device, exprs, data, want=None):
    """Each expression on every device of the backend equals numpy's (and ``want``, when given)."""
    cols = {(t, k): data[t][:, k] for t in fuzz.TYPES for k in range(fuzz.COLUMNS)}
    oracle = [fuzz.evaluate(e, cols) for e in exprs]
    if want is not None:
        assert [o.tolist() for o in oracle] == want
    for dev in _devices(device):
        got = fuzz.run(pk.Queue(dev), exprs, data)
        for e, g, o in zip(exprs, got, oracle):
            bad = fuzz.differ(g, o)
            assert not bad.any(), f"{dev}: {fuzz.text(e)}: got {g.tolist()}, numpy {o.tolist()}"


def _flag(cmp, a, b):
    return select(cmp, a, b, const(1), const(0))


def test_signed_overflow_wraps(device):
    """numba marks signed ``+ - *`` no-signed-wrap, and LLVM folded ``(x - 1) < 0`` at -2**63,
    ``(x + 1) > x`` at 2**63 - 1 and ``(x * 2) // 2 == x`` at 2**62 to True (cpu_serial and
    cpu_threads; numpy and the C backends: False)."""
    x = col("int64")
    exprs = [
        _flag("<", binop("-", x, const(1)), const(0)),
        _flag(">", binop("+", x, const(1)), x),
        _flag("==", binop("//", binop("*", x, const(2)), const(2)), x),
    ]
    want = [[0, 0, 0], [1, 0, 1], [0, 0, 0]]
    _check(device, exprs, _data(3, a_int64=[I64_MIN, I64_MAX, 2**62]), want)


def test_a_divisor_that_wraps_to_zero_or_minus_one(device):
    """``v % (32 * w)`` at w = 2**59 and ``v // (w * 2)`` at w = -2**63 divide by a wrapped 0:
    SIGFPE killed the process on the numba backends (LLVM dropped the zero check of a no-wrap
    product); numpy, and now every backend, give 0. ``MIN // (w * 2 + 1)`` at w = 2**63 - 1 is
    ``MIN // -1``: MIN, and ``%`` 0."""
    v, w = col("int64", 0), col("int64", 1)
    minus1 = binop("+", binop("*", w, const(2)), const(1))
    exprs = [
        binop("%", v, binop("*", const(32), w)),
        binop("//", v, binop("*", w, const(2))),
        binop("//", v, minus1),
        binop("%", v, minus1),
    ]
    data = _data(3, a_int64=[12345, 12345, I64_MIN], b_int64=[2**59, I64_MIN, I64_MAX])
    want = [[0, 0, 0], [0, 0, 2**62], [0, 12345, I64_MIN], [12345, 0, 0]]
    _check(device, exprs, data, want)


def test_unsigned_floor_division_by_a_wrapped_literal_difference(device):
    """``u8 // (9223372036854775808 - np.int64(v))``: the uint64 literal and an int64 make an int64
    difference that wraps (to a negative divisor at v = -5: numpy's floor gives -1); the numba
    backends gave -1 where numpy gives 0 (v = 5)."""
    e = binop("//", col("uint8"), binop("-", const(2**63), cast("int64", col("int64"))))
    _check(device, [e], _data(3, a_uint8=[7, 200, 255], a_int64=[5, -5, I64_MIN]), [[0, -1, 0]])


def test_zero_minus_an_integer_zero_is_plus_zero(device):
    """``0.0 - float(i)`` at i = 0 is +0.0: GCC folded it into ``-(double)i`` (-0.0) even at -O0 in
    the emulator's build, until -frounding-math."""
    e = binop("-", const(0.0), cast("float64", col("int64")))
    _check(device, [e], _data(2, a_int64=[0, 3]))
    got = fuzz.run(pk.Queue(device), [e], _data(1, a_int64=[0]))[0]
    assert not np.signbit(got[0]) and got[0] == 0.0


def test_floor_division_by_a_constant_negative_zero(device):
    """``x // -0.0`` is ``x / -0.0``: -inf for a positive x, saturating to 0 in a uint64 and to -128
    in an int8. PoCL's compiler gave +inf from the helper's ``a / b`` for a constant -0.0 divisor
    (``np.uint64(~b_uint8 // np.float32(-0.0))`` at b = 1 was 2**64 - 1, seed 1 of the fuzzer)."""
    u8, u64, f64 = col("uint8", 1), col("uint64"), col("float64")
    exprs = [
        cast("uint64", binop("//", fuzz.unop("~", u8), const(-0.0, "float32"))),
        cast("int8", binop("//", u64, cast("float64", const(-0.0)))),
        binop("//", f64, const(-0.0, "float64")),
        binop("//", f64, const(0.0, "float64")),
    ]
    data = _data(4, b_uint8=[1, 255, 0, 7], a_uint64=[2**64 - 1, 0, 5, 1], a_float64=[3.0, -0.0, math.nan, -math.inf])
    _check(device, exprs[:2], data, [[0, 0, 0, 0], [-128, 0, -128, -128]])
    _check(device, exprs[2:], data)  # -inf, nan, nan, inf and inf, nan, nan, -inf: numpy's


def test_minimized_expressions_of_later_seeds(device):
    """What the first fuzz runs found on the numba backends beside the classes above (each a
    minimized case): numba computed ``-x`` of an int8 in 64 bits (``-(-x)`` at -128 gave 128)."""
    a64, b64, u64 = col("int64"), col("int64", 1), col("uint64")
    exprs = [
        binop("+", const(-(2**63)), a64),
        binop("+", const(2**63), a64),
        binop("+", const(I64_MAX, "int64"), col("uint32")),
        binop("&", binop("+", const(0), u64), unop_neg(unop_neg(col("int8")))),
        call("abs", binop("-", u64, binop("**", b64, col("uint32")))),
    ]
    data = _data(
        2,
        a_int64=[-6231817646661695629, I64_MIN],
        b_int64=[65, 3],
        a_uint32=[4294967294, 7],
        a_int8=[-128, 5],
        a_uint64=[4611686018427387904, 5394646429562744898],
    )
    _check(device, exprs, data)


def unop_neg(x):
    return fuzz.unop("-", x)


# ----------------------------------------------------------------------------- the PoCL assert
@pk.kernel
def group_sums(acc, out, vals, n_groups, m):
    s = acc.shared_array(1, np.float64)
    for g in acc.independent_groups(n_groups):
        if acc.thread_idx == 0:
            s[0] = 0.0
        acc.sync_block_threads()
        for i in acc.independent_group_elements(m):  # only some threads of the group enter
            v = vals[g * m + i]
            assert v >= 0.0, "negative value"
            acc.atomic_add(s, 0, v * 0.001, hierarchy="block")
        acc.sync_block_threads()
        if acc.thread_idx == 0:
            out[g] = s[0]
        acc.sync_block_threads()


def test_a_passing_assert_changes_no_result_in_a_kernel_with_barriers(device):
    """PoCL dropped the statement after a passing assert inside a loop only some threads enter, in
    an independent_groups loop with barriers (0 or 67 per group instead of the sums): the assert's
    ``return`` on failure. A failing one is still reported, and the queue goes on."""
    n_groups, m = 3, 5
    vals = np.arange(n_groups * m, dtype=np.float64) * 0.67 + 0.67
    want = (vals.reshape(n_groups, m) * 0.001).sum(axis=1)
    for dev in _devices(device):
        q = pk.Queue(dev)
        out = upload(q, np.zeros(n_groups))
        pk.exec(q, pk.make_workdiv(dev, 2, 16), group_sums, out, upload(q, vals), n_groups, m)
        np.testing.assert_allclose(download(q, out), want, rtol=1e-12, err_msg=str(dev))
        bad = vals.copy()
        bad[7] = -1.0
        pk.exec(q, pk.make_workdiv(dev, 2, 16), group_sums, out, upload(q, bad), n_groups, m)
        with pytest.raises(pk.AsyncError) as err:
            q.wait()
        assert isinstance(err.value.__cause__, pk.KernelAssertionError), str(dev)
        assert "negative value" in str(err.value.__cause__)
        pk.exec(q, pk.make_workdiv(dev, 2, 16), group_sums, out, upload(q, vals), n_groups, m)
        np.testing.assert_allclose(download(q, out), want, rtol=1e-12, err_msg=str(dev))


def test_the_oracle_follows_the_documented_rules():
    """The fuzzer's numpy side itself: saturating float to integer, shifts, ``**`` below 0."""
    f = np.array([math.nan, 1e30, -1e30, -1.5, 2.0**63], np.float64)
    assert fuzz.convert(f, fuzz.T("int64")).tolist() == [0, I64_MAX, I64_MIN, -1, I64_MAX]
    assert fuzz.convert(f, fuzz.T("uint8")).tolist() == [0, 255, 0, 0, 255]
    cols = {("int64", 0): np.array([1, -8, -1, 2]), ("int64", 1): np.array([64, 70, -3, -1])}
    shl = fuzz.evaluate(binop("<<", col("int64"), col("int64", 1)), cols)
    shr = fuzz.evaluate(binop(">>", col("int64"), col("int64", 1)), cols)
    pw = fuzz.evaluate(binop("**", col("int64"), col("int64", 1)), cols)
    assert shl.tolist() == [0, 0, 0, 0] and shr.tolist() == [0, -1, -1, 0] and pw.tolist()[2:] == [-1, 0]
