"""acc.shared_scalar(dtype) (alpaka's declareSharedVar<T>): a block-shared variable used by name
on every backend (an assignment writes it for the block, a read reads it, atomics take it), the
GPU emulator's race check on it, and the messages of its misuses and of `x = 0` on a one-element
shared array."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, raised_by_the_front_end, upload
from backends.emulator import fake_cupy_kernels


@pk.device_function
def twice(v):
    return 2 * v


@pk.kernel
def first_negative(acc, x, out, n):
    """CMSSW's reorderSigned: the first negative key of each block's row, and how many there are."""
    found = acc.shared_scalar(np.int32)
    count = acc.shared_scalar(np.uint32)
    total = acc.shared_scalar(np.float64)
    b = acc.block_idx
    if acc.once_per_block():
        found = n
        count = 0
        total = 0.5
    acc.sync_block_threads()
    for i in range(acc.thread_idx, n, acc.block_threads):
        if x[b * n + i] < 0:
            acc.atomic_min(found, i, hierarchy="threads")
            acc.atomic_add(count, 1, hierarchy="threads")
    acc.sync_block_threads()
    if acc.once_per_block():
        total += found  # a read-modify-write by one thread
        out[b * 4] = found
        out[b * 4 + 1] = count
        out[b * 4 + 2] = twice(found)  # a device function gets its value
        out[b * 4 + 3] = total


def _threads(queue) -> int:
    return min(64, queue.device.limits.max_threads_per_block)


def test_shared_scalar_by_name(queue):
    n, blocks = 50, 3
    x = np.ones((blocks, n), np.int32)
    x[0, 17], x[0, 30], x[2, 0] = -1, -5, -2
    out = upload(queue, np.zeros(4 * blocks, np.float64))
    pk.exec(queue, pk.WorkDiv(blocks, _threads(queue), 1), first_negative, upload(queue, x.ravel()), out, n)
    got = download(queue, out).reshape(blocks, 4)
    want = [[17, 2, 34, 17.5], [n, 0, 2 * n, n + 0.5], [0, 1, 0, 0.5]]
    assert got.tolist() == want


@pk.kernel
def every_thread_writes(acc, out, z):
    found = acc.shared_scalar(np.int64)
    found = acc.thread_idx  # every thread of the block writes the one variable: a race on a GPU
    acc.sync_block_threads()
    out[acc.thread_idx] = found


@pk.kernel
def one_thread_writes(acc, out, z):
    found = acc.shared_scalar(np.int64)
    if acc.once_per_block():
        found = 7
    acc.sync_block_threads()
    out[acc.thread_idx] = found


@pytest.mark.alpyka_backends("cuda", "rocm")
def test_the_emulator_reports_a_race_on_a_shared_scalar(backend, queue, monkeypatch):
    if backend not in fake_cupy_kernels.served_here() or fake_cupy_kernels.executor_name() != "cpp":
        pytest.skip(f"{backend} is not run by the emulator's C++ executor here (the checks are the emulator's)")
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "1")
    out = upload(queue, np.zeros(32, np.int64))
    with pytest.raises(pk.AsyncError) as info:
        pk.exec(queue, pk.WorkDiv(1, 32, 1), every_thread_writes, out, np.int64(0))
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, pk.KernelCheckError) and err.kind == "race", repr(err)
    assert "shared scalar 'found'" in str(err) or "every_thread_writes" in str(err), str(err)
    pk.exec(queue, pk.WorkDiv(1, 32, 1), one_thread_writes, out, np.int64(0))  # the fix passes
    assert download(queue, out).tolist() == [7] * 32


# ----------------------------------------------------------------------------- messages
def _front_end_error(kernel, match, *args):
    q = host_queue()
    with pytest.raises(pk.KernelSyntaxError, match=match) as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), kernel, *args)
    assert raised_by_the_front_end(err)
    return str(err.value)


def test_a_number_assigned_to_a_one_element_shared_array_suggests_its_element():
    @pk.kernel
    def assigns_the_array(acc, out):
        found = acc.shared_array(1, np.uint32)
        found = 0
        out[0] = found[0]

    msg = _front_end_error(assigns_the_array, "cannot be assigned a number", np.zeros(1, np.uint32))
    assert "found[0] = ..." in msg and "acc.shared_scalar(dtype)" in msg

    @pk.kernel
    def assigns_a_bigger_array(acc, out):
        s = acc.shared_array(4, np.uint32)
        s = 0
        out[0] = s[0]

    msg = _front_end_error(assigns_a_bigger_array, "cannot be assigned a number", np.zeros(1, np.uint32))
    assert "s[0]" not in msg  # the element suggestion is for one-element arrays only


def test_shared_scalar_misuses():
    @pk.kernel
    def indexed(acc, out):
        found = acc.shared_scalar(np.int32)
        out[0] = found[0]

    _front_end_error(indexed, "shared scalar 'found' is a scalar: use it without an index", np.zeros(1, np.int32))

    @pk.device_function
    def declares(acc):
        found = acc.shared_scalar(np.int32)
        return found

    @pk.kernel
    def calls_declares(acc, out):
        out[0] = declares(acc)

    _front_end_error(calls_declares, "allowed in the kernel body only", np.zeros(1, np.int32))

    @pk.kernel
    def as_a_value(acc, out):
        out[0] = 1 + acc.shared_scalar(np.int32)

    _front_end_error(as_a_value, r"to a name at the top level of the kernel \(s = acc.shared_scalar", np.zeros(1))

    @pk.kernel
    def no_dtype(acc, out):
        found = acc.shared_scalar(3)
        out[0] = found

    _front_end_error(no_dtype, r"acc.shared_scalar\(dtype\): dtype must be a numpy type", np.zeros(1))
