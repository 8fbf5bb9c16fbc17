"""The CPU backends run a 1D kernel that is one ``uniform_elements`` loop as one flat element
loop (portable/compiler/_grid_loop.py, a compiler pass): which kernels qualify, and that results stay those of alpaka's
per-thread semantics on every backend, for single- and multi-wave grids and uneven sizes."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.compiler.passes import flat_grid_loop

CASES = [(1, 1), (3, 1), (4, 5), (7, 3), (16, 2), (64, 1)]  # (blocks, elements)
SIZES = [1, 10, 37, 257]


@pk.device_function
def _twice(v):
    return v + v


@pk.kernel
def flat_axpy(acc, out, x, y, a, n):
    m = n - 1  # a prelude assignment, the same for every thread
    for i in acc.uniform_elements(n):
        if i == m:
            out[i] = -1.0
            continue
        s = 0.0
        for k in range(3):
            s += x[i] * k
        out[i] = a * _twice(x[i]) + y[i] + s + acc.grid_blocks * 0


@pk.kernel
def flat_first(acc, out, first, n):
    for i in acc.uniform_elements(first, n):
        out[i] = i * 2 + 1


@pk.kernel
def running_sum(acc, out, x, n):
    s = 0.0  # carried from one element to the next of the same thread: must stay per thread
    for i in acc.uniform_elements(n):
        s += x[i]
        out[i] = s


@pk.kernel
def owner_block(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = acc.block_idx


@pk.kernel
def stops_early(acc, out, limit, n):
    for i in acc.uniform_elements(n):
        if i >= limit:
            break
        out[i] = 1


@pk.kernel
def once_then_loop(acc, out, counter, n):
    if acc.once_per_block():
        acc.atomic_add(counter, 0, 1)
    for i in acc.uniform_elements(n):
        out[i] = 1


def _thread_indices(wd, n, first=0):
    """alpaka's uniform_elements: the indices of each global thread, in its order."""
    e, gt = wd.elements[0], wd.blocks[0] * wd.threads[0]
    for t in range(gt):
        idx = []
        base = first + t * e
        while base < n:
            idx += list(range(base, min(base + e, n)))
            base += gt * e
        yield idx


def _ir(kernel, *args):
    return kernel.ir(kernel.signature(args), 1, False)


def test_which_kernels_run_as_one_flat_loop():
    x = np.zeros(4, np.float32)
    assert flat_grid_loop(_ir(flat_axpy, x, x, x, np.float32(2), 4)) is not None
    assert flat_grid_loop(_ir(flat_first, x, 1, 4)) is not None
    assert flat_grid_loop(_ir(running_sum, x, x, 4)) is None, "a local carried between elements"
    assert flat_grid_loop(_ir(owner_block, np.zeros(4, np.int64), 4)) is None, "reads block_idx"
    assert flat_grid_loop(_ir(stops_early, x, 2, 4)) is None, "break ends one thread only"
    assert flat_grid_loop(_ir(once_then_loop, x, np.zeros(1, np.int32), 4)) is None, "work per block"


def test_flat_loop_results(device, queue):
    rng = np.random.default_rng()
    for blocks, elements in CASES:
        wd = pk.make_workdiv(device, blocks, elements)
        for n in SIZES:
            x = rng.standard_normal(n + 2).astype(np.float32)
            y = rng.standard_normal(n + 2).astype(np.float32)
            out = upload(queue, np.full(n + 2, 7.0, np.float32))
            pk.exec(queue, wd, flat_axpy, out, upload(queue, x), upload(queue, y), np.float32(1.5), n)
            want = (np.float32(1.5) * (x + x) + y + 3 * x).astype(np.float32)
            want[n - 1] = -1.0
            want[n:] = 7.0
            np.testing.assert_allclose(download(queue, out), want, rtol=1e-5, atol=1e-5, err_msg=f"{wd} n={n}")


def test_flat_loop_with_first(device, queue):
    for blocks, elements in CASES:
        wd = pk.make_workdiv(device, blocks, elements)
        for first, n in [(0, 10), (3, 10), (5, 37), (9, 9), (2, 300)]:
            out = upload(queue, np.full(n + 2, -1, np.int64))
            pk.exec(queue, wd, flat_first, out, first, n)
            got = download(queue, out)
            want = np.full(n + 2, -1, np.int64)
            want[first:n] = np.arange(first, n) * 2 + 1
            np.testing.assert_array_equal(got, want, err_msg=f"{wd} first={first} n={n}")


def test_state_carried_between_elements_stays_per_thread(device, queue):
    rng = np.random.default_rng()
    for blocks, elements in CASES:
        wd = pk.make_workdiv(device, blocks, elements)
        for n in SIZES:
            x = rng.integers(-5, 5, n).astype(np.float64)
            out = upload(queue, np.zeros(n, np.float64))
            pk.exec(queue, wd, running_sum, out, upload(queue, x), n)
            want = np.zeros(n)
            for idx in _thread_indices(wd, n):
                if idx:
                    want[idx] = np.cumsum(x[idx])
            np.testing.assert_allclose(download(queue, out), want, err_msg=f"{wd} n={n}")


@pytest.mark.parametrize("blocks, elements", [(5, 3), (64, 1)])
def test_break_and_block_idx_keep_per_thread_semantics(device, queue, blocks, elements):
    wd = pk.make_workdiv(device, blocks, elements)
    n, limit = 200, 77
    out = upload(queue, np.zeros(n, np.int32))
    pk.exec(queue, wd, stops_early, out, limit, n)
    want = np.zeros(n, np.int32)
    for idx in _thread_indices(wd, n):
        for i in idx:
            if i >= limit:
                break
            want[i] = 1
    np.testing.assert_array_equal(download(queue, out), want)
    owner = upload(queue, np.full(n, -1, np.int64))
    pk.exec(queue, wd, owner_block, owner, n)
    want_o = np.full(n, -1, np.int64)
    for t, idx in enumerate(_thread_indices(wd, n)):
        want_o[idx] = t // wd.threads[0]
    np.testing.assert_array_equal(download(queue, owner), want_o)
