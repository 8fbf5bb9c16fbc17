"""The fast launch path (portable/_launch.py): after two checked launches of a kernel with one
work division, a launch like them is a guard and the native call; a launch whose arguments
differ in what the checks or the compiled code depend on (dtype, byte order, rank, device,
contiguity, count) is still checked, and refused where the checked path refuses it."""

import sys

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

pytestmark = pytest.mark.hip_differs


@pk.kernel
def scale_into(acc, out, src, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * src[i]


def _warm(queue, wd, src, out, n=4):
    """Launch three times (the third takes the fast path) and check the result."""
    for _ in range(3):
        pk.exec(queue, wd, scale_into, out, src, np.float32(2), n)
    got = download(queue, out) if isinstance(out, pk.Buffer) else (queue.wait(), out)[1]
    np.testing.assert_array_equal(got[:n], np.arange(n, dtype=got.dtype) * 2)


def _arg(queue, values):
    return values if queue.device.is_host_memory else upload(queue, values)


def _fast_launchers(queue, wd):
    site = queue.launch_sites[scale_into][id(wd)]
    assert site.workdiv is wd
    return site.fast


def _checked_in_kernel(queue):
    """True where the plan reports checks through a device flag per launch (ALPYKA_DEBUG, the
    GPU emulator's checks): those launches stay on the checked path."""
    return any(getattr(p, "err", False) for p in queue.device.backend.plans(scale_into).values())


def test_repeated_launches_take_the_fast_path(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    want = 0 if _checked_in_kernel(queue) else 1  # one set of argument types: one fast launcher
    assert len(_fast_launchers(queue, wd)) == want
    out2 = pk.Buffer(queue.device, 4, np.float32)  # other objects of the same types: fast too
    pk.exec(queue, wd, scale_into, out2, src, np.float32(3), 4)
    np.testing.assert_array_equal(download(queue, out2), np.arange(4) * 3)
    assert len(_fast_launchers(queue, wd)) == want


def test_a_changed_byte_order_is_refused_on_the_fast_path(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    big = pk.Buffer(queue.device, 4, ">f4")
    with pytest.raises(pk.KernelArgumentError, match=r"argument 'out' holds >f4 values"):
        pk.exec(queue, wd, scale_into, big, src, np.float32(2), 4)
    if queue.device.is_host_memory:
        with pytest.raises(pk.KernelArgumentError, match=r"argument 'src' holds >f4 values"):
            pk.exec(queue, wd, scale_into, out, np.arange(4, dtype=">f4"), np.float32(2), 4)
    queue.wait()


def test_a_changed_dtype_is_checked_and_compiled_for(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    out64 = pk.Buffer(queue.device, 4, np.float64)  # a new signature: its own plan, right values
    pk.exec(queue, wd, scale_into, out64, src, np.float32(2), 4)
    np.testing.assert_array_equal(download(queue, out64), np.arange(4.0) * 2)
    with pytest.raises(pk.KernelArgumentError, match="object|bool|kernel arguments|not supported|unsupported"):
        pk.exec(queue, wd, scale_into, out, src, "2", 4)  # a string where a scalar was
    queue.wait()


def test_a_changed_rank_is_refused_on_the_fast_path(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    with pytest.raises(pk.KernelArgumentError, match="4-d buffer"):
        pk.exec(queue, wd, scale_into, pk.Buffer(queue.device, (1, 1, 2, 2), np.float32), src, np.float32(2), 4)
    queue.wait()


def test_a_changed_argument_count_is_refused_on_the_fast_path(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    with pytest.raises(pk.KernelArgumentError, match="takes 4 argument"):
        pk.exec(queue, wd, scale_into, out, src, np.float32(2))
    queue.wait()


def test_memory_of_another_device_is_refused_on_the_fast_path(queue):
    if queue.device.is_host_memory:
        other = pk.device("opencl") if "opencl" in pk.available_backends() else None
    else:
        other = pk.host()
    if other is None:
        pytest.skip("no second device with memory this queue cannot use")
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    elsewhere = pk.Buffer(other, 4, np.float32)
    with pytest.raises(pk.KernelArgumentError, match="cannot use|cannot address|copy it"):
        pk.exec(queue, wd, scale_into, elsewhere, src, np.float32(2), 4)
    queue.wait()


def test_a_non_contiguous_array_is_refused_after_contiguous_ones(device):
    if not device.is_host_memory:
        pytest.skip("numpy arrays are kernel arguments on host-memory devices only")
    q = pk.Queue(device, blocking=True)
    wd = pk.valid_workdiv(device, 4)
    out = np.zeros(4, np.float32)
    _warm(q, wd, np.arange(4, dtype=np.float32), out)
    strided = np.arange(8, dtype=np.float32)[::2]
    with pytest.raises(pk.KernelArgumentError, match="C-contiguous"):
        pk.exec(q, wd, scale_into, out, strided, np.float32(2), 4)
    readonly = np.arange(4, dtype=np.float32)
    readonly.flags.writeable = False  # a const argument: another signature, checked and run right
    pk.exec(q, wd, scale_into, out, readonly, np.float32(5), 4)
    np.testing.assert_array_equal(out, np.arange(4) * 5)


def test_an_int_beyond_int64_is_not_taken_for_an_int64(device):
    if not device.is_host_memory:
        pytest.skip("the value checks are the same on every backend: checked once on the host")
    q = pk.Queue(device, blocking=True)
    wd = pk.valid_workdiv(device, 4)
    out = np.zeros(4, np.float32)
    _warm(q, wd, np.arange(4, dtype=np.float32), out)
    with pytest.raises(pk.KernelArgumentError, match="fits neither int64 nor uint64"):
        pk.exec(q, wd, scale_into, out, np.arange(4, dtype=np.float32), np.float32(2), 2**64)


def test_alpyka_debug_set_later_takes_the_checked_path(queue, monkeypatch):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    with pytest.raises((pk.KernelIndexError, pk.AsyncError)) as info:
        pk.exec(queue, wd, scale_into, out, src, np.float32(2), 8)  # out of range: caught only with the checks
        queue.wait()
    err = info.value if isinstance(info.value, pk.KernelIndexError) else info.value.__cause__
    assert isinstance(err, pk.KernelIndexError), repr(info.value)
    queue.wait()


def test_a_capture_records_instead_of_the_fast_path(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    with pk.capture(queue) as graph:
        pk.exec(queue, wd, scale_into, out, src, np.float32(7), 4)
    assert graph.operations == 1
    np.testing.assert_array_equal(download(queue, out), np.arange(4) * 2)  # recorded, not run
    graph.launch()
    np.testing.assert_array_equal(download(queue, out), np.arange(4) * 7)


def _calls_in_one_launch(fn):
    """Python-level function calls (and C calls) made by ``fn()``, counted with sys.setprofile."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def test_a_cached_launch_makes_few_python_calls(queue):
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    if _checked_in_kernel(queue):
        pytest.skip("launches with a device check flag (the GPU emulator's checks) take the checked path")
    a = np.float32(2)
    calls = _calls_in_one_launch(lambda: pk.exec(queue, wd, scale_into, out, src, a, 4))
    queue.wait()
    # pk.exec, launch, the guard, the backend's prepared launch and the native call with what
    # they need (a lock, the queue's bookkeeping): the checked path made 60-150
    limit = 30 if queue.device.backend_name in ("cuda", "rocm") else 24
    assert calls <= limit, calls


def test_a_changed_scalar_is_set_from_its_bytes_on_opencl(queue, monkeypatch):
    """OpenCL: a launch whose scalar changed sets it through pyopencl's setter from bytes, not
    ``Kernel.set_arg`` (which tries the value as each kind of memory object first, a C++
    exception each: 17 us a scalar against 0.2 us); the results follow every value."""
    if queue.device.backend_name != "opencl":
        pytest.skip("pyopencl's argument setters: the opencl backend's")
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(4, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    _warm(queue, wd, src, out)
    import pyopencl as cl

    seen, set_arg = [], cl.Kernel.set_arg
    monkeypatch.setattr(cl.Kernel, "set_arg", lambda knl, i, v: (seen.append(type(v)), set_arg(knl, i, v))[1])
    for a in (5.0, -0.0, 7.0):
        pk.exec(queue, wd, scale_into, out, src, np.float32(a), 4)
        got = download(queue, out)
        np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32) * np.float32(a))
        assert np.signbit(got[0]) == np.signbit(np.float32(a) * 0)
    assert not [t for t in seen if issubclass(t, np.generic)], seen


def test_equal_scalars_reuse_packed_values_but_zero_signs_do_not(queue):
    """A fresh but equal scalar each launch packs as the last one (same_objects); -0.0 equals
    0.0 yet has other bits, so it is packed again."""
    wd = pk.valid_workdiv(queue.device, 4)
    src = _arg(queue, np.arange(1, 5, dtype=np.float32))
    out = pk.Buffer(queue.device, 4, np.float32)
    for a, want in [
        (np.float32(0.0), False),
        (np.float32(-0.0), True),
        (np.float32(-0.0), True),
        (np.float32(0.0), False),
    ]:
        pk.exec(queue, wd, scale_into, out, src, a, 4)
        got = download(queue, out)
        assert not got.any() and np.signbit(got).all() == want, (a, got)
    for value in (3, 3, 5):  # fresh equal objects, then a new value
        pk.exec(queue, wd, scale_into, out, src, np.float32(value), 4)
        np.testing.assert_array_equal(download(queue, out), np.arange(1, 5) * value)


def test_fast_launchers_of_two_queues_and_checked_launches_keep_their_arguments(device):
    """Two queues of one device launch one compiled kernel through fast launchers of their own,
    between checked launches of it (another work division's first ones): each launch computes
    with its own arguments, however the launches interleave."""
    q1, q2 = pk.Queue(device, blocking=True), pk.Queue(device, blocking=False)
    wd = pk.valid_workdiv(device, 4)
    src = _arg(q1, np.arange(4, dtype=np.float32))
    out1, out2, out3 = (pk.Buffer(device, 4, np.float32) for _ in range(3))
    for q, out in ((q1, out1), (q2, out2)):
        _warm(q, wd, src, out)
    for step in range(4):
        a1, a2, a3 = np.float32(3 + step), np.float32(10 + step), np.float32(20 + step)
        pk.exec(q1, wd, scale_into, out1, src, a1, 4)
        pk.exec(q2, wd, scale_into, out2, src, a2, 4)
        pk.exec(q1, pk.valid_workdiv(device, 4), scale_into, out3, src, a3, 4)  # a new work division: checked
        pk.exec(q2, wd, scale_into, out2, src, a2, 4)
        q2.wait()
        for out, a in ((out1, a1), (out2, a2), (out3, a3)):
            np.testing.assert_array_equal(download(q1, out), np.arange(4) * a, err_msg=f"step {step}")
