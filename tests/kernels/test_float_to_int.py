"""Float-to-integer conversion: one defined answer on every backend (saturating, NaN -> 0), where
C leaves NaN and out-of-range values undefined and x86 gave the most negative value."""

import math

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

VALUES = [
    math.nan,
    math.inf,
    -math.inf,
    1e30,
    -1e30,
    3e9,
    -3e9,
    2.7,
    -2.7,
    300.0,
    -1.0,
    255.9,
    -0.5,
    2.0**63,
    -(2.0**63),
    2.0**31 - 1,
    -(2.0**31) - 0.5,
]


def _saturated(x, dtype):
    info = np.iinfo(dtype)
    if math.isnan(x):
        return 0
    if x >= info.max + 1:
        return int(info.max)
    if x <= info.min - 1:
        return int(info.min)
    return math.trunc(x)


@pk.kernel
def conversions(acc, xs, i64, i32, i8, u8, u64, floors, stored, n):
    for i in acc.uniform_elements(n):
        x = xs[i]
        i64[i] = int(x)
        i32[i] = np.int32(x)
        i8[i] = np.int8(x)
        u8[i] = np.uint8(x)
        u64[i] = np.uint64(x)
        floors[i] = math.floor(x)
        stored[i] = x  # a float stored into an int32 array converts the same way


@pytest.mark.parametrize("ftype", [np.float64, np.float32])
def test_saturating_conversion_on_every_backend(device, queue, ftype):
    xs = np.array(VALUES, ftype)
    n = len(xs)
    outs = {t: upload(queue, np.ones(n, t)) for t in (np.int64, np.int32, np.int8, np.uint8, np.uint64)}
    floors, stored = upload(queue, np.ones(n, np.int64)), upload(queue, np.ones(n, np.int32))
    pk.exec(queue, pk.make_workdiv(device, 1, n), conversions, upload(queue, xs), *outs.values(), floors, stored, n)
    as_float = [float(x) for x in xs]  # float32 rounding of the inputs included
    for t, buf in outs.items():
        assert download(queue, buf).tolist() == [_saturated(x, t) for x in as_float], t.__name__
    want_floor = [_saturated(math.floor(x) if math.isfinite(x) else x, np.int64) for x in as_float]
    assert download(queue, floors).tolist() == want_floor
    assert download(queue, stored).tolist() == [_saturated(x, np.int32) for x in as_float]
