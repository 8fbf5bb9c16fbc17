"""A ``uniform_groups`` loop whose body is one ``uniform_group_elements`` loop over its group runs
on the CPU backends as the one ``uniform_elements`` loop that walks the same indices
(portable/compiler/_group_loops.py, a pass of the CPU pipeline): which nests are rewritten, and
that every thread still sees its indices in alpaka's order on every backend (threads > 1 on the
GPU-like ones, where the nest stays as written)."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from backends._numba_emit import emit_numba
from portable.compiler._group_loops import fuse_group_loops
from portable.compiler.passes import CPU_PIPELINE


@pk.kernel
def nest(acc, out, who, n, m):
    c = 0  # carried from one index to the next of the same thread: the order must stay
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, m):
            c += 1
            if i % 5 == 0:
                continue
            out[i] = c
            who[i] = acc.block_idx * 100 + acc.thread_idx


@pk.kernel
def nest_flat(acc, out, x, n):
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, n):
            out[i] = x[i] * 2.0 + 1.0


@pk.kernel
def nest_2d(acc, out, n0, n1):
    for i in acc.uniform_elements(n0, dim=0):
        for g in acc.uniform_groups(n1, dim=1):
            for j in acc.uniform_group_elements(g, n1, dim=1):
                out[i, j] = i * 100 + j


@pk.kernel
def per_group_work(acc, out, n):
    for g in acc.uniform_groups(n):
        out[0] += 1
        for i in acc.uniform_group_elements(g, n):
            out[i] += 2


@pk.kernel
def reads_group(acc, out, n):
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, n):
            out[i] = g


@pk.kernel
def group_after_loop(acc, out, n):
    g = 0
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, n):
            out[i] = 1
    out[0] = g


@pk.kernel
def local_index(acc, out, n):
    for g in acc.uniform_groups(n):
        for i, k in acc.uniform_group_elements(g, n):
            out[i] = k


@pk.kernel
def breaks_group(acc, out, n):
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, n):
            if i == 3:
                break
            out[i] = 1


@pk.kernel
def extent_from_memory(acc, out, ext, n):
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, ext[0]):
            out[i] = 1


@pk.kernel
def extent_changes(acc, out, n):
    m = n
    for g in acc.uniform_groups(n):
        for i in acc.uniform_group_elements(g, m):
            out[i] = 1
            m = 2


def _ir(kernel, *args):
    return kernel.ir(kernel.signature(args), 1, False)


def _kinds(k):
    from portable.compiler import ir

    return [s.kind for s in ir.walk(k.body) if isinstance(s, ir.StridedLoop)]


def test_which_nests_become_one_loop():
    x = np.zeros(8, np.int64)
    f = np.zeros(8)
    assert _kinds(fuse_group_loops(_ir(nest, x, x, 8, 8))) == ["uniform_elements"]
    assert _kinds(fuse_group_loops(_ir(nest_flat, f, f, 8))) == ["uniform_elements"]
    k2 = nest_2d.ir(nest_2d.signature((np.zeros((2, 2), np.int64), 2, 2)), 2, False)
    assert _kinds(fuse_group_loops(k2)) == ["uniform_elements", "uniform_elements"]
    kept = {
        "work per group": _ir(per_group_work, x, 8),
        "reads the group": _ir(reads_group, x, 8),
        "the group read after the loop": _ir(group_after_loop, x, 8),
        "a group-local index": _ir(local_index, x, 8),
        "a break ends one group only": _ir(breaks_group, x, 8),
        "an extent read from memory": _ir(extent_from_memory, x, x, 8),
        "an extent the loop changes": _ir(extent_changes, x, 8),
    }
    for why, k in kept.items():
        assert fuse_group_loops(k) is k, why
        assert _kinds(k) == ["uniform_groups", "uniform_group_elements"], why


def test_the_fused_nest_is_the_flat_grid_loop():
    f = np.zeros(8)
    state = CPU_PIPELINE.run(_ir(nest_flat, f, f, 8))
    assert state.flat_grid_loop is not None
    src = emit_numba(_ir(nest_flat, f, f, 8), serial=True).source
    assert "def launch" in src and "for b in range" not in src, src


def _nest_order(b, t, e, n, m):
    """alpaka's nest: the indices of each (block, thread), in order."""
    be = t * e
    groups = (n + be - 1) // be
    for bb in range(b):
        for tt in range(t):
            idx = []
            for g in range(bb, groups, b):
                idx += range(g * be + tt * e, min(g * be + tt * e + e, g * be + be, m))
            yield bb, tt, idx


WDS = [(1, 1, 1), (1, 1, 3), (3, 1, 1), (4, 1, 2), (2, 4, 3), (3, 2, 1)]  # threads > 1: GPU-like only


@pytest.mark.parametrize("bte", WDS)
@pytest.mark.parametrize("n, m", [(37, 37), (24, 24), (40, 23), (10, 31), (0, 5), (9, 0), (7, -3)])
def test_nest_order(device, queue, bte, n, m):
    b, t, e = bte
    if t > device.limits.max_threads_per_block:
        pytest.skip(f"{device} runs at most {device.limits.max_threads_per_block} threads per block")
    size = max(n, m, 0) + 2
    out = upload(queue, np.full(size, -1, np.int64))
    who = upload(queue, np.full(size, -1, np.int64))
    pk.exec(queue, pk.WorkDiv(b, t, e), nest, out, who, n, m)
    want, want_who = np.full(size, -1, np.int64), np.full(size, -1, np.int64)
    for bb, tt, idx in _nest_order(b, t, e, n, m):
        for c, i in enumerate(idx, 1):
            if i % 5:
                want[i], want_who[i] = c, bb * 100 + tt
    np.testing.assert_array_equal(download(queue, out), want, err_msg=str(bte))
    np.testing.assert_array_equal(download(queue, who), want_who, err_msg=str(bte))


@pytest.mark.parametrize("blocks, elements", [(1, 1), (5, 1), (4, 3), (64, 2)])
def test_flat_nest_results(device, queue, blocks, elements):
    wd = pk.make_workdiv(device, blocks, elements)
    for n in (1, 10, 37, 257):
        x = np.arange(n + 2, dtype=np.float64)
        out = upload(queue, np.full(n + 2, -1.0))
        pk.exec(queue, wd, nest_flat, out, upload(queue, x), n)
        want = np.full(n + 2, -1.0)
        want[:n] = x[:n] * 2.0 + 1.0
        np.testing.assert_array_equal(download(queue, out), want, err_msg=f"{wd} n={n}")


WDS_2D = [((1, 1), (1, 1), (1, 1)), ((2, 3), (1, 1), (2, 2)), ((1, 2), (2, 4), (1, 3))]  # (blocks, threads, elements)


@pytest.mark.parametrize("blocks, threads, elements", WDS_2D)
def test_nest_along_the_second_dimension(device, queue, blocks, threads, elements):
    if max(threads) > 1 and device.limits.max_threads_per_block < 8:
        pytest.skip(f"{device} runs at most {device.limits.max_threads_per_block} threads per block")
    n0, n1 = 5, 13
    out = upload(queue, np.full((n0, n1 + 2), -1, np.int64))
    pk.exec(queue, pk.WorkDiv(blocks, threads, elements), nest_2d, out, n0, n1)
    want = np.full((n0, n1 + 2), -1, np.int64)
    want[:, :n1] = np.arange(n0)[:, None] * 100 + np.arange(n1)[None, :]
    np.testing.assert_array_equal(download(queue, out), want)
