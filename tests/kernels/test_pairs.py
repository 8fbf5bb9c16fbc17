"""acc.pairs: every pair (a < b) of an event's rows once, at its ak.combinations rank, on every backend."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.kernel import KernelSyntaxError


@pk.kernel
def pair_rows(acc, offsets, pair_off, first_row, second_row, n_events):
    for e in acc.independent_groups(n_events):
        for k, a, b in acc.pairs(offsets[e], offsets[e + 1]):
            first_row[pair_off[e] + k] = a
            second_row[pair_off[e] + k] = b


@pk.kernel
def count_pairs(acc, offsets, counts, n_events):
    for e in acc.independent_groups(n_events):
        for a, b in acc.pairs(offsets[e], offsets[e + 1]):
            if b == a + 1:
                continue
            acc.atomic_add(counts, e, 1)


def _check_pairs(device, queue, sizes):
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pair_off = pk.pair_offsets(offsets)
    n_pairs = int(pair_off[-1])
    first, second = pk.Buffer(device, n_pairs, np.int64), pk.Buffer(device, n_pairs, np.int64)
    wd = pk.event_workdiv(device, len(sizes), 64)
    pk.exec(queue, wd, pair_rows, upload(queue, offsets), upload(queue, pair_off), first, second, len(sizes))
    got_a, got_b = download(queue, first), download(queue, second)
    want_a, want_b = [], []
    for e, n in enumerate(sizes):
        a, b = np.triu_indices(n, 1)
        want_a.append(a + offsets[e])
        want_b.append(b + offsets[e])
    np.testing.assert_array_equal(got_a, np.concatenate(want_a))
    np.testing.assert_array_equal(got_b, np.concatenate(want_b))


def test_every_pair_once_in_combinations_order(device, queue):
    _check_pairs(device, queue, np.array([0, 1, 2, 3, 7, 64, 0, 20], np.int64))


def test_ranks_of_a_large_event(device, queue):
    """2500 rows: ranks to 3.1 million, where the float estimate of a pair's row needs its integer
    correction (too long for the Oclgrind pass, which deselects it)."""
    _check_pairs(device, queue, np.array([3, 2500], np.int64))


def test_two_names_and_continue(device, queue):
    sizes = np.array([5, 0, 9], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    counts = upload(queue, np.zeros(3, np.int64))
    pk.exec(queue, pk.event_workdiv(device, 3, 8), count_pairs, upload(queue, offsets), counts, 3)
    # the pairs of n rows without the n - 1 neighbouring ones
    assert download(queue, counts).tolist() == [n * (n - 1) // 2 - max(n - 1, 0) for n in sizes]


def test_pairs_needs_two_or_three_names(queue):
    @pk.kernel
    def one_name(acc, out, n):
        for p in acc.pairs(0, n):
            out[0] = p

    with pytest.raises(KernelSyntaxError, match=r"\(a, b\) or \(k, a, b\)"):
        pk.exec(queue, pk.WorkDiv(1, 1, 1), one_name, pk.Buffer(queue.device, 1, np.int64), 3)
