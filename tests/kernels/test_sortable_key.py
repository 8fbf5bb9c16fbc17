"""The radix sorts' order-preserving key, one device function for both paths of pk.tools
(portable/_tools_serial.sortable_key; issue 42 item 6): on every backend and dtype, sorting the
keys as unsigned integers orders the values as numpy does."""

import numpy as np

import portable as pk
from alpyka_testing.kernels import download, upload
from alpyka_testing.numpy_compare import for_all_dtypes
from portable._tools_serial import sortable_key

KIND = {"u": 0, "i": 1, "f": 2}


@pk.kernel
def keys_of(acc, bits, out, kind, nbits, n):
    for i in acc.uniform_elements(n):
        out[i] = sortable_key(bits[i], kind, nbits)


def _values(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        fi = np.finfo(dt)
        v = [-np.inf, fi.min, -1.5, -fi.tiny, -0.0, 0.0, fi.tiny, 1.0, 2.5, fi.max, np.inf]
    else:
        ii = np.iinfo(dt)
        v = [ii.min, ii.min + 1, -1, 0, 1, 7, ii.max - 1, ii.max] if dt.kind == "i" else [0, 1, 7, ii.max - 1, ii.max]
    rng = np.random.default_rng(5)
    return rng.permutation(np.array(v * 3, dtype=dt))


@for_all_dtypes()
def test_keys_sort_as_the_values(queue, dtype):
    x = _values(dtype)
    dt = x.dtype
    bits = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]) if dt.kind == "f" else x
    out = upload(queue, np.zeros(x.size, np.uint64))
    n = x.size
    pk.exec(
        queue, pk.valid_workdiv(queue.device, n), keys_of, upload(queue, bits), out, KIND[dt.kind], 8 * dt.itemsize, n
    )
    keys = download(queue, out)
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(x[order], np.sort(x)), (x[order], np.sort(x))
    # -0.0 before 0.0 (their bits differ; numpy's sort leaves them in place)
    if dt.kind == "f":
        assert keys[np.flatnonzero((x == 0) & np.signbit(x))[0]] < keys[np.flatnonzero((x == 0) & ~np.signbit(x))[0]]
