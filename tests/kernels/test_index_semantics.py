"""Index semantics of the kernel language, the same on every backend (docs/kernels.md, "Indices").

An index is an offset from an array's first element: there is no numpy-style wrap-around, so a
negative index is out of range like one past the end. A constant negative index (``x[-1]``) is a
compile-time error everywhere; a computed one is caught under ``ALPYKA_DEBUG=1`` and, without
it, addresses ``base + i * stride`` on every backend (the CPU backends used to wrap it around
like numpy while OpenCL/CUDA read before the array).

The layout below keeps those reads inside the collection's buffer: with n = 32 float32 values a
column is exactly 128 bytes (the alignment), so the element before column ``b`` is the last
element of column ``a`` and component -1 of vector ``p`` is column ``b``.
"""

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelIndexError, KernelSyntaxError

N = 32  # N * 4 bytes == the layout's alignment: no padding between the columns


class Packed(soa.Layout):
    a = soa.column(np.float32)
    b = soa.column(np.float32)
    p = soa.vector(np.float32, 2)


@pk.kernel
def read_before(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out[i] = inp.b[i - 1]


@pk.kernel
def write_before(acc, out, n):
    for i in acc.uniform_elements(n):
        if i == 0:
            out.b[i - 1] = 7.0


@pk.kernel
def atomic_before(acc, out, n):
    for i in acc.uniform_elements(n):
        if i == 0:
            acc.atomic_add(out.b, i - 1, np.float32(1))


@pk.kernel
def component_before(acc, out, inp, k, n):
    for i in acc.uniform_elements(n):
        out[i] = inp.p[i, k - 1]


@pk.kernel
def buffer_column_before(acc, out, buf, k, n):
    for i in acc.uniform_elements(n):
        out[i] = buf[i + 1, k - 1]


@pk.kernel
def constant_negative(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out[i] = inp.b[-1]


@pk.kernel
def constant_negative_store(acc, out, n):
    for i in acc.uniform_elements(n):  # noqa: B007 - a kernel body: a constant index in the loop
        out[-2] = 1.0


@pk.kernel
def constant_component_past_end(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out[i] = inp.p[i, 2]


@pk.kernel(dynamic_shared_bytes=6)
def dynamic_shared_past_end(acc, out, k):
    s = acc.dynamic_shared_array(np.float32)  # 6 bytes: one float32 on every backend
    if acc.once_per_grid():
        s[k] = 1.0
        out[0] = len(s)


def _packed(queue):
    a = np.arange(N, dtype=np.float32)
    data = {"a": a, "b": 100 + a, "p": np.stack([200 + a, 300 + a], axis=1)}
    return pk.PortableCollection.from_dict(Packed, data, queue), data


def _caught_by_the_emulator(device, queue, kernel) -> bool:
    """The GPU emulator checks indices by default (ALPYKA_EMULATE_CHECKS, docs/testing.md): there
    an index before an array is its "bounds" KernelCheckError, not an access of the memory before."""
    from portable.env import emulate_checks

    if not (device.capabilities.emulated and emulate_checks()):
        return False
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    cause = err.value.__cause__
    assert isinstance(cause, pk.KernelCheckError) and cause.kind == "bounds", repr(cause)
    assert kernel.__name__ in str(cause)
    return True


def test_layout_keeps_columns_adjacent():
    places = Packed.placements(N)
    assert places["b"].offset == places["a"].offset + N * 4
    assert places["p"].offset == places["b"].offset + N * 4 and places["p"].pitch == N * 4


def test_negative_index_does_not_wrap_around(device, queue):
    coll, data = _packed(queue)
    out = upload(queue, np.zeros(N, np.float32))
    pk.exec(queue, pk.valid_workdiv(device, N), read_before, out, coll.const_view(), N)
    if _caught_by_the_emulator(device, queue, read_before):
        return
    got = download(queue, out)
    # b[-1] is the element just before column b (a[N-1]), not numpy's b[N-1]
    assert got[0] == data["a"][-1] != data["b"][-1]
    np.testing.assert_array_equal(got[1:], data["b"][:-1])


def test_negative_store_and_atomic_do_not_wrap_around(device, queue):
    coll, data = _packed(queue)
    pk.exec(queue, pk.valid_workdiv(device, N), write_before, coll.view(), N)
    if _caught_by_the_emulator(device, queue, write_before):
        pk.exec(queue, pk.valid_workdiv(device, N), atomic_before, coll.view(), N)
        assert _caught_by_the_emulator(device, queue, atomic_before)
        return
    got = coll.to_dict(queue)
    assert got["a"][-1] == 7.0 and got["b"][-1] == data["b"][-1]
    pk.exec(queue, pk.valid_workdiv(device, N), atomic_before, coll.view(), N)
    got = coll.to_dict(queue)
    assert got["a"][-1] == 8.0 and got["b"][-1] == data["b"][-1]


def test_negative_component_and_buffer_index(device, queue):
    coll, data = _packed(queue)
    out = upload(queue, np.zeros(N, np.float32))
    pk.exec(queue, pk.valid_workdiv(device, N), component_before, out, coll.const_view(), 0, N)
    if _caught_by_the_emulator(device, queue, component_before):
        return
    np.testing.assert_array_equal(download(queue, out), data["b"])  # component -1 of p is column b
    grid = np.arange(N * N, dtype=np.float32).reshape(N, N)
    pk.exec(queue, pk.valid_workdiv(device, N - 1), buffer_column_before, out, upload(queue, grid), 0, N - 1)
    # buf[i + 1, -1] is the element before row i + 1 (the last of row i), not numpy's buf[i + 1, N - 1]
    np.testing.assert_array_equal(download(queue, out)[: N - 1], grid[: N - 1, N - 1])


@pytest.mark.parametrize("kern", [constant_negative, constant_negative_store], ids=["load", "store"])
def test_constant_negative_index_is_a_compile_error(device, queue, kern):
    coll, _ = _packed(queue)
    out = upload(queue, np.zeros(N, np.float32))
    args = (out, coll.const_view(), N) if kern is constant_negative else (out, N)
    with pytest.raises(KernelSyntaxError, match=r"negative index -\d.*do not wrap around") as err:
        pk.exec(queue, pk.valid_workdiv(device, N), kern, *args)
    assert "test_index_semantics.py:" in str(err.value)


def test_constant_component_out_of_range_is_a_compile_error(device, queue):
    coll, _ = _packed(queue)
    out = upload(queue, np.zeros(N, np.float32))
    with pytest.raises(
        KernelSyntaxError, match=r"index 2 \(dimension 1\) is out of range for vector 'p'.*extent there is 2"
    ):
        pk.exec(queue, pk.valid_workdiv(device, N), constant_component_past_end, out, coll.const_view(), N)


def _index_error(queue):
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert isinstance(err.value.__cause__, KernelIndexError), repr(err.value.__cause__)
    return str(err.value.__cause__)


def test_debug_checks_flag_negative_indices(device, queue, monkeypatch):
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    coll, _ = _packed(queue)
    out = upload(queue, np.zeros(N, np.float32))
    wd = pk.valid_workdiv(device, N)
    pk.exec(queue, wd, read_before, out, coll.const_view(), N)
    msg = _index_error(queue)
    assert "read_before" in msg and "column 'b' of argument 'inp'" in msg
    pk.exec(queue, wd, write_before, coll.view(), N)
    assert "write_before" in _index_error(queue)
    pk.exec(queue, wd, atomic_before, coll.view(), N)
    assert "atomic_before" in _index_error(queue)
    pk.exec(queue, wd, component_before, out, coll.const_view(), 0, N)
    assert "vector 'p' of argument 'inp'" in _index_error(queue)
    pk.exec(
        queue,
        pk.valid_workdiv(device, N - 1),
        buffer_column_before,
        out,
        upload(queue, np.zeros((N, N), np.float32)),
        0,
        N - 1,
    )
    assert "argument 'buf'" in _index_error(queue)
    # in range: no error, the same results as without the checks
    pk.exec(queue, wd, component_before, out, coll.const_view(), 1, N)
    np.testing.assert_array_equal(download(queue, out), 200 + np.arange(N, dtype=np.float32))


def test_debug_dynamic_shared_extent_is_the_same_everywhere(device, queue, monkeypatch):
    out = upload(queue, np.zeros(1, np.int64))
    wd = pk.WorkDiv(1, 1, 1)
    pk.exec(queue, wd, dynamic_shared_past_end, out, 0)
    assert download(queue, out)[0] == 1  # len(s) == 6 // 4
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    pk.exec(queue, wd, dynamic_shared_past_end, out, 0)
    queue.wait()
    pk.exec(queue, wd, dynamic_shared_past_end, out, 1)  # the 8-byte scratch of the CPU once hid this
    assert "dynamic shared array of float32" in _index_error(queue)
