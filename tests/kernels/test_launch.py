"""Launch behaviour: asynchronous queues keep arguments alive, blocking queues, argument kinds,
the compile cache."""

import gc
import threading

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import Particles, copy_x, download, record_uniform, upload
from portable.compiler import cache_dir

# the rocm stand-in runs this file too: smoke set: launches through hiprtc's options
pytestmark = pytest.mark.hip_differs


def test_launch_keeps_argument_owners_alive(device, queue):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n = 10_000
    x = rng.standard_normal(n).astype(np.float32)
    d = {
        "x": x,
        "y": np.zeros(n),
        "i32": np.zeros(n, np.int32),
        "i64": np.zeros(n, np.int64),
        "p": np.zeros((n, 3), np.float32),
        "c": np.zeros((n, 2, 3)),
        "count": 0,
        "total": 0.0,
    }
    inp = pk.PortableCollection.from_dict(Particles, d, queue)
    out = pk.PortableCollection(Particles, n, queue)
    gate = threading.Event()
    queue.enqueue_host(lambda: gate.wait(60))  # hold the queue so the launch is still pending
    pk.exec(queue, pk.make_workdiv(device, 4, 256), copy_x, out.view(), inp.const_view(), n)
    del inp, d
    gc.collect()
    junk = [pk.PortableCollection(Particles, n, device) for _ in range(4)]  # would reuse freed memory
    for j in junk:
        j.zero()
    gate.set()
    np.testing.assert_array_equal(out.to_dict(queue)["x"], x, err_msg=f"seed={seed}")


def test_non_blocking_launch_returns_before_the_work_ran(device):
    q = pk.Queue(device)
    gate, opened = threading.Event(), []
    q.enqueue_host(lambda: opened.append(gate.wait(60)))
    owner = upload(q, np.full(16, -1, np.int64))
    hits = upload(q, np.zeros(16, np.int32))
    pk.exec(q, pk.make_workdiv(device, 2, 4), record_uniform, owner, hits, 16)
    assert not q.is_idle()
    gate.set()
    q.wait()
    assert opened == [True]  # the gate was opened by the test, not timed out (60 s), whatever the compile took
    np.testing.assert_array_equal(download(q, hits), 1)


def test_blocking_queue_and_enqueue_form(device):
    q = pk.Queue(device, blocking=True)
    owner = upload(q, np.full(9, -1, np.int64))
    hits = upload(q, np.zeros(9, np.int32))
    q.enqueue(pk.make_workdiv(device, 3, 1), record_uniform, owner, hits, np.int32(9))
    np.testing.assert_array_equal(download(q, owner), np.arange(9) % 3)


@pytest.mark.alpyka_backends(kind="cpu")
def test_numpy_arrays_and_python_scalars_on_cpu(device, queue):
    owner = np.full(12, -1, np.int64)
    hits = np.zeros(12, np.int32)
    pk.exec(queue, pk.make_workdiv(device, 4, 3), record_uniform, owner, hits, 12)
    queue.wait()
    np.testing.assert_array_equal(owner, np.arange(12) // 3 % 4)
    np.testing.assert_array_equal(hits, 1)


def test_generated_source_is_a_cached_file(device, queue):
    owner = upload(queue, np.full(4, -1, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 1, 1), record_uniform, owner, upload(queue, np.zeros(4, np.int32)), 4)
    queue.wait()
    if device.kind == "cpu":
        files = list(cache_dir().glob("alpyka_*.py"))
        assert files and any("record_uniform" in f.read_text() for f in files)
