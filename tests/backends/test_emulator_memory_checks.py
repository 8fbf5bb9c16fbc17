"""The GPU emulator's checks of device memory (issue 39 item 4): a fresh device buffer holds
garbage on a GPU, so a kernel that reads (or updates atomically) a buffer nothing wrote since its
allocation fails with KernelCheckError "uninitialized" at the kernel's Python line, whatever way
the memory came to be unwritten (never written, written only in part, copied from unwritten
memory, a pool block reused by a new buffer); what writes it (pk.memset, a copy from the host, a
kernel's store, a host library through the pointer) makes it readable. Every thread of a block
writing the same value to one shared element is a race reported as such. Races in device memory:
between the threads of a block as in shared memory, and two blocks storing to one element (a lost
update); elements each thread owns pass."""

from __future__ import annotations

import gc
import inspect
import os

import numpy as np
import pytest

import portable as pk

pytestmark = [pytest.mark.hip_differs, pytest.mark.alpyka_backends("cuda", "rocm")]

N = 64


@pk.kernel
def plus_one(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out[i] = inp[i] + 1  # CHECK


@pk.kernel
def count_into(acc, counts, n):
    for i in acc.uniform_elements(n):
        acc.atomic_add(counts, i % 4, 1)  # CHECK


@pk.kernel
def write_first_half(acc, buf, n):
    for i in acc.uniform_elements(n // 2):
        buf[i] = i


def _lines(kernel) -> list[str]:
    lines, first = inspect.getsourcelines(kernel.py_function)
    return [f"{os.path.basename(__file__)}:{first + i}" for i, text in enumerate(lines) if "# CHECK" in text]


def _fails(queue, kind, kernel, *args, n=N):
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, pk.make_workdiv(queue.device, 1, n), kernel, *args)
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == kind, repr(err)
    assert f"kernel {kernel.__name__!r}" in str(err) and any(w in str(err) for w in _lines(kernel)), str(err)
    return str(err)


def _result(queue, buf, n=N):
    got = np.empty(n, buf.dtype)
    pk.memcpy(queue, got, buf)
    queue.wait()
    return got


def _buffers(queue, n=N):
    out = pk.Buffer(queue.device, n, np.int64, queue=queue)
    pk.memset(queue, out, 0)
    return out, pk.Buffer(queue.device, n, np.int64, queue=queue)


def test_a_fresh_buffer_read_is_uninitialized_and_its_memset_twin_passes(queue, checked):
    out, inp = _buffers(queue)
    text = _fails(queue, "uninitialized", plus_one, out, inp, N)
    assert "nothing wrote since it was allocated" in text
    pk.memset(queue, inp, 0)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, out, inp, N)
    assert (_result(queue, out) == 1).all()


def test_a_buffer_copied_from_the_host_or_written_by_a_kernel_is_initialized(queue, checked):
    out, inp = _buffers(queue)
    pk.memcpy(queue, inp, np.arange(N, dtype=np.int64))
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, out, inp, N)
    np.testing.assert_array_equal(_result(queue, out), np.arange(N) + 1)
    mid = pk.Buffer(queue.device, N, np.int64, queue=queue)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, mid, inp, N)  # a kernel writes mid
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, out, mid, N)
    np.testing.assert_array_equal(_result(queue, out), np.arange(N) + 2)


def test_an_atomic_on_a_fresh_buffer_is_uninitialized(queue, checked):
    counts = pk.Buffer(queue.device, 4, np.int32, queue=queue)
    _fails(queue, "uninitialized", count_into, counts, N)
    pk.memset(queue, counts, 0)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), count_into, counts, N)
    np.testing.assert_array_equal(_result(queue, counts, 4), [N // 4] * 4)


def test_a_buffer_written_in_part_is_uninitialized_past_the_part(queue, checked):
    out, inp = _buffers(queue)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), write_first_half, inp, N)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N // 2), plus_one, out, inp, N // 2)  # the half written
    np.testing.assert_array_equal(_result(queue, out)[: N // 2], np.arange(N // 2) + 1)
    _fails(queue, "uninitialized", plus_one, out, inp, N)


def test_a_copy_of_unwritten_memory_stays_unwritten(queue, checked):
    out, fresh = _buffers(queue)
    copy = pk.Buffer(queue.device, N, np.int64, queue=queue)
    pk.memcpy(queue, copy, fresh)  # device to device: garbage in, garbage out
    _fails(queue, "uninitialized", plus_one, out, copy, N)


def test_a_reused_pool_block_is_unwritten_again(queue, checked):
    out, _ = _buffers(queue)
    old = pk.Buffer(queue.device, N, np.int64, queue=queue)
    pk.memset(queue, old, 0)  # written, then freed: the pool keeps its block
    queue.wait()
    address = old.ptr
    del old
    gc.collect()
    again = pk.Buffer(queue.device, N, np.int64, queue=queue)  # the pool's block of the buffer just freed
    assert again.ptr == address
    _fails(queue, "uninitialized", plus_one, out, again, N)


def test_a_host_library_writing_through_the_pointer_counts_as_a_write(queue, checked):
    out, inp = _buffers(queue)
    queue.wait()
    host = np.asarray(inp.array)  # the stand-in's device memory is host memory: numpy writes it
    host[:] = 5
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, out, inp, N)
    assert (_result(queue, out) == 6).all()


def test_with_the_checks_off_a_fresh_buffer_is_only_garbage(queue, checked, monkeypatch):
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")
    out, inp = _buffers(queue)
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), plus_one, out, inp, N)
    queue.wait()


@pk.kernel
def every_thread_resets(acc, out, n):
    found = acc.shared_array(1, np.int32)
    found[0] = 0  # CHECK (CMSSW's foundClusters = 0, from every thread)
    acc.sync_block_threads()
    acc.atomic_add(found, 0, 1, hierarchy="threads")
    acc.sync_block_threads()
    out[acc.thread_idx] = found[0]


@pk.kernel
def one_thread_resets(acc, out, n):
    found = acc.shared_array(1, np.int32)
    if acc.thread_idx == 0:
        found[0] = 0
    acc.sync_block_threads()
    acc.atomic_add(found, 0, 1, hierarchy="threads")
    acc.sync_block_threads()
    out[acc.thread_idx] = found[0]


@pk.kernel
def threads_write_their_own_index(acc, out, n):
    last = acc.shared_array(1, np.int32)
    last[0] = acc.thread_idx  # CHECK (different values: the order decides)
    acc.sync_block_threads()
    out[acc.thread_idx] = last[0]


def test_every_thread_writing_one_value_is_a_race_said_as_such(queue, checked):
    out = pk.Buffer(queue.device, N, np.int32, queue=queue)
    same = _fails(queue, "race", every_thread_resets, out, N)
    assert "writes the same value" in same and "whatever the order" in same, same
    differ = _fails(queue, "race", threads_write_their_own_index, out, N)
    assert "the result depends on the order" in differ and "same value" not in differ, differ
    pk.exec(queue, pk.make_workdiv(queue.device, 1, N), one_thread_resets, out, N)
    assert (_result(queue, out) == N).all()


# ----------------------------------------------------------------------------- races in device memory
@pk.kernel
def count_with_plain_adds(acc, out, n):
    out[0] += 1  # CHECK (every thread: a lost update)


@pk.kernel
def count_with_atomics(acc, out, n):
    acc.atomic_add(out, 0, 1)


@pk.kernel
def neighbour_without_a_barrier(acc, out, buf):
    t = acc.thread_idx
    buf[t] = t  # CHECK (either access is the race's first)
    out[t] = buf[(t + 1) % acc.block_threads]  # CHECK


@pk.kernel
def neighbour_after_a_barrier(acc, out, buf):
    t = acc.thread_idx
    buf[t] = t
    acc.sync_block_threads()
    out[t] = buf[(t + 1) % acc.block_threads]


@pk.kernel
def every_thread_sets_the_flag(acc, out, n):
    out[0] = 1  # CHECK


@pk.kernel
def each_thread_its_own_elements(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = out[i] * 2 + 1


@pytest.mark.parametrize("blocks, threads", [(1, N), (N, 1), (4, 16)])
def test_a_lost_update_in_device_memory_is_a_race(queue, checked, blocks, threads):
    out = pk.Buffer(queue.device, 1, np.int64, queue=queue)
    pk.memset(queue, out, 0)
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, pk.WorkDiv(blocks, threads, 1), count_with_plain_adds, out, 1)
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == "race", repr(err)
    assert any(w in str(err) for w in _lines(count_with_plain_adds)) and "device memory" in str(err), str(err)
    if blocks > 1 and threads == 1:
        assert "blocks run in no set order" in str(err), str(err)
    pk.memset(queue, out, 0)
    pk.exec(queue, pk.WorkDiv(blocks, threads, 1), count_with_atomics, out, 1)
    assert _result(queue, out, 1)[0] == blocks * threads


def test_a_neighbours_element_in_device_memory_needs_a_barrier(queue, checked):
    out, buf = _buffers(queue)
    pk.memset(queue, buf, 0)  # initialised: what is left is the order of the two accesses
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, pk.WorkDiv(1, N, 1), neighbour_without_a_barrier, out, buf)
        queue.wait()
    err = info.value.__cause__
    assert err.kind == "race" and any(w in str(err) for w in _lines(neighbour_without_a_barrier)), str(err)
    pk.exec(queue, pk.WorkDiv(1, N, 1), neighbour_after_a_barrier, out, buf)
    np.testing.assert_array_equal(_result(queue, out), (np.arange(N) + 1) % N)


def test_one_value_stored_by_every_thread_in_device_memory(queue, checked):
    out = pk.Buffer(queue.device, 1, np.int64, queue=queue)
    pk.memset(queue, out, 0)
    text = _fails(queue, "race", every_thread_sets_the_flag, out, 1)
    assert "writes the same value" in text, text


def test_elements_owned_by_one_thread_each_do_not_race(queue, checked):
    out = pk.Buffer(queue.device, 1000, np.int64, queue=queue)
    pk.memcpy(queue, out, np.arange(1000, dtype=np.int64))
    pk.exec(queue, pk.WorkDiv(3, 32, 1), each_thread_its_own_elements, out, 1000)
    np.testing.assert_array_equal(_result(queue, out, 1000), np.arange(1000) * 2 + 1)


@pk.kernel
def count_at_with_plain_adds(acc, out, k):
    out[k] += 1  # CHECK (every thread: a lost update)


@pytest.mark.parametrize("dtype", [np.uint8, np.int64])
def test_race_entries_of_narrow_and_wide_elements_across_spans(queue, checked, dtype):
    """The race table keeps an entry per element in 4096-byte spans of each buffer, slotted by
    the element size: neighbouring bytes owned by different threads do not race, and a lost
    update far into the buffer (a later span) is still found."""
    n = 9000  # three spans even of bytes
    host = (np.arange(n) % 100).astype(dtype)
    out = pk.Buffer(queue.device, n, dtype, queue=queue)
    pk.memcpy(queue, out, host)
    pk.exec(queue, pk.WorkDiv(3, 32, 1), each_thread_its_own_elements, out, n)
    np.testing.assert_array_equal(_result(queue, out, n), (host * 2 + 1).astype(dtype))
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, pk.WorkDiv(4, 16, 1), count_at_with_plain_adds, out, n - 3)
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == "race", repr(err)
