"""The GPU emulator's checks (ALPYKA_EMULATE_CHECKS, on by default): a launch that would be wrong
or undefined on a GPU fails with pk.KernelCheckError of the right kind, naming the kernel and the
Python line, at the next wait() as the cause of a pk.AsyncError; the queue stays usable; the
corrected kernel passes; ALPYKA_EMULATE_CHECKS=0 turns the checks off."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import portable as pk

pytestmark = pytest.mark.hip_differs  # the emulator's own tests: its HIP personality too
emulated = pytest.mark.alpyka_backends("cuda", "rocm")

N = 64  # threads per block


# ----------------------------------------------------------------------------- wrong kernels
@pk.kernel
def divergent_barrier(acc, out, z):
    t = acc.thread_idx
    if t < 32:
        acc.sync_block_threads()  # CHECK
    else:
        acc.sync_block_threads()
    out[acc.block_idx * N + t] = t


@pk.kernel
def skipped_barrier(acc, out, z):
    t = acc.thread_idx
    if t < 32:
        acc.sync_block_threads()  # CHECK
    out[acc.block_idx * N + t] = t


@pk.kernel
def shfl_from_absent_lane(acc, out, z):
    t = acc.thread_idx
    v = acc.warp_shfl_down(t, 16)  # CHECK (a block of 48: the second warp has 16 lanes)
    out[acc.block_idx * N + t] = v


@pk.kernel
def shfl_after_a_lane_left(acc, out, z):
    t = acc.thread_idx
    v = t
    for _k in range(t % 4 + 1):  # uneven trips: lanes leave the loop one after another
        v = acc.warp_shfl_xor(v, 1)  # CHECK
    out[acc.block_idx * N + t] = v


@pk.kernel
def warp_op_at_two_sites(acc, out, z):
    t = acc.thread_idx
    if t % 2 == 0:
        v = acc.warp_ballot(t > 4)  # CHECK (a call site of its own per branch: HIP's lanes never meet)
    else:
        v = acc.warp_ballot(t > 4)  # CHECK
    out[acc.block_idx * N + t] = np.int64(v)


@pk.kernel
def different_warp_ops(acc, out, z):
    t = acc.thread_idx
    v = 0
    if t < 8:
        v = 1 if acc.warp_any(t > 4) else 0  # CHECK
    else:
        v = 1 if acc.warp_all(t > 4) else 0  # CHECK
    out[acc.block_idx * N + t] = v


@pk.kernel
def warp_op_while_lanes_at_a_barrier(acc, out, z):
    t = acc.thread_idx
    v = 0
    if t % 32 < 16:
        v = 1 if acc.warp_any(t > 4) else 0  # CHECK
    acc.sync_block_threads()  # CHECK
    out[acc.block_idx * N + t] = v


@pk.kernel
def shfl_from_a_returned_lane(acc, out, z):
    t = acc.thread_idx
    out[acc.block_idx * N + t] = t
    if t % acc.warp_size >= 16:
        return
    out[acc.block_idx * N + t] = acc.warp_shfl(t, 20)  # CHECK (lane 20 returned)


@pk.kernel
def mask_without_the_caller(acc, out, z):
    t = acc.thread_idx
    v = acc.warp_ballot_mask(np.uint64(1), t > 4)  # CHECK (only lane 0 is named; every lane calls)
    out[acc.block_idx * N + t] = np.int64(v)


@pk.kernel
def shfl_outside_the_mask(acc, out, z):
    t = acc.thread_idx
    out[acc.block_idx * N + t] = t
    if t % acc.warp_size < 16:
        out[acc.block_idx * N + t] = acc.warp_shfl_mask(np.uint64(0xFFFF), t, 20)  # CHECK (lane 20: not named)


@pk.kernel
def write_write_race(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = 0
    acc.sync_block_threads()
    sh[0] = t  # CHECK
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[0]


@pk.kernel
def write_read_race(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    sh[t] = t + 1  # CHECK (either access is the race's first)
    out[acc.block_idx * N + t] = sh[(t + 1) % N]  # CHECK


@pk.kernel
def warp_synchronous_sum(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    if t < 32:  # lockstep lanes assumed: no barrier between the steps
        off = 16
        while off > 0:
            sh[t] += sh[t + off]  # CHECK
            off //= 2
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[0]


@pk.kernel
def never_written(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    out[acc.block_idx * N + t] = sh[t]  # CHECK


@pk.kernel
def written_by_block_0_only(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    if acc.block_idx == 0:
        sh[t] = t
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[t]  # CHECK


@pk.kernel
def shared_out_of_bounds(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t + 1] = t  # CHECK
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = 1


@pk.kernel
def global_out_of_bounds(acc, out, z):
    t = acc.thread_idx
    out[acc.block_idx * N + t + 1] = t  # CHECK (the last thread writes past the end)


# ----------------------------------------------------------------------------- corrected
@pk.kernel
def uniform_barrier(acc, out, z):
    t = acc.thread_idx
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = t


@pk.kernel
def shfl_within_the_warp(acc, out, z):
    t = acc.thread_idx
    lane = t % acc.warp_size
    lanes = min(acc.warp_size, acc.block_threads - (t - lane))
    v = acc.warp_shfl(t, lane + 16 if lane + 16 < lanes else lane)
    out[acc.block_idx * N + t] = v


@pk.kernel
def shfl_converged(acc, out, z):
    t = acc.thread_idx
    v = t
    for k in range(4):
        w = acc.warp_shfl_xor(v, 1)
        if k < t % 4 + 1:
            v = w
    out[acc.block_idx * N + t] = v


@pk.kernel
def warp_op_at_one_site(acc, out, z):
    t = acc.thread_idx
    v = acc.warp_ballot(t > 4)
    out[acc.block_idx * N + t] = np.int64(v)


@pk.kernel
def shfl_among_the_lanes_left(acc, out, z):
    t = acc.thread_idx
    out[acc.block_idx * N + t] = t
    if t % acc.warp_size >= 16:
        return
    out[acc.block_idx * N + t] = acc.warp_shfl(t, 10)  # alpaka's rule: lanes that returned are left out


@pk.kernel
def one_writer(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = 0
    acc.sync_block_threads()
    if t == 0:
        sh[0] = 7
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[0]


@pk.kernel
def write_barrier_read(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    v = sh[(t + 1) % N]
    acc.sync_block_threads()
    sh[t] = v
    out[acc.block_idx * N + t] = v


@pk.kernel
def block_synchronous_sum(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    off = 16
    while off > 0:
        v = sh[t + off] if t < off else 0
        acc.sync_block_threads()
        if t < off:
            sh[t] += v
        acc.sync_block_threads()
        off //= 2
    out[acc.block_idx * N + t] = sh[0]


@pk.kernel
def written_by_every_block(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[t]


@pk.kernel
def shared_in_bounds(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = t
    acc.sync_block_threads()
    out[acc.block_idx * N + t] = sh[N - 1 - t]


@pk.kernel
def integer_division_by_zero(acc, out, z):
    t = acc.thread_idx
    out[acc.block_idx * N + t] = t // z + t % z + 5


def _within_the_warp(warp_size: int) -> np.ndarray:
    """What shfl_within_the_warp gives in a block of 48: lane + 16 where the warp has it, else its own."""
    t = np.arange(48)
    lane = t % warp_size
    lanes = np.minimum(warp_size, 48 - (t - lane))
    return np.where(lane + 16 < lanes, t + 16, t)


def _ballot_above_4(warp_size: int) -> np.ndarray:
    """What warp_op_at_one_site gives in a block of N: the warp's ballot of t > 4 (an int64's bits)."""
    t = np.arange(N)
    bits = [sum(1 << (k - w) for k in range(w, min(w + warp_size, N)) if k > 4) for w in t - t % warp_size]
    return np.array([b - (1 << 64) if b >= 1 << 63 else b for b in bits], np.int64)


def _lanes_left(warp_size: int) -> np.ndarray:
    """What shfl_among_the_lanes_left gives: lanes below 16 read lane 10 of their warp."""
    t = np.arange(N)
    return np.where(t % warp_size < 16, t - t % warp_size + 10, t)


def _converged() -> np.ndarray:
    """What shfl_converged gives: every lane swaps with its pair each step, keeping t % 4 + 1 of them."""
    v = np.arange(N)
    for k in range(4):
        w = v[np.arange(N) ^ 1]
        v = np.where(k < np.arange(N) % 4 + 1, w, v)
    return v


# (wrong kernel, kind, threads per block, blocks, the corrected kernel, its values per block)
CASES = {
    "divergent_barrier": (divergent_barrier, "barrier", N, 1, uniform_barrier, np.arange(N)),
    "skipped_barrier": (skipped_barrier, "barrier", N, 1, uniform_barrier, np.arange(N)),
    "shfl_absent_lane": (shfl_from_absent_lane, "warp", 48, 1, shfl_within_the_warp, _within_the_warp),
    "shfl_lane_left": (shfl_after_a_lane_left, "warp", N, 1, shfl_converged, _converged()),
    "warp_two_sites": (warp_op_at_two_sites, "warp", N, 1, warp_op_at_one_site, _ballot_above_4),
    "warp_ops_differ": (different_warp_ops, "warp", N, 1, warp_op_at_one_site, _ballot_above_4),
    "warp_vs_barrier": (warp_op_while_lanes_at_a_barrier, "warp", N, 1, shfl_among_the_lanes_left, _lanes_left),
    "shfl_returned_lane": (shfl_from_a_returned_lane, "warp", N, 1, shfl_among_the_lanes_left, _lanes_left),
    "mask_without_caller": (mask_without_the_caller, "warp", N, 1, warp_op_at_one_site, _ballot_above_4),
    "shfl_outside_mask": (shfl_outside_the_mask, "warp", N, 1, shfl_among_the_lanes_left, _lanes_left),
    "write_write": (write_write_race, "race", N, 1, one_writer, np.full(N, 7)),
    "write_read": (write_read_race, "race", N, 1, write_barrier_read, (np.arange(N) + 1) % N),
    "warp_synchronous": (warp_synchronous_sum, "race", N, 1, block_synchronous_sum, np.full(N, sum(range(32)))),
    "never_written": (never_written, "uninitialized", N, 1, written_by_every_block, np.arange(N)),
    "previous_block": (written_by_block_0_only, "uninitialized", N, 2, written_by_every_block, np.arange(N)),
    "shared_bounds": (shared_out_of_bounds, "bounds", N, 1, shared_in_bounds, np.arange(N)[::-1]),
    "global_bounds": (global_out_of_bounds, "bounds", N, 1, uniform_barrier, np.arange(N)),
}


def _check_lines(kernel) -> list[int]:
    """The lines of ``kernel`` marked ``# CHECK``: where the report may point."""
    lines, first = inspect.getsourcelines(kernel.py_function)
    return [first + i for i, text in enumerate(lines) if "# CHECK" in text]


def _launch(queue, device, kernel, threads, blocks):
    out = pk.Buffer(device, blocks * N, np.int64, queue=queue)
    pk.memset(queue, out, 0)
    pk.exec(queue, pk.WorkDiv(blocks, threads, 1), kernel, out, np.int64(0))
    got = np.empty(blocks * N, np.int64)
    pk.memcpy(queue, got, out)
    queue.wait()
    return got


@emulated
@pytest.mark.parametrize("case", list(CASES))
def test_a_kernel_wrong_on_a_gpu_is_a_check_error_and_its_fix_passes(device, queue, checked, monkeypatch, case):
    wrong, kind, threads, blocks, fixed, want = CASES[case]
    monkeypatch.setenv("ALPYKA_EMULATE_THREADS", "1")  # one OS thread: the blocks share its shared memory
    with pytest.raises(pk.AsyncError) as info:
        _launch(queue, device, wrong, threads, blocks)
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and isinstance(err, pk.AlpykaError), repr(err)
    assert err.kind == kind, str(err)
    where = [f"{os.path.basename(__file__)}:{line}" for line in _check_lines(wrong)]
    assert f"kernel {wrong.__name__!r}" in str(err) and any(w in str(err) for w in where), str(err)
    if kind == "bounds":
        assert isinstance(err, pk.KernelIndexError)  # ALPYKA_DEBUG's error, now the "bounds" kind
    got = _launch(queue, device, fixed, threads, blocks)  # the queue stays usable
    if callable(want):
        want = want(64 if device.backend_name == "rocm" else 32)  # HIP's wavefront, CUDA's warp
    for b in range(blocks):
        np.testing.assert_array_equal(got[b * N : b * N + threads], np.asarray(want)[:threads])


@emulated
def test_integer_division_by_zero_does_not_crash(device, queue, checked):
    got = _launch(queue, device, integer_division_by_zero, N, 1)
    np.testing.assert_array_equal(got, np.full(N, 5))  # numpy's // 0 and % 0 on integers: 0


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import portable as pk
    sys.path.insert(0, {folder!r})
    from test_emulator_checks import N, never_written, write_read_race, skipped_barrier
    q = pk.Queue(pk.device({backend!r}))
    out = pk.Buffer(q.device, N, np.int64, queue=q)
    for k in (never_written, write_read_race, skipped_barrier):
        try:
            pk.exec(q, pk.WorkDiv(1, N, 1), k, out, np.int64(0))
            q.wait()
            print(k.__name__, "ran")
        except pk.AsyncError as exc:
            print(k.__name__, "checked", getattr(exc.__cause__, "kind", None))
""")


@emulated
@pytest.mark.parametrize("setting", ["0", "1"])
def test_the_switch_turns_the_checks_off(backend, checked, setting):
    env = {**os.environ, "ALPYKA_EMULATE": backend, "ALPYKA_EMULATE_CHECKS": setting}
    code = CHILD.format(folder=os.path.dirname(__file__), backend=backend)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split()
    if setting == "0":
        assert lines == ["never_written", "ran", "write_read_race", "ran", "skipped_barrier", "ran"], done.stdout
    else:
        assert lines == [
            "never_written",
            "checked",
            "uninitialized",
            "write_read_race",
            "checked",
            "race",
            "skipped_barrier",
            "checked",
            "barrier",
        ], done.stdout


# ----------------------------------------------------------------------------- more access orders
# Each race rule of the shadow (cuda_on_cpu.h's sh_read/sh_write/sh_atomic) seen alone: thread 0
# makes the first access, a warp operation (a point where the emulator switches threads), thread 1
# makes the same access, another warp operation, then thread 0, which made the first access
# itself, makes the last: only the rule that remembers a second thread (rd2, at2) can catch it.
@pk.device_function
def _switch(acc, t):
    """A warp operation the compiler keeps: every lane waits there for the others."""
    return acc.warp_any(t % 2 == 0)


@pk.kernel
def two_atomics_then_a_read(acc, out, z):
    sh = acc.shared_array(1, np.int64)
    t = acc.thread_idx
    if t == 0:
        sh[0] = 0
    acc.sync_block_threads()
    if t == 0:
        acc.atomic_add(sh, 0, 1, hierarchy="threads")
    s1 = _switch(acc, t)
    if t == 1:
        acc.atomic_add(sh, 0, 1, hierarchy="threads")
    s2 = _switch(acc, t)
    if t == 0 and s1 and s2:
        out[0] = sh[0]  # CHECK (thread 1 updated it too)


@pk.kernel
def two_atomics_then_a_write(acc, out, z):
    sh = acc.shared_array(1, np.int64)
    t = acc.thread_idx
    if t == 0:
        sh[0] = 0
    acc.sync_block_threads()
    if t == 0:
        acc.atomic_add(sh, 0, 1, hierarchy="threads")
    s1 = _switch(acc, t)
    if t == 1:
        acc.atomic_add(sh, 0, 1, hierarchy="threads")
    s2 = _switch(acc, t)
    if t == 0 and s1 and s2:
        sh[0] = 7  # CHECK
    out[t] = t


@pk.kernel
def two_reads_then_an_atomic(acc, out, z):
    sh = acc.shared_array(1, np.int64)
    t = acc.thread_idx
    if t == 0:
        sh[0] = 0
    acc.sync_block_threads()
    v = sh[0] if t == 0 else 0
    s1 = _switch(acc, t)
    if t == 1:
        v = sh[0]
    s2 = _switch(acc, t)
    if t == 0 and s1 and s2:
        acc.atomic_add(sh, 0, 1, hierarchy="threads")  # CHECK
    out[t] = v


@pk.kernel
def two_reads_then_a_write(acc, out, z):
    sh = acc.shared_array(1, np.int64)
    t = acc.thread_idx
    if t == 0:
        sh[0] = 0
    acc.sync_block_threads()
    v = sh[0] if t == 0 else 0
    s1 = _switch(acc, t)
    if t == 1:
        v = sh[0]
    s2 = _switch(acc, t)
    if t == 0 and s1 and s2:
        sh[0] = 5  # CHECK
    out[t] = v


@pk.kernel
def an_atomic_on_unwritten_shared(acc, out, z):
    sh = acc.shared_array(1, np.int64)
    acc.atomic_add(sh, 0, 1, hierarchy="threads")  # CHECK
    acc.sync_block_threads()
    out[acc.thread_idx] = sh[0]


@pk.kernel
def own_accesses_only(acc, out, z):
    sh = acc.shared_array(N, np.int64)
    t = acc.thread_idx
    sh[t] = 0
    acc.atomic_add(sh, t, 1, hierarchy="threads")
    v = sh[t]
    if acc.warp_any(t % 2 == 0):  # true in every warp
        sh[t] = v + 1
    acc.sync_block_threads()
    out[t] = sh[t]


ORDERS = {
    "two_atomics_then_a_read": (two_atomics_then_a_read, "race"),
    "two_atomics_then_a_write": (two_atomics_then_a_write, "race"),
    "two_reads_then_an_atomic": (two_reads_then_an_atomic, "race"),
    "two_reads_then_a_write": (two_reads_then_a_write, "race"),
    "an_atomic_on_unwritten_shared": (an_atomic_on_unwritten_shared, "uninitialized"),
}


@emulated
@pytest.mark.parametrize("case", list(ORDERS))
@pytest.mark.parametrize("seed", ["1", "7"])
def test_each_rule_of_the_shadow_catches_its_order(device, queue, checked, monkeypatch, case, seed):
    wrong, kind = ORDERS[case]
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", seed)  # the order of the first accesses does not matter
    with pytest.raises(pk.AsyncError) as info:
        _launch(queue, device, wrong, N, 1)
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == kind, repr(err)
    assert any(f"{os.path.basename(__file__)}:{line}" in str(err) for line in _check_lines(wrong)), str(err)
    got = _launch(queue, device, own_accesses_only, N, 1)  # a thread's own accesses never race
    np.testing.assert_array_equal(got, np.full(N, 2))
