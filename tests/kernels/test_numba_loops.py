"""Each alpaka loop kind keeps its per-thread order and values (break, continue, the group-local
index, 2D, run-time bounds) on every backend, and on the numba backends (one thread per block)
the kinds whose thread indices are contiguous run as one ``range`` loop (backends/_numba_emit.py)."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from backends._numba_emit import emit_numba

BRK = 1000  # no break unless the test passes a smaller index


@pk.kernel
def visit_ige(acc, out, first, n, brk):
    c = 0
    for i in acc.independent_group_elements(first, n):
        if i == brk:
            break
        c += 1
        if i % 3 == 0:
            continue
        out[i] = c * 1000 + acc.thread_idx


@pk.kernel
def visit_uge(acc, out, loc, n, brk):
    c = 0
    for g in acc.uniform_groups(n):
        for i, k in acc.uniform_group_elements(g, n):
            if i == brk:
                break
            c += 1
            if i % 3 == 0:
                continue
            out[i] = c * 1000 + acc.thread_idx
            loc[i] = k


@pk.kernel
def visit_ue(acc, out, first, n, brk):
    c = 0
    for i in acc.uniform_elements(first, n):
        if i == brk:
            break
        c += 1
        if i % 3 == 0:
            continue
        out[i] = c * 1000 + acc.block_idx * 10 + acc.thread_idx


@pk.kernel
def visit_2d(acc, out, n0, n1):
    c = 0
    for i in acc.independent_group_elements(n0, dim=0):
        for j in acc.uniform_elements(n1, dim=1):
            c += 1
            out[i, j] = c


def _chunks(start, stop, stride, chunk):
    """The indices one thread visits in alpaka's strided loop, in order."""
    base, out = start, []
    while base < stop:
        out += range(base, min(base + chunk, stop))
        base += stride
    return out


def _expect(order_of_thread, size, brk):
    """``out`` as the kernels above write it: for each (block, thread, its indices in order)."""
    want = np.full(size, -1, np.int64)
    for b, t, order in order_of_thread:
        c = 0
        for i in order:
            if i == brk:
                break
            c += 1
            if i % 3:
                want[i] = c * 1000 + b * 10 + t
    return want


WDS = [(1, 1, 1), (1, 1, 4), (3, 1, 2), (2, 4, 3)]  # (blocks, threads, elements); threads > 1: GPU-like only


def _workdiv(device, blocks, threads, elements):
    if threads > device.limits.max_threads_per_block:
        pytest.skip(f"{device} runs at most {device.limits.max_threads_per_block} threads per block")
    return pk.WorkDiv(blocks, threads, elements)


@pytest.mark.parametrize("bte", WDS)
@pytest.mark.parametrize("first, n, brk", [(0, 37, BRK), (5, 40, BRK), (2, 30, 17), (9, 9, BRK)])
def test_independent_group_elements_order(device, queue, bte, first, n, brk):
    b, t, e = bte
    wd = _workdiv(device, b, t, e)
    out = upload(queue, np.full(n + 2, -1, np.int64))
    pk.exec(
        queue,
        pk.WorkDiv(1, t, e),
        visit_ige,  # every block walks the same indices
        out,
        first,
        n,
        brk,
    )
    want = _expect([(0, tt, _chunks(tt * e + first, n, t * e, e)) for tt in range(t)], n + 2, brk)
    np.testing.assert_array_equal(download(queue, out), want, err_msg=str(wd))


@pytest.mark.parametrize("bte", WDS)
@pytest.mark.parametrize("n, brk", [(37, BRK), (24, BRK), (30, 17)])
def test_uniform_group_elements_order(device, queue, bte, n, brk):
    b, t, e = bte
    wd = _workdiv(device, b, t, e)
    out = upload(queue, np.full(n + 2, -1, np.int64))
    loc = upload(queue, np.full(n + 2, -1, np.int64))
    pk.exec(queue, wd, visit_uge, out, loc, n, brk)
    be = t * e
    groups = (n + be - 1) // be
    per_thread = []
    for bb in range(b):
        for tt in range(t):
            stops = []
            for g in range(bb, groups, b):
                # a break leaves this group's loop only: the count goes on in the next group
                part = _chunks(g * be + tt * e, min(g * be + be, n), be, e)
                stops.append(part)
            per_thread.append((bb, tt, stops))
    want = np.full(n + 2, -1, np.int64)
    want_loc = np.full(n + 2, -1, np.int64)
    for _, tt, parts in per_thread:
        c = 0
        for part in parts:
            for i in part:
                if i == brk:
                    break
                c += 1
                if i % 3:
                    want[i] = c * 1000 + tt
                    want_loc[i] = i - (i // be) * be
    np.testing.assert_array_equal(download(queue, out), want, err_msg=str(wd))
    np.testing.assert_array_equal(download(queue, loc), want_loc, err_msg=str(wd))


@pytest.mark.parametrize("bte", WDS)
@pytest.mark.parametrize("first, n, brk", [(0, 37, BRK), (3, 40, BRK), (0, 30, 17), (6, 6, BRK)])
def test_uniform_elements_order(device, queue, bte, first, n, brk):
    b, t, e = bte
    wd = _workdiv(device, b, t, e)
    out = upload(queue, np.full(n + 2, -1, np.int64))
    pk.exec(queue, wd, visit_ue, out, first, n, brk)
    threads = [(bb, tt, _chunks((bb * t + tt) * e + first, n, b * t * e, e)) for bb in range(b) for tt in range(t)]
    np.testing.assert_array_equal(download(queue, out), _expect(threads, n + 2, brk), err_msg=str(wd))


@pytest.mark.parametrize("blocks, elements", [((1, 1), (1, 1)), ((1, 1), (2, 3)), ((1, 2), (3, 2)), ((1, 3), (1, 1))])
def test_2d_loops_order(device, queue, blocks, elements):
    n0, n1 = 5, 7
    out = upload(queue, np.zeros((n0, n1), np.int64))
    pk.exec(queue, pk.WorkDiv(blocks, (1, 1), elements), visit_2d, out, n0, n1)
    want = np.zeros((n0, n1), np.int64)
    e0, e1 = elements
    for b1 in range(blocks[1]):
        c = 0
        for i in range(n0):  # one block in dim 0: its one thread walks all rows
            for j in _chunks(b1 * e1, n1, blocks[1] * e1, e1):
                c += 1
                want[i, j] = c
    np.testing.assert_array_equal(download(queue, out), want)


def _source(kernel, *args):
    return emit_numba(kernel.ir(kernel.signature(args), 1, False), serial=True).source


def test_contiguous_kinds_are_one_range_loop():
    x = np.zeros(4, np.int64)
    ige = _source(visit_ige, x, 0, 4, 2)
    assert "for v_i in range(_base1, _stop1):" in ige and "while" not in ige, ige
    uge = _source(visit_uge, x, x, 4, 2)  # inside the groups' while loop
    assert "for v_i in range(_base2, _stop2):" in uge and "min(_lo" not in uge, uge
    ue = _source(visit_ue, x, 0, 4, 2)  # a stride of one chunk (one block): one trip
    assert "_chunk1 = _stride1 = _stop1 - _base1" in ue, ue
