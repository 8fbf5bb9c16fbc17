"""The GPU emulator's schedules (issue 39 item 4): a block's threads switch at memory accesses and
loop iterations, drawn from ALPYKA_EMULATE_SEED, so a lost update shows (and one seed gives one
result); a thread spinning on a flag another lane or block sets takes turns with it and finishes
(legal since Volta), while a wait nothing can end fails within seconds with KernelCheckError
"deadlock" naming the lines where the threads wait; another block sees a block's plain stores only
after its acc.mem_fence("grid"), so the last block of a threadfence reduction without its fence is
a "race". Each wrong kernel has its correct twin."""

from __future__ import annotations

import inspect
import time

import numpy as np
import pytest

import portable as pk

pytestmark = [pytest.mark.hip_differs, pytest.mark.alpyka_backends("cuda", "rocm")]


def _lines(kernel) -> list[str]:
    lines, first = inspect.getsourcelines(kernel.py_function)
    return [f"line {first + i}" for i, text in enumerate(lines) if "# WAIT" in text]


def _fails(queue, kind, kernel, workdiv, *args) -> str:
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, workdiv, kernel, *args)
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == kind, repr(err)
    assert f"kernel {kernel.__name__!r}" in str(err), str(err)
    return str(err)


def _result(queue, buf, n=1):
    got = np.empty(n, buf.dtype)
    pk.memcpy(queue, got, buf)
    queue.wait()
    return got


def _zeros(queue, n=1, dtype=np.int32):
    buf = pk.Buffer(queue.device, n, dtype, queue=queue)
    pk.memset(queue, buf, 0)
    return buf


# ----------------------------------------------------------------------------- the lost update shows
@pk.kernel
def plain_count(acc, out):
    out[0] += 1


@pk.kernel
def plain_count_unchecked(acc, out):  # (a kernel of its own: launch plans are kept per kernel)
    out[0] += 1


@pk.kernel
def atomic_count(acc, out):
    acc.atomic_add(out, 0, 1)


def _plain_count(queue, seed, monkeypatch) -> int:
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", str(seed))
    out = _zeros(queue)
    pk.exec(queue, pk.WorkDiv(1, 256, 1), plain_count_unchecked, out)
    return int(_result(queue, out)[0])


def test_a_lost_update_shows_with_the_checks_off_and_one_seed_gives_one_result(queue, checked, monkeypatch):
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")
    counts = [_plain_count(queue, seed, monkeypatch) for seed in (1, 2, 3)]
    assert all(c < 256 for c in counts), counts  # threads switched between the load and the store
    assert len(set(counts)) > 1, counts  # other seeds, other schedules
    assert _plain_count(queue, 2, monkeypatch) == counts[1]  # the same seed, the same schedule
    out = _zeros(queue)
    pk.exec(queue, pk.WorkDiv(1, 256, 1), atomic_count, out)
    assert _result(queue, out)[0] == 256


def test_with_the_checks_on_the_lost_update_is_a_race(queue, checked):
    out = _zeros(queue)
    assert "device memory" in _fails(queue, "race", plain_count, pk.WorkDiv(1, 256, 1), out)


# ----------------------------------------------------------------------------- spins and deadlocks
@pk.kernel
def lane_waits_for_its_neighbour(acc, flag, out):
    t = acc.thread_idx
    if t == 0:  # a ping-pong with lane 1 of the same warp: each waits for the other in turn
        while acc.atomic_or(flag, 0, 0) != 1:
            pass
        acc.atomic_exch(flag, 0, 2)
    elif t == 1:
        acc.atomic_exch(flag, 0, 1)
        while acc.atomic_or(flag, 0, 0) != 2:
            pass
        out[0] = 7


@pk.kernel
def lane_waits_for_a_lane_at_a_barrier(acc, flag, out):
    t = acc.thread_idx
    if t == 0:
        while acc.atomic_or(flag, 0, 0) == 0:  # WAIT: lane 1 sets it only after the barrier
            pass
    acc.sync_block_threads()  # WAIT
    if t == 1:
        acc.atomic_exch(flag, 0, 1)
    out[0] = 7


@pk.kernel
def lane_waits_for_the_wrong_value(acc, flag, out):
    t = acc.thread_idx
    if t == 0:
        while acc.atomic_or(flag, 0, 0) != 2:  # WAIT: lane 1 stores 1
            pass
        out[0] = 7
    elif t == 1:
        acc.atomic_exch(flag, 0, 1)


def test_a_lane_waiting_for_a_lane_of_its_warp_finishes(queue, checked):
    flag, out = _zeros(queue), _zeros(queue)
    pk.exec(queue, pk.WorkDiv(1, 64, 1), lane_waits_for_its_neighbour, flag, out)
    assert _result(queue, out)[0] == 7


@pytest.mark.parametrize("kernel", [lane_waits_for_a_lane_at_a_barrier, lane_waits_for_the_wrong_value])
def test_a_wait_nothing_ends_is_a_deadlock_within_seconds(queue, checked, kernel):
    flag, out = _zeros(queue), _zeros(queue)
    start = time.monotonic()
    text = _fails(queue, "deadlock", kernel, pk.WorkDiv(1, 64, 1), flag, out)
    assert time.monotonic() - start < 20, text  # about a second once built
    assert all(w in text for w in _lines(kernel)), text
    assert "spins in the loop of" in text, text


@pk.kernel
def first_block_waits_for_the_last(acc, flag, data, out):
    b = acc.block_idx
    if acc.thread_idx == 0:
        if b == acc.grid_blocks - 1:
            data[0] = 42
            acc.mem_fence("grid")
            acc.atomic_exch(flag, 0, 1)
        elif b == 0:
            while acc.atomic_or(flag, 0, 0) == 0:  # the last block runs beside it, as on a GPU
                pass
            out[0] = data[0]


@pk.kernel
def blocks_wait_for_each_other(acc, flags):
    b = acc.block_idx
    if acc.thread_idx == 0:
        while acc.atomic_or(flags, 1 - b, 0) == 0:  # WAIT: the other block waits too
            pass
        acc.atomic_exch(flags, b, 1)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_block_waiting_for_a_later_block_finishes(queue, checked, monkeypatch, threads):
    monkeypatch.setenv("ALPYKA_EMULATE_THREADS", threads)
    flag, data, out = _zeros(queue), _zeros(queue), _zeros(queue)
    pk.exec(queue, pk.WorkDiv(6, 32, 1), first_block_waits_for_the_last, flag, data, out)
    assert _result(queue, out)[0] == 42


def test_blocks_waiting_for_each_other_are_a_deadlock(queue, checked, monkeypatch):
    monkeypatch.setenv("ALPYKA_EMULATE_THREADS", "1")
    flags = _zeros(queue, 2)
    text = _fails(queue, "deadlock", blocks_wait_for_each_other, pk.WorkDiv(2, 32, 1), flags)
    assert all(w in text for w in _lines(blocks_wait_for_each_other)), text


@pk.kernel
def counted_wait(acc, flag, out):
    tries = 0
    while acc.atomic_or(flag, 0, 0) == 0 and tries < 1000:  # gives up: no deadlock
        tries += 1
    out[acc.thread_idx] = tries


def test_a_wait_that_gives_up_is_no_deadlock(queue, checked):
    flag, out = _zeros(queue), _zeros(queue, 32)
    pk.exec(queue, pk.WorkDiv(1, 32, 1), counted_wait, flag, out)
    assert (_result(queue, out, 32) == 1000).all()


# ----------------------------------------------------------------------------- fences
@pk.kernel
def last_block_sum(acc, x, partial, count, out, n, fence):
    sh = acc.shared_array(64, np.float64)
    t = acc.thread_idx
    b = acc.block_idx
    s = 0.0
    for i in acc.uniform_elements(n):
        s += x[i]
    sh[t] = s
    acc.sync_block_threads()
    if t == 0:
        total = 0.0
        for k in range(acc.block_threads):
            total += sh[k]
        partial[b] = total
        if fence:
            acc.mem_fence("grid")
        ticket = acc.atomic_add(count, 0, 1)
        if ticket == acc.grid_blocks - 1:  # the last block sums the others' partial sums
            grand = 0.0
            for k in range(acc.grid_blocks):
                grand += partial[k]  # WAIT: stale without the other blocks' fences
            out[0] = grand


def test_the_last_block_reduction_needs_its_fence(queue, checked):
    n, blocks = 4096, 8
    x = np.arange(n, dtype=np.float64)
    bx = pk.Buffer(queue.device, n, np.float64, queue=queue)
    pk.memcpy(queue, bx, x)
    partial = pk.Buffer(queue.device, blocks, np.float64, queue=queue)
    out = _zeros(queue, 1, np.float64)
    div = pk.WorkDiv(blocks, 64, 1)
    count = _zeros(queue)
    text = _fails(queue, "race", last_block_sum, div, bx, partial, count, out, n, False)
    assert "no grid fence" in text and all(w in text for w in _lines(last_block_sum)), text
    count = _zeros(queue)
    pk.exec(queue, div, last_block_sum, bx, partial, count, out, n, True)
    assert _result(queue, out)[0] == x.sum()


@pk.kernel
def store_block_index(acc, buf):
    if acc.thread_idx == 0:
        buf[acc.block_idx] = acc.block_idx


@pk.kernel
def read_the_next_block(acc, buf, out):
    if acc.thread_idx == 0:
        out[acc.block_idx] = buf[(acc.block_idx + 1) % acc.grid_blocks]


def test_another_launch_sees_the_stores_without_a_fence(queue, checked):
    buf, out = pk.Buffer(queue.device, 8, np.int32, queue=queue), _zeros(queue, 8)
    pk.exec(queue, pk.WorkDiv(8, 32, 1), store_block_index, buf)  # the kernel's end publishes them
    pk.exec(queue, pk.WorkDiv(8, 32, 1), read_the_next_block, buf, out)
    np.testing.assert_array_equal(_result(queue, out, 8), (np.arange(8) + 1) % 8)
