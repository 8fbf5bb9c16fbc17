"""Compile-time errors (text and line), launch-time argument errors, ALPYKA_DEBUG range checks."""

import inspect

import bad_kernels as bk
import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import (
    Particles,
    copy_x,
    download,
    host_queue,
    raised_by_the_front_end,
    record_uniform,
    upload,
)
from portable.compiler import KernelArgumentError, KernelIndexError, KernelSyntaxError, KernelValueError


def _line(marker):
    lines = inspect.getsource(bk).splitlines()
    return next(k + 1 for k, text in enumerate(lines) if text.rstrip().endswith(f"# ERR:{marker}"))


CASES = [
    (bk.uses_print, "print", "print() cannot print an array (argument 'out'"),
    (bk.uses_comprehension, "comprehension", "list comprehensions are not allowed"),
    (bk.uses_try, "try", "try/except is not allowed"),
    (bk.returns_value, "return", "kernels return nothing"),
    (bk.calls_recursive, "recursion", "recursion is not allowed"),
    (bk.captures_array, "closure", "pass arrays as kernel arguments"),
    (bk.captures_list, "global", "may be only int/float/bool"),
    (bk.unknown_acc_member, "acc", "acc has no member 'warp_idx'"),
    (bk.calls_plain_function, "plain", "plain Python function"),
    (bk.alpaka_style_member, "camel", "acc has no member 'syncBlockThreads'; did you mean acc.sync_block_threads?"),
    (bk.range_of_a_float, "range-float", "range() takes integers, got float64 '1.5'"),
    (bk.range_step_zero, "range-step", "range() arg 3 must not be zero"),
    (bk.int_of_nan, "int-nan", "nan"),
]


@pytest.mark.parametrize("kern,marker,text", CASES, ids=[c[1] for c in CASES])
def test_compile_errors_name_file_line_and_rule(kern, marker, text):
    """Once, on cpu_serial: a front-end error is the same on every backend (the next test)."""
    q = host_queue()
    out = upload(q, np.zeros(4))
    with pytest.raises(KernelSyntaxError) as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), kern, out, 3)
    msg = str(err.value)
    assert text in msg
    assert f"bad_kernels.py:{_line(marker)}:" in msg, msg
    assert err.value.lineno == _line(marker)
    assert raised_by_the_front_end(err)


def test_a_compile_error_reaches_the_caller_on_every_backend(device, queue):
    """Every backend's launch path asks the front end for the kernel's IR before it generates
    anything, and passes its error on as it is (the cases above run once, on cpu_serial)."""
    out = upload(queue, np.zeros(4))
    with pytest.raises(KernelSyntaxError) as err:
        pk.exec(queue, pk.make_workdiv(device, 1, 1), bk.uses_try, out, 3)
    assert "try/except is not allowed" in str(err.value) and f"bad_kernels.py:{_line('try')}:" in str(err.value)
    assert err.value.lineno == _line("try") and raised_by_the_front_end(err)


def test_write_through_const_view_fails_at_compile_time():
    q = host_queue()
    c = pk.PortableCollection(Particles, 8, q)
    with pytest.raises(KernelSyntaxError) as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), bk.writes_const_view, c.view(), c.const_view(), 8)
    assert "const" in str(err.value) and f"bad_kernels.py:{_line('const')}:" in str(err.value)
    assert raised_by_the_front_end(err)


def test_argument_count_and_type(device, queue):
    a = upload(queue, np.zeros(4, np.int64))
    wd = pk.make_workdiv(device, 1, 1)
    with pytest.raises(KernelArgumentError, match="takes 3 argument"):
        pk.exec(queue, wd, record_uniform, a, 4)
    with pytest.raises(KernelArgumentError, match=r"argument 'n' \(#2 after acc\) is a str"):
        pk.exec(queue, wd, record_uniform, a, a, "4")
    with pytest.raises(TypeError, match="not a kernel"):
        pk.exec(queue, wd, lambda acc: None)


def test_an_argument_of_no_kernel_type_is_named_with_its_fix(device, queue):
    """A collection, a list or a tensor where a view or an array goes: the message named the
    argument by a number counted one way ("argument 0 is a PortableCollection") where the int's
    said "argument #3 after acc" and the use's "argument 'n' (#2 after acc)": now by its name, as
    the use's, with the fix for that type."""
    c = pk.PortableCollection(Particles, 8, queue)
    wd = pk.make_workdiv(device, 1, 1)
    a = upload(queue, np.zeros(4, np.int64))
    said = r"argument 'hits' \(#1 after acc\) is a PortableCollection; pass coll.view"
    with pytest.raises(KernelArgumentError, match=said):
        pk.exec(queue, wd, record_uniform, a, c, 4)
    with pytest.raises(KernelArgumentError, match=r"argument 'owner' \(#0 after acc\) is a list; pass a numpy array"):
        pk.exec(queue, wd, record_uniform, [1, 2], a, 4)
    with pytest.raises(KernelArgumentError, match=r"argument 'n' \(#2 after acc\): the integer 18446744073709551616"):
        pk.exec(queue, wd, record_uniform, a, a, 2**64)


def test_argument_of_the_wrong_kind_names_kernel_argument_and_type(device, queue):
    c = pk.PortableCollection(Particles, 8, queue)
    buf = upload(queue, np.zeros(8, np.float32))
    wd = pk.make_workdiv(device, 1, 1)
    view_hint = "pass a view of a collection"
    cases = [
        (
            bk.scaled_copy,
            (c.view(), np.float32(2), np.float32(2), 8),
            "view-arg",
            r"argument 'inp' \(#1 after acc\) has type float32 scalar, but the kernel uses it as a SoA view \(inp.x\)",
        ),
        (
            bk.scaled_copy,
            (c.view(), buf, np.float32(2), 8),
            "view-arg",
            r"argument 'inp' \(#1 after acc\) has type 1-d float32 buffer, but the kernel uses it as a SoA view",
        ),
        (
            bk.fill_array,
            (2.5, 8),
            "array-arg",
            r"argument 'out' \(#0 after acc\) has type float64 scalar, but the kernel uses it as an array \(out\[i\]\)",
        ),
        (
            bk.fill_array,
            (c.view(), 8),
            "array-arg",
            r"argument 'out' \(#0 after acc\) has type Particles view, but the kernel uses it as an array",
        ),
    ]
    for kern, args, marker, text in cases:
        with pytest.raises(KernelArgumentError, match=text) as err:
            pk.exec(queue, wd, kern, *args)
        msg = str(err.value)
        assert f"kernel {kern.__name__!r} (" in msg and f"bad_kernels.py:{_line(marker)})" in msg, msg
        assert "Var" not in msg and (view_hint in msg) == (marker == "view-arg"), msg


def test_view_of_another_device(backend, device, queue):
    others = [b for b in pk.available_backends() if pk.device(b).memory_space != device.memory_space]
    if not others:
        pytest.skip("no available backend with another memory space")
    other_q = pk.Queue(pk.device(others[0]))
    c = pk.PortableCollection(Particles, 8, other_q)
    mine = pk.PortableCollection(Particles, 8, queue)
    with pytest.raises(KernelArgumentError, match="lives on") as err:
        pk.exec(queue, pk.make_workdiv(device, 1, 1), copy_x, mine.view(), c.const_view(), 8)
    # the same error on every backend: the CPU backends' was a KernelArgumentError only
    assert isinstance(err.value, pk.DeviceMismatch) and type(err.value).__name__ == "KernelDeviceMismatch"
    other_q.wait()


def test_workdiv_the_device_cannot_run(device, queue):
    a = upload(queue, np.zeros(4, np.int64))
    too_many = device.limits.max_threads_per_block + 1
    with pytest.raises(pk.WorkDivError):
        pk.exec(queue, pk.WorkDiv(1, too_many, 1), record_uniform, a, a, 4)


def test_debug_range_check_names_kernel_and_column(device, queue, monkeypatch):
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    c = pk.PortableCollection(Particles, 10, queue)
    pk.exec(queue, pk.make_workdiv(device, 2, 5), bk.reads_past_end, c.view(), 10)
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    msg = str(err.value.__cause__ or err.value)
    assert "reads_past_end" in msg and "column 'x'" in msg and "index out of range" in msg
    buf = upload(queue, np.zeros((4, 2)))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), bk.buffer_past_end, buf, 4)
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert "buffer_past_end" in str(err.value.__cause__) and "argument 'buf'" in str(err.value.__cause__)
    assert isinstance(err.value.__cause__, KernelIndexError)
    monkeypatch.delenv("ALPYKA_DEBUG")
    pk.exec(queue, pk.make_workdiv(device, 1, 4), bk.reads_past_end, c.view(), 5)  # in range: fine
    queue.wait()


def test_range_step_of_zero_at_run_time_is_a_kernel_error(queue):
    """A step known only at run time: 0 raises KernelValueError naming the kernel's line on every
    backend (numba raised a bare ValueError, the C backends ran no iteration and said nothing)."""
    out = upload(queue, np.zeros(4))
    pk.exec(queue, pk.WorkDiv(1, 1, 1), bk.range_step_at_run_time, out, 0, 3, 0)
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    cause = err.value.__cause__
    assert isinstance(cause, KernelValueError) and isinstance(cause, ValueError), repr(cause)
    assert "range_step_at_run_time" in str(cause) and "range() step is 0" in str(cause)
    assert f"bad_kernels.py:{_line('run-time-step')})" in str(cause)
    for start, stop, step, trips in [(0, 5, 2, 3), (5, 0, -2, 3), (0, 3, -1, 0)]:
        out = upload(queue, np.zeros(4))
        pk.exec(queue, pk.WorkDiv(1, 1, 1), bk.range_step_at_run_time, out, start, stop, step)
        assert download(queue, out)[0] == trips, (start, stop, step)


@pk.kernel
def writes_past_end_for_the_debug_switch(acc, out, n):
    for i in acc.uniform_elements(n):
        out.x[i + 1] = 1.0


@pytest.mark.parametrize(
    "raw, on",
    [("off", False), ("false", False), ("No", False), (" 0 ", False), ("on", True), ("TRUE", True), ("yes", True)],
)
def test_debug_takes_the_boolean_spellings_of_alpyka_asserts(device, queue, monkeypatch, raw, on):
    """``ALPYKA_DEBUG=off|false|no`` turns the range checks off (they turned them on: any value
    but ``0`` did), ``on|true|yes`` on; another value is an EnvVarError naming it. The write one
    past the end lands in the column's padding (10 float32 in 128 bytes): harmless unchecked;
    the GPU emulator's own checks are off to see ALPYKA_DEBUG's alone (its range checks are
    compiled in with them, so the kernel is this test's own: no plan compiled with them on)."""
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")
    monkeypatch.setenv("ALPYKA_DEBUG", raw)
    c = pk.PortableCollection(Particles, 10, queue)
    pk.exec(queue, pk.make_workdiv(device, 2, 5), writes_past_end_for_the_debug_switch, c.view(), 10)
    if on:
        with pytest.raises(pk.AsyncError) as err:
            queue.wait()
        assert isinstance(err.value.__cause__, KernelIndexError), repr(err.value.__cause__)
    else:
        queue.wait()
    monkeypatch.setenv("ALPYKA_DEBUG", "maybe")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_DEBUG='maybe': expected 1"):
        pk.exec(queue, pk.make_workdiv(device, 2, 5), writes_past_end_for_the_debug_switch, c.view(), 5)
    queue.wait()
