"""Index formulas of the acc loops against a numpy model of alpaka's formulas."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import (
    download,
    record_groups,
    record_independent,
    record_nd2,
    record_nd2_along,
    record_nd3,
    record_queries,
    record_uniform,
    record_uniform_first,
    upload,
)

CASES_1D = [(1, 1), (3, 1), (4, 5), (7, 3), (16, 2)]  # (blocks, elements)
SIZES = [1, 10, 37, 100]


def _owner_block(i, wd, d=0, first=0):
    """alpaka uniform_elements: the block whose thread visits element i along dimension d."""
    e, bt, gb = wd.elements[d], wd.threads[d], wd.blocks[d]
    thread = ((i - first) // e) % (gb * bt)
    return thread // bt


def test_uniform_elements(device, queue):
    for blocks, elements in CASES_1D:
        wd = pk.make_workdiv(device, blocks, elements)
        for n in SIZES:
            owner = upload(queue, np.full(n + 3, -1, np.int64))
            hits = upload(queue, np.zeros(n + 3, np.int32))
            pk.exec(queue, wd, record_uniform, owner, hits, n)
            got_o, got_h = download(queue, owner), download(queue, hits)
            i = np.arange(n)
            np.testing.assert_array_equal(got_o[:n], _owner_block(i, wd), err_msg=f"{wd} n={n}")
            np.testing.assert_array_equal(got_h[:n], 1, err_msg=f"{wd} n={n}: each element once")
            assert (got_o[n:] == -1).all() and (got_h[n:] == 0).all(), f"{wd} n={n}: wrote past n"


def test_uniform_elements_first(device, queue):
    for blocks, elements in CASES_1D:
        wd = pk.make_workdiv(device, blocks, elements)
        for first, n in [(0, 10), (3, 10), (5, 37), (9, 9)]:
            owner = upload(queue, np.full(n + 2, -1, np.int64))
            queue.enqueue(wd, record_uniform_first, owner, first, n)
            got = download(queue, owner)
            i = np.arange(first, n)
            e, gt = wd.elements[0], wd.blocks[0] * wd.threads[0]
            np.testing.assert_array_equal(got[first:n], ((i - first) // e) % gt, err_msg=f"{wd} first={first}")
            assert (got[:first] == -1).all() and (got[n:] == -1).all()


def test_uniform_groups_and_group_elements(device, queue):
    for blocks, elements in CASES_1D:
        wd = pk.make_workdiv(device, blocks, elements)
        for n in SIZES:
            owner = upload(queue, np.full(n, -1, np.int64))
            local = upload(queue, np.full(n, -1, np.int64))
            pk.exec(queue, wd, record_groups, owner, local, n)
            got_o, got_l = download(queue, owner), download(queue, local)
            be = wd.threads[0] * wd.elements[0]
            g = np.arange(n) // be
            np.testing.assert_array_equal(got_o, (g % wd.blocks[0]) * 100000 + g, err_msg=f"{wd} n={n}")
            np.testing.assert_array_equal(got_l, np.arange(n) - g * be, err_msg=f"{wd} n={n}")


def test_independent_groups(device, queue):
    for blocks, elements in CASES_1D:
        wd = pk.make_workdiv(device, blocks, elements)
        for groups, m in [(1, 1), (7, 5), (12, 3)]:
            owner = upload(queue, np.full((groups, m), -1, np.int64))
            pk.exec(queue, wd, record_independent, owner, groups, m)
            got = download(queue, owner)
            g = np.arange(groups)[:, None]
            np.testing.assert_array_equal(
                got, np.broadcast_to((g % wd.blocks[0]) * 1000 + g, (groups, m)), err_msg=f"{wd} groups={groups}"
            )


def test_index_queries(device, queue):
    for blocks, elements in CASES_1D:
        wd = pk.make_workdiv(device, blocks, elements)
        gt = wd.blocks[0] * wd.threads[0]
        out = upload(queue, np.full((gt, 8), -1, np.int64))
        pk.exec(queue, wd, record_queries, out)
        got = download(queue, out)
        t = np.arange(gt)
        np.testing.assert_array_equal(got[:, 0], wd.blocks[0])
        np.testing.assert_array_equal(got[:, 1], wd.threads[0])
        np.testing.assert_array_equal(got[:, 2], wd.elements[0])
        np.testing.assert_array_equal(got[:, 3], gt)
        np.testing.assert_array_equal(got[:, 4], t // wd.threads[0])
        np.testing.assert_array_equal(got[:, 5], t % wd.threads[0])
        np.testing.assert_array_equal(got[:, 6], (t == 0).astype(np.int64))
        np.testing.assert_array_equal(got[:, 7], (t % wd.threads[0] == 0).astype(np.int64))


@pytest.mark.parametrize(
    "blocks,elements,shape", [((2, 3), (3, 2), (7, 9)), ((1, 4), (1, 1), (3, 10)), ((5, 1), (2, 3), (11, 4))]
)
def test_uniform_elements_2d(device, queue, blocks, elements, shape):
    wd = pk.make_workdiv(device, blocks, elements)
    owner = upload(queue, np.full(shape, -1, np.int64))
    pk.exec(queue, wd, record_nd2, owner, *shape)
    got = download(queue, owner)
    i, j = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    np.testing.assert_array_equal(got, _owner_block(i, wd, 0) * 1000 + _owner_block(j, wd, 1))
    along = upload(queue, np.full(shape, -1, np.int64))
    pk.exec(queue, wd, record_nd2_along, along, *shape)
    np.testing.assert_array_equal(download(queue, along), i * 3 + j)


def test_uniform_elements_3d(device, queue):
    wd = pk.make_workdiv(device, (2, 3, 2), (2, 1, 3))
    shape = (5, 4, 13)
    owner = upload(queue, np.full(shape, -1, np.int64))
    pk.exec(queue, wd, record_nd3, owner, *shape)
    got = download(queue, owner)
    i, j, k = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    want = (_owner_block(i, wd, 0) * 100 + _owner_block(j, wd, 1)) * 100 + _owner_block(k, wd, 2)
    np.testing.assert_array_equal(got, want)
