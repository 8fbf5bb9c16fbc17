"""The cuda/rocm runtime (backends/_cupy_common.py) on an emulated cupy (backends/emulator/fake_cupy.py):
its queue, event, memory and device logic runs here without a GPU. Kernel launches need NVRTC
plus a device and are covered by test_nvrtc.py (compilation) and by the GPU matrix."""

import numpy as np
import pytest
import test_device_runtime as rt  # its tests rerun below as scenarios (a sibling test file)

import portable as pk
from backends._cupy_common import CupyBackend, import_cupy
from backends.emulator.fake_cupy import make_fake_cupy
from backends.emulator.fake_cupy_runtime import CUDARuntimeError
from portable import _registry

# the rocm stand-in runs this file too: the stand-in's own tests: its HIP personality
pytestmark = pytest.mark.hip_differs


@pytest.fixture(params=["cuda", "rocm"])
def fake(request, monkeypatch):
    name = request.param
    cupy = make_fake_cupy(n_devices=2, is_hip=name == "rocm")
    backend = CupyBackend(name, cupy)
    monkeypatch.setitem(_registry._loaded, name, backend)
    monkeypatch.delitem(_registry._reasons, name, raising=False)
    return backend


def test_unavailability_reasons(monkeypatch):
    import sys

    monkeypatch.setitem(
        sys.modules,
        "cupy",
        make_fake_cupy(
            count_error="cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
        ),
    )
    with pytest.raises(
        pk.BackendUnavailable, match="cupy is installed but no CUDA driver/device: cudaErrorInsufficientDriver"
    ):
        import_cupy("cuda", want_hip=False)
    with pytest.raises(pk.BackendUnavailable, match="is a CUDA build; the rocm backend needs cupy's HIP"):
        import_cupy("rocm", want_hip=True)
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(is_hip=True))
    with pytest.raises(pk.BackendUnavailable, match="ROCm/HIP build"):
        import_cupy("cuda", want_hip=False)
    assert import_cupy("rocm", want_hip=True) is sys.modules["cupy"]
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(n_devices=0))
    with pytest.raises(pk.BackendUnavailable, match="reports no device"):
        import_cupy("cuda", want_hip=False)


def test_devices_and_limits(fake):
    devs = pk.devices(fake.name)
    assert [d.memory_space for d in devs] == [f"{fake.name}:0", f"{fake.name}:1"]
    d = devs[1]
    emulated = "ROCm (HIP)" if fake.name == "rocm" else "CUDA"
    assert d.name == f"{emulated} emulated on the CPU (ALPYKA_EMULATE)" and d.kind == "gpu"  # not a GPU's name
    assert str(d) == f"{fake.name}:1 ({emulated} emulated on the CPU (ALPYKA_EMULATE))"
    assert d.limits.max_block_dims == (64, 1024, 1024)  # z, y, x: alpaka's slowest first
    assert d.limits.max_grid_dims == (65535, 65535, 2**31 - 1)
    assert d.limits.warp_size == (64 if fake.name == "rocm" else 32)  # a CDNA wavefront on HIP
    assert d.limits.max_threads_per_block == 1024
    assert not devs[0].can_access(devs[1])
    q = pk.Queue(d)
    assert isinstance(q.native_handle, int) and q.native_handle == q._impl.stream.ptr


@pytest.fixture
def backend(fake):
    """The emulated cupy backend under test: the plugin's ``device`` and ``queue`` fixtures (device
    0 and a queue drained after the test) then give the runtime tests below their arguments."""
    return fake.name


# test_device_runtime.py's GPU tests, collected here too: their ``device``/``queue`` fixtures
# resolve through ``backend`` above, once per emulated personality (cuda, rocm)
test_roundtrip_copies_and_fill = rt.test_roundtrip_copies_and_fill
test_collection_roundtrip_and_views = rt.test_collection_roundtrip_and_views
test_host_tasks_keep_fifo_order_with_device_work = rt.test_host_tasks_keep_fifo_order_with_device_work
test_host_tasks_from_several_threads = rt.test_host_tasks_from_several_threads
test_nonblocking_enqueue_host_does_not_block_the_caller = rt.test_nonblocking_enqueue_host_does_not_block_the_caller
test_blocking_queue_finishes_each_enqueue = rt.test_blocking_queue_finishes_each_enqueue
test_async_error_surfaces_at_wait_and_on_later_events = rt.test_async_error_surfaces_at_wait_and_on_later_events
test_event_rerecord_waits_for_the_latest_record_before_the_wait = (
    rt.test_event_rerecord_waits_for_the_latest_record_before_the_wait
)
test_async_copy_ordering_across_two_queues_with_events = rt.test_async_copy_ordering_across_two_queues_with_events
test_cross_backend_events = rt.test_cross_backend_events
test_host_memory_of_an_async_copy_stays_alive = rt.test_host_memory_of_an_async_copy_stays_alive
test_memory_of_another_device_is_refused = rt.test_memory_of_another_device_is_refused


def test_allocations_follow_the_queue_stream_and_alignment(fake):
    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    b = pk.Buffer(dev, 1000, np.float32, queue=q, alignment=1024)
    assert b.ptr % 1024 == 0
    assert fake.cupy.pool.pools[0].mallocs[-1] == q._impl.stream.ptr  # taken while the stream was current
    coll_arr = b.array
    coll_arr[:] = 3
    assert float(coll_arr.get().sum()) == 3000
    with pytest.raises(pk.DeviceMismatch):
        pk.memcpy(pk.Queue(pk.devices(fake.name)[1]), b, np.zeros(1000, np.float32))


def test_pinned_host_buffers(fake):
    b = pk.Buffer(pk.host(), 4096, np.float64, pinned=True)
    assert isinstance(b.handle, np.ndarray) and b.handle.dtype == np.uint8
    assert b.ptr % 128 == 0
    dev = pk.device(fake.name)
    q = pk.Queue(dev)
    d = pk.Buffer(dev, 4096, np.float64, queue=q)
    b.array[:] = np.arange(4096)
    pk.memcpy(q, d, b)
    out = pk.Buffer(pk.host(), 4096, np.float64, pinned=True)
    pk.memcpy(q, out, d)
    q.wait()
    np.testing.assert_array_equal(out.array, np.arange(4096))


@pk.kernel
def _fill(acc, out, v):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] = v


def test_kernels_launch_on_the_queue_stream_and_leave_the_current_one(fake):
    """A launch names its queue's stream to the kernel call (cupy's ``stream=``) instead of making
    it current: a stream the user made current stays current and gets none of alpyka's kernels,
    on the checked path and the fast launcher alike; the stand-in refuses another device's
    stream, as CUDA does."""
    dev = pk.device(fake.name)
    for blocking in (False, True):
        q = pk.Queue(dev, blocking=blocking)
        out = pk.Buffer(dev, 8, np.float32, queue=q)
        wd = pk.valid_workdiv(dev, 8)
        mine = fake.cupy.cuda.Stream(non_blocking=True)
        before = len(fake.cupy.rt.launches)
        with mine:
            for v in (1.0, 2.0, 3.0, 4.0):  # the third and fourth take the fast launcher
                pk.exec(q, wd, _fill, out, np.float32(v))
            assert fake.cupy.rt.current_stream(0) is mine
        q.wait()
        launches = fake.cupy.rt.launches[before:]
        assert [x[4] for x in launches] == [q._impl.stream.ptr] * 4  # (bodies: the emulated matrix's tests)
    kern = next(iter(fake.plans(_fill).values())).function
    fake.cupy.cuda.runtime.setDevice(1)
    try:
        other = fake.cupy.cuda.Stream(non_blocking=True)
    finally:
        fake.cupy.cuda.runtime.setDevice(0)
    with pytest.raises(CUDARuntimeError, match="with a stream of device 1"):
        kern((1,), (1,), (), stream=other)
