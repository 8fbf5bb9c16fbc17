"""The "stream" check: a buffer used on one queue while another queue's unordered work writes it
(issue 39 item 4), under ALPYKA_DEBUG=1 on every backend and on the emulated GPUs by default."""

import inspect

import numpy as np
import pytest

import portable as pk


@pk.kernel
def fill(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = 2.0 * i


@pk.kernel
def plus_one(acc, dst, src, n):
    for i in acc.uniform_elements(n):
        dst[i] = src[i] + 1.0


N = 1000


@pytest.fixture
def two_queues(device, monkeypatch):
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    return pk.Queue(device), pk.Queue(device)


def _bufs(device, k=2):
    return [pk.Buffer(device, N, np.float32) for _ in range(k)]


def test_read_on_another_queue_without_event_is_caught(device, two_queues):
    q1, q2 = two_queues
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.exec(q1, wd, fill, a, np.int64(N))
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(pk.KernelCheckError) as info:
        pk.exec(q2, wd, plus_one, c, a, np.int64(N))
    err = info.value
    assert err.kind == "stream"
    msg = str(err)
    assert "kernel 'plus_one'" in msg and "kernel 'fill'" in msg, msg
    assert f"test_stream_check.py:{line}" in msg, msg
    assert repr(a) in msg and "queue #" in msg and "wait_for" in msg, msg
    q1.wait()
    q2.wait()


def test_correct_twin_with_an_event_passes(device, two_queues):
    q1, q2 = two_queues
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.exec(q1, wd, fill, a, np.int64(N))
    ev = pk.Event(device)
    q1.record(ev)
    q2.wait_for(ev)
    pk.exec(q2, wd, plus_one, c, a, np.int64(N))
    host = np.zeros(N, np.float32)
    pk.memcpy(q2, host, c)
    q2.wait()
    np.testing.assert_array_equal(host, 2.0 * np.arange(N, dtype=np.float32) + 1.0)


def test_host_wait_orders_too(device, two_queues):
    q1, q2 = two_queues
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.exec(q1, wd, fill, a, np.int64(N))
    q1.wait()
    pk.exec(q2, wd, plus_one, c, a, np.int64(N))
    ev = pk.Event(device)
    q2.record(ev)
    ev.wait()  # the host saw q2 finish: q1 may now write c
    pk.exec(q1, wd, fill, c, np.int64(N))
    q1.wait()


def test_two_queues_reading_one_buffer_is_fine(device, two_queues):
    q1, q2 = two_queues
    a, c, d = _bufs(device, 3)
    wd = pk.valid_workdiv(device, N)
    pk.memset(q1, a, 0)
    q1.wait()
    pk.exec(q1, wd, plus_one, c, a, np.int64(N))  # a is only read (the kernel's IR stores to dst)
    pk.exec(q2, wd, plus_one, d, a, np.int64(N))
    q1.wait()
    q2.wait()


def test_write_while_another_queue_reads_is_caught(device, two_queues):
    q1, q2 = two_queues
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.memset(q1, a, 0)
    q1.wait()
    pk.exec(q1, wd, plus_one, c, a, np.int64(N))
    with pytest.raises(pk.KernelCheckError, match=r"pk\.memset .*stream: writes .* reads it") as info:
        pk.memset(q2, a, 0)
    assert info.value.kind == "stream"
    q1.wait()
    pk.memset(q2, a, 0)  # after the host saw q1 finish: fine
    q2.wait()


def test_memcpy_spans_of_one_buffer_on_two_queues(device, two_queues):
    q1, q2 = two_queues
    (a,) = _bufs(device, 1)
    half = a.nbytes // 2
    host = np.ones(N // 2, np.float32)
    pk.memcpy(q1, a.memref(0, half), host)
    pk.memcpy(q2, a.memref(half, half), host)  # disjoint bytes: no conflict
    with pytest.raises(pk.KernelCheckError, match="stream"):
        pk.memcpy(q2, host, a.memref(0, half))
    q1.wait()
    q2.wait()


def test_off_without_the_flags(device, monkeypatch):
    from portable._registry import emulated

    if device.backend_name in emulated():
        monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")
    monkeypatch.delenv("ALPYKA_DEBUG", raising=False)
    q1, q2 = pk.Queue(device), pk.Queue(device)
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.exec(q1, wd, fill, a, np.int64(N))
    pk.exec(q2, wd, plus_one, c, a, np.int64(N))  # wrong, but nothing checks it
    q1.wait()
    q2.wait()


def test_on_by_default_on_the_emulated_gpus(device, monkeypatch):
    from portable._registry import emulated

    if device.backend_name not in emulated():
        pytest.skip("the emulated GPUs check without ALPYKA_DEBUG")
    monkeypatch.delenv("ALPYKA_DEBUG", raising=False)
    monkeypatch.delenv("ALPYKA_EMULATE_CHECKS", raising=False)
    q1, q2 = pk.Queue(device), pk.Queue(device)
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    pk.exec(q1, wd, fill, a, np.int64(N))
    with pytest.raises(pk.KernelCheckError, match="stream"):
        pk.exec(q2, wd, plus_one, c, a, np.int64(N))
    q1.wait()


def test_caught_on_the_warm_fast_path_too(device, two_queues):
    q1, q2 = two_queues
    a, c = _bufs(device)
    wd = pk.valid_workdiv(device, N)
    ev = pk.Event(device)
    for _ in range(4):  # warm: the later launches go through the queue's fast launchers
        pk.exec(q1, wd, fill, a, np.int64(N))
        q1.record(ev)
        q2.wait_for(ev)
        pk.exec(q2, wd, plus_one, c, a, np.int64(N))
        q2.record(ev)
        q1.wait_for(ev)
    pk.exec(q1, wd, fill, a, np.int64(N))
    with pytest.raises(pk.KernelCheckError, match="stream"):
        pk.exec(q2, wd, plus_one, c, a, np.int64(N))
    q1.wait()
    q2.wait()
