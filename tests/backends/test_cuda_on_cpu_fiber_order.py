"""The cupy stand-in's order of a block's threads in a kernel that synchronises (fiber mode,
cuda_on_cpu.h): between two barriers the threads run in a seeded random order, drawn anew after
each barrier, so a read of a neighbour's shared word without a barrier goes wrong in either
direction, as it may on a GPU. An order that runs threads in index order (either way), or the
same order after every barrier, would let such a kernel pass here."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from backends.emulator import fake_cupy_kernels

pytestmark = pytest.mark.hip_differs  # the stand-in's own tests: its HIP personality too
standin = pytest.mark.alpyka_backends("cuda", "rocm")

THREADS = 128
STALE = -1.0  # what every shared word holds before the first barrier


@pytest.fixture
def on_the_standin(backend, monkeypatch):
    if backend not in fake_cupy_kernels.served_here():
        pytest.skip(f"{backend} is not the stand-in here (a real GPU does not promise any order)")
    if fake_cupy_kernels.executor_name() != "cpp":
        pytest.skip("the stand-in runs OpenCL twins in this run (ALPYKA_EMULATE_EXEC=opencl)")
    # the order shows in what a racy kernel reads; with the checks on (the default) its first race
    # is reported instead (tests/backends/test_emulator_checks.py)
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")


@pk.kernel
def shifts_between_barriers(acc, left, right, x, n):
    """Two phases after a barrier: each thread writes its shared word, then reads both
    neighbours' words with no barrier between (``left``/``right`` rows 0 and 1, one per phase)."""
    sh = acc.shared_array(THREADS, np.float64)
    t = acc.thread_idx
    nt = acc.block_threads
    base = acc.block_idx * nt
    sh[t] = -1.0
    acc.sync_block_threads()
    for phase in range(2):
        sh[t] = x[phase, base + t]
        if t > 0:
            left[phase, base + t] = sh[t - 1]
        if t + 1 < nt:
            right[phase, base + t] = sh[t + 1]
        acc.sync_block_threads()


def _run(queue, device, blocks):
    """``(x, left, right)``: what each thread wrote and read in each phase."""
    n = blocks * THREADS
    x = np.arange(1, 2 * n + 1, dtype=np.float64).reshape(2, n)
    xb = pk.Buffer(device, x.shape, np.float64, queue=queue)
    pk.memcpy(queue, xb, x)
    outs = []
    for _ in range(2):
        b = pk.Buffer(device, x.shape, np.float64, queue=queue)
        pk.memset(queue, b, 0)
        outs.append(b)
    pk.exec(queue, pk.WorkDiv(blocks, THREADS, 1), shifts_between_barriers, *outs, xb, n)
    left, right = (np.empty(x.shape) for _ in outs)
    pk.memcpy(queue, left, outs[0])
    pk.memcpy(queue, right, outs[1])
    queue.wait()
    return x, left, right


def _stale(x, got, shift):
    """Per phase, per thread with a neighbour at ``shift``: True where the read missed the
    neighbour's write of that phase (and saw the word as it was before)."""
    n = x.shape[1]
    t = np.arange(n) % THREADS
    has = (t + shift >= 0) & (t + shift < THREADS)
    idx = np.flatnonzero(has)
    fresh = x[:, idx + shift]
    before = np.vstack([np.full(idx.size, STALE), x[0, idx + shift]])  # what the word held earlier
    read = got[:, idx]
    assert ((read == fresh) | (read == before)).all(), "a read saw neither the new word nor the old one"
    return read == before


@standin
def test_a_barrier_less_shift_goes_wrong_in_both_directions(device, queue, on_the_standin, monkeypatch):
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", "3")
    x, left, right = _run(queue, device, 2)
    stale_left, stale_right = _stale(x, left, -1), _stale(x, right, +1)
    reads = stale_left.shape[1]
    for phase in range(2):
        # a random order misses about half of the neighbours' writes either way; index order
        # (or its reverse) would miss none of one side
        assert stale_left[phase].sum() > reads // 4, f"phase {phase}: left neighbours always written first"
        assert stale_right[phase].sum() > reads // 4, f"phase {phase}: right neighbours always written first"
    assert not np.array_equal(stale_left[0], stale_left[1]), "the same order after the barrier as before it"


@standin
def test_the_order_follows_the_seed(device, queue, on_the_standin, monkeypatch):
    runs = {}
    for seed in ("3", "3", "4"):
        monkeypatch.setenv("ALPYKA_EMULATE_SEED", seed)
        runs.setdefault(seed, []).append(_run(queue, device, 1)[1])
    np.testing.assert_array_equal(runs["3"][0], runs["3"][1])  # a failure reproduces with its seed
    assert not np.array_equal(runs["3"][0], runs["4"][0]), "another seed gave the same order"
