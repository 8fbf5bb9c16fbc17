"""Regression tests of issue 15 on the cupy stand-in (backends/emulator/fake_cupy.py) in both
personalities: each test here failed against the code before the fix (numbers are the issue's items)."""

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.blocks import histogram
from backends._c_build import CUPY_NVRTC_APPENDED, nvrtc_available, nvrtc_compile
from backends._c_emit import emit
from backends._cupy_common import CupyBackend
from backends.emulator.fake_cupy import make_fake_cupy
from portable import _registry
from portable._deferred import run_deferred

# the rocm stand-in runs this file too: the stand-in's own tests: its HIP personality
pytestmark = pytest.mark.hip_differs

HANG = 10  # seconds: a call that has not returned by then is hung (the test fails, not the run)


@pytest.fixture(params=["cuda", "rocm"])
def fake(request, monkeypatch):
    name = request.param
    backend = CupyBackend(name, make_fake_cupy(n_devices=2, is_hip=name == "rocm"))
    monkeypatch.setitem(_registry._loaded, name, backend)
    monkeypatch.delitem(_registry._reasons, name, raising=False)
    for k in (_first, _big_shared):  # plans hold the RawKernel of an earlier test's stand-in
        backend.plans(k).clear()
    return backend


def _returns_within(fn, seconds=HANG):
    """Run ``fn`` on a thread; True when it returned within ``seconds``."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


def _stall(queue):
    """Hold the queue's stream (as a long kernel would) until the returned event is set."""
    gate = threading.Event()
    queue._impl.stream.ex.submit(gate.wait)
    return gate


@pytest.mark.parametrize("n", [1, 8 * 1024 + 3])
def test_1_host_tasks_copies_and_fills_run_without_host_callbacks(fake, n):
    """(1) HIP refuses Stream.launch_host_func: every host task used to raise on rocm."""
    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    order = []
    q.enqueue_host(lambda: order.append("a"))
    a = np.arange(n, dtype=np.float32)
    d = pk.Buffer(dev, n, np.float32, queue=q)
    pk.memcpy(q, d, a)
    q.enqueue_host(lambda: order.append("b"))
    out = np.zeros(n, np.float32)
    pk.memcpy(q, out, d)
    h = pk.Buffer(pk.host(), n, np.float32)
    pk.memset(q, h, 0)
    q.wait()
    assert order == ["a", "b"]
    np.testing.assert_array_equal(out, a)
    assert not h.array.any()


def test_2_dlpack_import_does_not_sync_with_cupys_current_stream(fake):
    """(2) On HIP tensors come through DLPack; torch.from_dlpack(arr) made cupy record an event
    on its current (null) stream for torch's stream to wait on."""
    torch = pytest.importorskip("torch")
    from inference._torch_queue import dlpack_tensor

    dev = pk.device(fake.name)
    b = pk.Buffer(dev, 16, np.float32, queue=pk.Queue(dev, blocking=True))
    arr = b.array
    rt = fake.cupy.rt
    t = dlpack_tensor(arr)
    assert rt.dlpack_syncs == [] and t.shape == (16,)
    torch.from_dlpack(arr)  # the old path: the unintended dependency
    assert len(rt.dlpack_syncs) == 1


def test_3_device_scope_is_per_use_and_per_thread(fake):
    """(3) The scope kept one saved device per queue: a nested use restored the wrong device,
    and threads entering it overwrote each other's saved device."""
    rt = fake.cupy.cuda.runtime
    q1 = pk.Queue(pk.devices(fake.name)[1])
    rt.setDevice(0)
    with q1._impl.scope:
        with q1._impl.scope:
            pass
        assert rt.getDevice() == 1, "a nested scope restored the outer caller's device"
    assert rt.getDevice() == 0
    seen = []

    def other_thread():
        rt.setDevice(1)
        with pk.Queue(pk.devices(fake.name)[0])._impl.scope:
            time.sleep(0.01)
        seen.append(rt.getDevice())

    ts = [threading.Thread(target=other_thread) for _ in range(4)]
    with q1._impl.scope:
        for t in ts:
            t.start()
        for t in ts:
            t.join(HANG)
    assert seen == [1, 1, 1, 1] and rt.getDevice() == 0
    # 40 copies on device 1 from a thread whose device is 0 (a marker every 32nd one)
    d = pk.Buffer(q1.device, 4, np.int32, queue=q1)
    for _ in range(40):
        pk.memset(q1, d, 1)
        assert rt.getDevice() == 0
    q1.wait()


def test_4_release_cache_frees_the_allocators_device(fake):
    """(4) release_cache freed and counted the current device's pool, not the allocator's."""
    dev1 = pk.devices(fake.name)[1]
    q = pk.Queue(dev1)
    b = pk.Buffer(dev1, 1 << 16, np.uint8, queue=q)
    del b
    gc.collect()
    run_deferred()
    pools = fake.cupy.pool.pools
    assert pools[1].free_bytes() >= 1 << 16 and fake.cupy.cuda.runtime.getDevice() == 0
    released = fake.allocator(dev1).release_cache()
    assert released >= 1 << 16 and pools[1].free_bytes() == 0


def test_pool_reuse_is_stream_ordered(fake):
    """The stand-in's pool reuses a freed block on the stream it was allocated on only."""
    dev = pk.device(fake.name)
    q1, q2 = pk.Queue(dev), pk.Queue(dev)
    b = pk.Buffer(dev, 4096, np.uint8, queue=q1)
    ptr = b.ptr
    del b
    gc.collect()
    run_deferred()
    assert pk.Buffer(dev, 4096, np.uint8, queue=q2).ptr != ptr
    assert pk.Buffer(dev, 4096, np.uint8, queue=q1).ptr == ptr


@pytest.mark.parametrize("direction", ["to_host", "to_device"])
def test_5_pageable_copies_do_not_block_the_caller(fake, direction):
    """(5) A copy to or from pageable host memory returned only once complete, under the lock."""
    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    d = pk.Buffer(dev, 256, np.float64, queue=q)
    host = np.arange(256, dtype=np.float64)
    gate = _stall(q)
    try:
        call = (lambda: pk.memcpy(q, host, d)) if direction == "to_host" else (lambda: pk.memcpy(q, d, host))
        assert _returns_within(call, 2), "the copy waited for the stalled stream"
        assert _returns_within(q.is_idle, 2)  # the queue's lock is free
    finally:
        gate.set()
    q.wait()
    assert fake.cupy.rt.pageable_copies == 0


@pk.kernel
def _first(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out[i] = inp[i] * np.float32(2)


@pk.kernel(dynamic_shared_bytes=lambda wd, out, n: n * 8)
def _big_shared(acc, out, n):
    s = acc.dynamic_shared_array(np.float64)
    for i in acc.uniform_elements(1):
        s[0] = 1.0
        out[i] = s[0]


def test_5_range_checked_launch_uses_pinned_memory_and_reports(fake, monkeypatch):
    """(5) The debug flag was copied into pageable memory: each checked launch blocked."""
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    a = pk.Buffer(dev, 64, np.float32, queue=q)
    b = pk.Buffer(dev, 64, np.float32, queue=q)
    wd = pk.valid_workdiv(dev, 64)
    gate = _stall(q)
    try:
        assert _returns_within(lambda: pk.exec(q, wd, _first, b, a, 64), 5)
    finally:
        gate.set()
    q.wait()
    rt = fake.cupy.rt
    assert rt.pageable_copies == 0 and rt.launches[-1][0].endswith("_first")

    def fault(name, args):  # the kernel reports check 1 through its flag (the last argument)
        np.frombuffer((np.ctypeslib.as_ctypes_type(np.int32) * 1).from_address(int(args[-1])), np.int32)[0] = 1

    rt.kernel_runner = fault
    pk.exec(q, wd, _first, b, a, 64)
    with pytest.raises(pk.AsyncError):
        q.wait()


def test_launch_arguments_match_the_kernel_signature(fake):
    """The stand-in checks what is packed against the C signature, as cupy would pack it."""
    dev = pk.device(fake.name)
    q = pk.Queue(dev, blocking=True)
    a = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.exec(q, pk.valid_workdiv(dev, 8), _first, a, a, 8)
    name, grid, block, shared, stream = fake.cupy.rt.launches[-1]
    assert stream == q._impl.stream.ptr and shared == 0
    kern = next(iter(fake.plans(_first).values())).function
    with pytest.raises(TypeError, match="cupy would pack int64"):
        kern._check_arg(4, "f32 a2", np.int64(1), 0)


def test_6_forward_on_the_cuda_path_is_ordered_and_tracked(fake):
    """(6) Work submitted through run_on_queue waits for host tasks, keeps its inputs alive
    until the stream passed it, and a blocking queue returns only once it finished."""
    from inference._torch_queue import run_on_queue

    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    order = []
    q.enqueue_host(lambda: (time.sleep(0.05), order.append("host")))

    class Input:
        pass

    obj = Input()
    ref = weakref.ref(obj)
    gate = threading.Event()
    stream = q._impl.stream
    run_on_queue(q, lambda: (order.append("model"), stream.ex.submit(gate.wait)), obj)
    del obj
    gc.collect()
    assert ref() is not None, "the model's input died while the model could still read it"
    gate.set()
    q.wait()
    assert order == ["host", "model"]
    qb = pk.Queue(dev, blocking=True)
    run_on_queue(qb, lambda: qb._impl.stream.ex.submit(lambda: time.sleep(0.05)))
    assert qb._impl.stream.done


def test_7_host_tasks_never_block_a_driver_callback(fake):
    """(7) A host task waiting for another queue's host task deadlocked: both gates were host
    callbacks blocking the driver's single callback thread."""
    dev = pk.device(fake.name)
    q1, q2 = pk.Queue(dev), pk.Queue(dev)
    released = threading.Event()
    q1.enqueue_host(lambda: released.wait(60))  # waits on outstanding work of q2
    time.sleep(0.05)
    q2.enqueue_host(released.set)
    assert _returns_within(q2.wait, 5) and _returns_within(q1.wait, 5)
    assert released.is_set()


def test_7_event_recorded_behind_a_host_task_completes_after_it(fake):
    dev = pk.device(fake.name)
    q1, q2 = pk.Queue(dev), pk.Queue(dev)
    go, seen = threading.Event(), []
    q1.enqueue_host(lambda: (go.wait(HANG), seen.append("q1 host")))
    ev = pk.Event(dev)
    q1.record(ev)
    assert not ev.is_complete()
    q2.wait_for(ev)
    q2.enqueue_host(lambda: seen.append("q2 after"))
    go.set()
    q2.wait()
    assert seen == ["q1 host", "q2 after"] and ev.is_complete()


def test_8_modules_get_the_flags_cupy_compiles_with(fake):
    """(8) cupy appends -ftz=true on CUDA; the NVRTC guard now compiles with the same flags."""
    dev = pk.device(fake.name)
    q = pk.Queue(dev, blocking=True)
    a = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.exec(q, pk.valid_workdiv(dev, 8), _first, a, a, 8)
    module = next(p for k, p in fake.plans(_first).items() if k[0] == dev.memory_space).function.module
    if fake.name == "cuda":
        assert module.options[-len(CUPY_NVRTC_APPENDED) :] == CUPY_NVRTC_APPENDED


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_8_guard_compiles_float32_with_flush_to_zero():
    b = pk.Buffer(pk.host(), 8, np.float32)
    src = emit(_first.ir(_first.signature((b, b, 8)), 1, False), "cuda")
    arch = os.environ.get("ALPYKA_CUDA_ARCH", "compute_90")
    assert ".ftz.f32" in nvrtc_compile(src, arch, CUPY_NVRTC_APPENDED)  # x * 2 becomes add.ftz.f32
    assert ".ftz.f32" not in nvrtc_compile(src, arch)


def test_9_dynamic_shared_memory_above_48k(fake):
    """(9) The check used sharedMemPerBlock (48 KB on NVIDIA), never the opt-in limit."""
    dev = pk.device(fake.name)
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 1, np.float64, queue=q)
    n = 100 * 1024 // 8 if fake.name == "cuda" else 60 * 1024 // 8  # HIP: 64 KB of LDS
    pk.exec(q, pk.WorkDiv(1, 32, 1), _big_shared, out, n)
    assert fake.cupy.rt.launches[-1][3] == n * 8
    with pytest.raises(pk.WorkDivError):
        pk.exec(q, pk.WorkDiv(1, 32, 1), _big_shared, out, 300 * 1024 // 8)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_9_float64_atomic_add_below_sm60_is_a_cas_loop():
    host = pk.host()
    args = (
        pk.Buffer(host, 4, np.int32),
        pk.Buffer(host, 4, np.float64),
        pk.Buffer(host, 2, np.float32),
        pk.Buffer(host, 8, np.float32),
        8,
        4,
    )
    src = emit(histogram.ir(histogram.signature(args), 1, False), "cuda")  # float64 atomic_add
    assert "__CUDA_ARCH__ < 600" in src.text and "alpyka_atomic_add_f64(" in src.text
    nvrtc_compile(src, "compute_75", CUPY_NVRTC_APPENDED)  # the native path (#else)
    src.text = src.text.replace("defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600", "1")  # the sm_5x path
    ptx = nvrtc_compile(src, "compute_75", CUPY_NVRTC_APPENDED)
    assert "atom.global.cas.b64" in ptx or "atom.cas.b64" in ptx


def test_events_record_only_on_their_devices_streams(fake):
    """The stand-in refuses what CUDA refuses: an event recorded on another device's stream."""
    cp = fake.cupy
    rt = cp.cuda.runtime
    rt.setDevice(1)
    s1 = cp.cuda.Stream(non_blocking=True)
    rt.setDevice(0)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="InvalidResourceHandle"):
        cp.cuda.Event().record(s1)
    if fake.name == "rocm":
        with pytest.raises(RuntimeError, match="not supported on HIP"):
            s1.launch_host_func(lambda _: None, None)


def test_memory_collected_while_the_runtime_holds_its_lock_does_not_hang():
    """A finalizer runs inside whatever the thread was doing (here: holding the range table's
    lock, as a collection triggered inside ``span`` would): freeing memory must take no lock."""
    cp = make_fake_cupy(n_devices=1, is_hip=False)
    mem = cp.cuda.alloc_pinned_memory(256)
    base = np.frombuffer(mem, np.uint8).ctypes.data
    assert cp.rt.where(base) == ("pinned", -1)

    def free_inside_the_lock() -> None:
        nonlocal mem
        with cp.rt.ranges_lock:
            mem = None
            gc.collect()

    assert _returns_within(free_inside_the_lock), "a finalizer waited for the range table's lock"
    assert cp.rt.where(base) == ("pageable", -1)  # the range is gone at the next look-up
