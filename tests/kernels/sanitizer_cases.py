"""Two deliberately wrong kernels for the sanitizer pass (test_sanitizer.py), which must catch
both: an out-of-bounds write and a data race on shared memory. Not collected by the ordinary
suite (the file name does not start with ``test_``); the sanitizer run names it explicitly."""

import numpy as np

import portable as pk


@pk.kernel
def write_past_end(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i + 1] = i  # i = n - 1 writes one element past the end


@pk.kernel
def racy_block_sum(acc, out, data, n):
    s = acc.shared_array(1, np.float64)
    for i in acc.uniform_elements(n):
        s[0] = s[0] + data[i]  # every thread of the block updates one shared word, unsynchronised
    acc.sync_block_threads()
    if acc.once_per_block():
        out[acc.block_idx] = s[0]


def test_out_of_bounds_write(queue):
    n = 64  # 256 bytes: the caching allocator's smallest bin, so one past the end is past the buffer
    out = pk.Buffer(queue.device, (n,), np.int32)
    pk.exec(queue, pk.WorkDiv(4, 16, 1), write_past_end, out, n)
    queue.wait()


def test_shared_memory_race(queue):
    n = 32
    data = pk.Buffer(queue.device, (n,), np.float64)
    pk.memset(queue, data, 0)
    out = pk.Buffer(queue.device, (2,), np.float64)
    pk.exec(queue, pk.WorkDiv(2, 16, 1), racy_block_sum, out, data, n)
    queue.wait()
