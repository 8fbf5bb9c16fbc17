"""acc.pairs: every pair (a < b) of an event's rows once, at its ak.combinations rank, on every backend."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, raised_by_the_front_end, upload
from portable.compiler import KernelSyntaxError


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
    """2500 rows: ranks to 3.1 million dealt to a block's threads (too long for the Oclgrind pass,
    which deselects it). The float estimate of a pair's row is exact at this size: the integer
    correction is tested by test_row_estimate_corrected_at_row_ends."""
    _check_pairs(device, queue, np.array([3, 2500], np.int64))


def test_two_names_and_continue(device, queue):
    sizes = np.array([5, 0, 9], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    counts = upload(queue, np.zeros(3, np.int64))
    pk.exec(queue, pk.event_workdiv(device, 3, 8), count_pairs, upload(queue, offsets), counts, 3)
    # the pairs of n rows without the n - 1 neighbouring ones
    assert download(queue, counts).tolist() == [n * (n - 1) // 2 - max(n - 1, 0) for n in sizes]


def test_pairs_needs_two_or_three_names():
    """A front-end error: the same on every backend (tests/kernels/test_kernel_errors.py), checked
    once, on cpu_serial."""

    @pk.kernel
    def one_name(acc, out, n):
        for p in acc.pairs(0, n):
            out[0] = p

    queue = host_queue()
    with pytest.raises(KernelSyntaxError, match=r"\(a, b\) or \(k, a, b\)") as err:
        pk.exec(queue, pk.WorkDiv(1, 1, 1), one_name, pk.Buffer(queue.device, 1, np.int64), 3)
    assert raised_by_the_front_end(err)


@pk.kernel
def first_pair_of_each_thread(acc, out, first, last):
    t = acc.thread_idx
    out[3 * t] = -1
    for k, a, b in acc.pairs(first, last):
        out[3 * t] = k
        out[3 * t + 1] = a
        out[3 * t + 2] = b
        break


def _pair_of_rank(n, k):
    """(a, b) of rank k among the pairs of n rows, in integers only."""
    a = 0
    while (a + 1) * n - (a + 1) * (a + 2) // 2 <= k:
        a += 1
    return a, a + 1 + k - (a * n - a * (a + 1) // 2)


def test_row_estimate_corrected_at_row_ends(device, queue):
    """An event of 2e8 rows with threads of n - 2 elements: thread t starts at rank t * (n - 2),
    the last pair of row 0 and of row 1 and the first of row 3. At the two row ends the float
    estimate of the row is one too high (the square root rounds to the next row's) and the
    integer correction must step back; each thread stops after its first pair."""
    threads = 4
    if device.limits.max_threads_per_block < threads:
        pytest.skip("blocks of one thread walk the ranks from 0: 2e8 of them to reach the first row end")
    n, first = 200_000_000, 7
    out = upload(queue, np.zeros(3 * threads, np.int64))
    pk.exec(queue, pk.WorkDiv(1, threads, n - 2), first_pair_of_each_thread, out, first, first + n)
    got = download(queue, out).reshape(threads, 3)
    want = [(t * (n - 2),) + tuple(first + r for r in _pair_of_rank(n, t * (n - 2))) for t in range(threads)]
    assert [tuple(row) for row in got.tolist()] == want
    assert want[1][1:] == (first, first + n - 1) and want[2][1:] == (first + 1, first + n - 1)


@pytest.mark.parametrize("first,last", [(10, 0), (5, 5), (5, 4), (0, -3)])
def test_no_pairs_when_last_is_not_after_first(device, queue, first, last):
    """As ak.combinations of an empty event: no pair, not n*(n-1)//2 of a negative n."""
    out = upload(queue, np.zeros(2, np.int64))
    counts = upload(queue, np.zeros(2, np.int64))
    pk.exec(queue, pk.event_workdiv(device, 2, 8), rows_of_events, out, counts, first, last)
    assert download(queue, counts).tolist() == [0, 0]
    assert download(queue, out).tolist() == [0, 0]  # no row written, inside the event or out of it


@pk.kernel
def rows_of_events(acc, out, counts, first, last):
    for e in acc.independent_groups(2):
        for a, b in acc.pairs(first, last):
            acc.atomic_add(counts, e, 1)
            out[e] = a + b
