"""Device functions inlined on the numba backends (portable/compiler/_inline.py) and atomics at their cost
(backends/_numba_atomics.py): the same results on every backend, plain operations where nothing
can contend on the CPU backends, exact counts where something can."""

import time

import numpy as np

import portable as pk
from alpyka_testing.kernels import download, upload
from backends._numba_emit import emit_numba


def _source(kernel, *args, serial=True, ndim=1):
    return emit_numba(kernel.ir(kernel.signature(args), ndim, False), serial=serial).source


# ----------------------------------------------------------------------------- inlining
@pk.device_function
def _total(a, scale):
    s = 0.0
    for i in range(a.shape[0]):  # the extent of an array parameter
        s += a[i] * scale
    return s


@pk.device_function
def _first_over(a, limit):
    """The first index whose value exceeds ``limit`` (returns inside two loops), -1 if none."""
    for i in range(a.shape[0]):
        k = 0
        while k < 3:
            if a[i] + k > limit:
                return i
            k += 1
    return -1


@pk.device_function
def _clamp(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@pk.device_function
def _bump(a, i):
    """Increments ``a[i]`` and returns the new value (a device function with a side effect)."""
    a[i] = a[i] + 1.0
    return a[i]


@pk.device_function
def _positive(v):
    return v > 0.0


@pk.device_function
def _sum_clamped(acc, a, lo, hi):
    s = 0.0
    for i in range(a.shape[0]):
        s += _clamp(a[i], lo, hi)  # nested device functions
    return s + acc.block_idx * 0


@pk.kernel
def uses_functions(acc, out, x, n):
    for t in acc.uniform_elements(n):
        out[t, 0] = _total(x, 2.0)
        out[t, 1] = _first_over(x, 3.5 + t)
        out[t, 2] = _sum_clamped(acc, x, -1.0, 2.0)
        out[t, 3] = _clamp(x[t], 0.0, 1.0) if t % 2 == 0 else _clamp(-x[t], 0.0, 1.0)
        k = 0
        while k < 5 and _positive(x[t] - k):  # a call in a while condition and a lazy operand
            k += 1
        out[t, 4] = k


def _expected(x):
    n = len(x)
    out = np.zeros((n, 5))
    for t in range(n):
        out[t, 0] = (x * 2.0).sum()
        hits = [i for i in range(len(x)) if any(x[i] + k > 3.5 + t for k in range(3))]
        out[t, 1] = hits[0] if hits else -1
        out[t, 2] = np.clip(x, -1.0, 2.0).sum()
        out[t, 3] = np.clip(x[t] if t % 2 == 0 else -x[t], 0.0, 1.0)
        k = 0
        while k < 5 and x[t] - k > 0:
            k += 1
        out[t, 4] = k
    return out


def test_device_functions_give_the_same_results_on_every_backend(device, queue):
    x = np.array([0.5, -2.0, 3.0, 1.5, 4.25, -0.5, 2.0])
    n = len(x)
    for blocks, elements in [(1, 1), (3, 2), (7, 1)]:
        out = upload(queue, np.zeros((n, 5)))
        pk.exec(queue, pk.make_workdiv(device, blocks, elements), uses_functions, out, upload(queue, x), n)
        np.testing.assert_allclose(download(queue, out), _expected(x), err_msg=f"{blocks}x{elements}")


def test_the_numba_module_has_no_device_function_left():
    src = _source(uses_functions, np.zeros((4, 5)), np.zeros(4), 4)
    assert "df_" not in src.replace("_df_", ""), src  # no function defined or called, only renamed locals
    assert "in range(0, a1_e0, 1)" in src  # _total's a.shape[0]: the extent of the caller's array


@pk.kernel
def call_order(acc, out, a):
    if acc.once_per_grid():
        out[0] = a[0] + _bump(a, 0)  # a[0] is read before the call changes it
        out[1] = _bump(a, 1) + a[1]  # and after
        out[2] = a[2] if a[2] > 10.0 else _bump(a, 2)


def test_operands_keep_their_order_around_an_inlined_call():
    """Python's left-to-right order on the CPU backends (C leaves it unspecified)."""
    q = pk.Queue(pk.device("cpu_serial"))
    a = np.array([1.0, 5.0, 2.0])
    out = np.zeros(3)
    pk.exec(q, pk.WorkDiv(1, 1, 1), call_order, out, a)
    q.wait()
    np.testing.assert_array_equal(out, [1.0 + 2.0, 6.0 + 6.0, 3.0])
    np.testing.assert_array_equal(a, [2.0, 6.0, 3.0])


@pk.kernel
def philox_fill(acc, out, per, seed):
    for t in acc.uniform_elements(out.shape[0] // per):
        eng = acc.rand_engine(seed, t)
        for k in range(per):
            out[t * per + k] = acc.rand_uniform(eng, np.float32)


def test_philox_in_a_kernel_keeps_up_with_numpy():
    """Issue 33's target is numpy's speed; the limit here is generous (3x) for a busy machine.
    With a function call per draw (before inlining) a draw cost 15x numpy's."""
    per = 1 << 14
    out = np.empty(64 * per, np.float32)
    ref = np.empty_like(out)
    q = pk.Queue(pk.device("cpu_serial"))
    wd = pk.WorkDiv(64, 1, 1)
    gen = np.random.Generator(np.random.Philox(1))
    pk.exec(q, wd, philox_fill, out, per, 3)
    q.wait()
    np.testing.assert_array_equal(out[per : 2 * per], pk.rand.uniform(3, 1, per, np.float32))
    best = {"kernel": np.inf, "numpy": np.inf}
    for _ in range(7):  # interleaved: other load hits both alike
        t0 = time.perf_counter()
        pk.exec(q, wd, philox_fill, out, per, 3)
        q.wait()
        t1 = time.perf_counter()
        gen.random(out=ref, dtype=np.float32)
        t2 = time.perf_counter()
        best["kernel"] = min(best["kernel"], t1 - t0)
        best["numpy"] = min(best["numpy"], t2 - t1)
    assert best["kernel"] < 3 * best["numpy"], best


# ----------------------------------------------------------------------------- atomics
@pk.kernel
def shared_sequence(acc, a, f, old, fold, hierarchy_block_out):
    """atomic_sequence's operations on shared memory (hierarchy "threads" and "block")."""
    s = acc.shared_array(8, np.int32)
    g = acc.shared_array(4, np.float32)
    if acc.once_per_block():
        for i in range(8):
            s[i] = a[i]
        for i in range(4):
            g[i] = f[i]
        old[0] = acc.atomic_add(s, 0, 5, hierarchy="threads")
        old[1] = acc.atomic_sub(s, 0, 2, hierarchy="block")
        old[2] = acc.atomic_min(s, 1, 3)
        old[3] = acc.atomic_max(s, 1, 10, hierarchy="threads")
        old[4] = acc.atomic_exch(s, 2, 42, hierarchy="threads")
        old[5] = acc.atomic_cas(s, 3, 7, 8)
        old[6] = acc.atomic_cas(s, 3, 7, 9)
        old[7] = acc.atomic_and(s, 4, 6, hierarchy="threads")
        old[8] = acc.atomic_or(s, 4, 9, hierarchy="block")
        old[9] = acc.atomic_xor(s, 4, 5, hierarchy="threads")
        old[10] = acc.atomic_inc(s, 5, 2, hierarchy="threads")
        old[11] = acc.atomic_inc(s, 5, 2, hierarchy="threads")
        old[12] = acc.atomic_inc(s, 5, 2, hierarchy="threads")
        old[13] = acc.atomic_dec(s, 6, 3, hierarchy="threads")
        old[14] = acc.atomic_dec(s, 6, 3, hierarchy="threads")
        old[15] = acc.atomic_dec(s, 7, 3, hierarchy="block")
        fold[0] = acc.atomic_add(g, 0, 1.5, hierarchy="threads")
        fold[1] = acc.atomic_sub(g, 0, 0.25, hierarchy="threads")
        fold[2] = acc.atomic_min(g, 1, -1.0, hierarchy="threads")
        fold[3] = acc.atomic_max(g, 1, 2.0, hierarchy="threads")
        fold[4] = acc.atomic_exch(g, 2, 7.0, hierarchy="threads")
        fold[5] = acc.atomic_cas(g, 3, 0.0, 3.0, hierarchy="threads")
        for i in range(8):
            a[i] = s[i]
        for i in range(4):
            f[i] = g[i]
        hierarchy_block_out[0] = acc.atomic_add(hierarchy_block_out, 1, 3, hierarchy="block")
        hierarchy_block_out[2] = acc.atomic_max(hierarchy_block_out, 3, -4, hierarchy="threads")


def test_plain_atomics_give_alpakas_old_values(device, queue):
    """The plain read-modify-writes (shared memory, hierarchy "threads"/"block" on cpu_serial)
    return what the atomics return (test_shared_atomics' sequence)."""
    a = upload(queue, np.array([10, 5, 1, 7, 12, 0, 0, 2], np.int32))
    f = upload(queue, np.array([1.0, 0.5, 3.0, 0.0], np.float32))
    old = upload(queue, np.zeros(16, np.int32))
    fold = upload(queue, np.zeros(6, np.float32))
    hb = upload(queue, np.array([0, 4, 0, -7], np.int64))
    pk.exec(queue, pk.make_workdiv(device, 1, 1), shared_sequence, a, f, old, fold, hb)
    np.testing.assert_array_equal(download(queue, old), [10, 15, 5, 3, 1, 7, 8, 12, 4, 13, 0, 1, 2, 0, 3, 2])
    np.testing.assert_array_equal(download(queue, a), [13, 10, 42, 8, 8, 0, 2, 1])
    np.testing.assert_array_equal(download(queue, fold), [1.0, 2.5, 0.5, -1.0, 3.0, 0.0])
    np.testing.assert_array_equal(download(queue, f), [2.25, 2.0, 7.0, 3.0])
    np.testing.assert_array_equal(download(queue, hb), [4, 7, -7, -4])


@pk.kernel
def atomics_of_every_kind(acc, out, counter, n):
    sh = acc.shared_array(4, np.int64)
    sh[0] = 0
    for _i in acc.uniform_elements(n):
        acc.atomic_add(sh, 0, 1)  # shared: plain on both CPU backends
        acc.atomic_add(counter, 0, 1, hierarchy="threads")  # the threads of a block: plain
        acc.atomic_add(counter, 1, 1, hierarchy="block")  # the blocks of a grid: plain on cpu_serial
        acc.atomic_add(counter, 2, 1)  # grid: atomic
    acc.mem_fence("grid")
    out[acc.block_idx] = sh[0]


def test_generated_source_uses_plain_operations_where_nothing_contends():
    out, counter = np.zeros(4, np.int64), np.zeros(3, np.int64)
    serial = _source(atomics_of_every_kind, out, counter, 8, serial=True)
    threads = _source(atomics_of_every_kind, out, counter, 8, serial=False)
    assert "plain_add(sh_sh, (0,)" in serial and "plain_add(sh_sh, (0,)" in threads
    assert "plain_add(a1, (1,)" in serial and "atomic_add(a1, (1,)" in threads
    for src in (serial, threads):
        assert "plain_add(a1, (0,)" in src and "atomic_add(a1, (2,)" in src
        assert "fence()" in src


def test_grid_atomics_are_relaxed_and_fences_stay_sequentially_consistent(tmp_path, monkeypatch):
    # a fresh cache: a kernel numba loads from its disk cache has no LLVM text to inspect
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path))
    q = pk.Queue(pk.device("cpu_threads"))
    out, counter = np.zeros(4, np.int64), np.zeros(3, np.int64)
    pk.exec(q, pk.WorkDiv(4, 1, 2), atomics_of_every_kind, out, counter, 8)
    q.wait()
    np.testing.assert_array_equal(counter, [8, 8, 8])
    np.testing.assert_array_equal(out, [2, 2, 2, 2])
    plan = next(iter(pk.get_backend("cpu_threads").plans(atomics_of_every_kind).values()))
    llvm = "\n".join(plan.fn.inspect_llvm().values())
    rmw = [line for line in llvm.splitlines() if "atomicrmw" in line or "cmpxchg" in line]
    adds = [line for line in rmw if "atomicrmw add ptr" in line and "i64 1 " in line]
    assert len(adds) >= 2 and not any("seq_cst" in line for line in rmw), rmw  # grid + block on cpu_threads
    assert "fence seq_cst" in llvm


@pk.kernel
def hammer(acc, counter, where, n):
    """Every element adds to ``counter[where[i]]`` (the index is data: no update can be merged)."""
    for i in acc.uniform_elements(n):
        acc.atomic_add(counter, where[i], 1)
        acc.atomic_add(counter, where[i] + 1, 1, hierarchy="block")
        acc.atomic_add(counter, where[i] + 2, 0.5)


def test_many_blocks_on_one_counter_count_exactly(device, queue):
    """cpu_threads runs the blocks on 2+ threads at once: grid and block atomics stay atomic
    (plain operations lost up to 12% of the counts here in most runs, checked)."""
    n = 1 << 20 if device.backend_name.startswith("cpu") else 1 << 16  # the GPU stand-ins are slow
    counter = upload(queue, np.zeros(3, np.float32))
    where = upload(queue, np.zeros(n, np.int32))
    for _ in range(4):
        pk.exec(queue, pk.make_workdiv(device, 64, n // 64), hammer, counter, where, n)
    np.testing.assert_array_equal(download(queue, counter), [4 * n, 4 * n, 2 * n])


def test_two_cpu_serial_queues_share_a_counter_exactly():
    """Two non-blocking cpu_serial queues run their kernels at once, each on its worker thread:
    grid atomics stay atomic there (hierarchy "block", plain on cpu_serial, is not counted;
    plain grid atomics lost 14% of the counts here, checked)."""
    dev = pk.device("cpu_serial")
    q1, q2 = pk.Queue(dev, blocking=False), pk.Queue(dev, blocking=False)
    n = 1 << 20
    counter = np.zeros(3, np.float32)
    where = np.zeros(n, np.int32)
    for _ in range(4):
        pk.exec(q1, pk.WorkDiv(16, 1, n // 16), hammer, counter, where, n)
        pk.exec(q2, pk.WorkDiv(16, 1, n // 16), hammer, counter, where, n)
    q1.wait()
    q2.wait()
    np.testing.assert_array_equal(counter[[0, 2]], [8 * n, 4 * n])
