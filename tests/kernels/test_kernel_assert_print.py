"""``assert`` and ``print`` in kernels (issue 32 item 8), on every backend: a failing assert is a
KernelAssertionError naming the kernel, file, line and message, the ``__cause__`` of the
AsyncError of the next wait, the thread stops there and the queue stays usable; ALPYKA_ASSERTS=0
compiles the asserts out; print() of scalars and string constants prints each thread's line
from the device. Prints and ALPYKA_ASSERTS run in child processes (a device's printf writes to
the C library's stdout; the variable is read when portable is imported)."""

import inspect
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError

ROOT = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S = 300


@pk.kernel
def checked_copy(acc, out, x, n, limit):
    for i in acc.uniform_elements(n):
        assert x[i] < limit, "x above the limit"  # LINE:copy
        out[i] = x[i]


@pk.kernel
def bare_assert(acc, out, n):
    for i in acc.uniform_elements(n):
        assert i < 3  # LINE:bare
        out[i] = 1


@pk.device_function
def checked_sqrt(acc, v):
    assert v >= 0.0, "sqrt of a negative number"  # LINE:device
    return math.sqrt(v)


@pk.kernel
def roots(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = checked_sqrt(acc, x[i])


@pk.kernel
def assert_before_barrier(acc, out, bad):
    sh = acc.shared_array(8, np.int64)
    t, g = acc.thread_idx, acc.global_thread_idx
    assert g != bad, "thread before the barrier"  # LINE:barrier
    sh[t] = g
    acc.sync_block_threads()
    out[g] = sh[acc.block_threads - 1 - t]


@pk.kernel
def prints_an_array(acc, out, n):
    for i in acc.uniform_elements(n):
        print("i =", i, out)  # LINE:print-array


@pk.kernel
def assert_message_not_constant(acc, out, n):
    for i in acc.uniform_elements(n):
        assert i < n, n  # LINE:assert-message


@pk.kernel
def prints_a_nul(acc, out, n):
    for i in acc.uniform_elements(n):
        print("before\x00after", i)  # LINE:print-nul


def _line(marker):
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    return next(k + 1 for k, text in enumerate(lines) if text.rstrip().endswith(f"# LINE:{marker}"))


def _cause(queue):
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    return err.value.__cause__


def test_failing_assert_is_a_kernel_assertion_error_at_wait_and_the_queue_stays_usable(device, queue):
    x = np.arange(16, dtype=np.int64)
    x[11] = 99
    out = upload(queue, np.full(16, -1, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 4, 4), checked_copy, out, upload(queue, x), 16, 50)
    cause = _cause(queue)
    assert isinstance(cause, pk.KernelAssertionError) and isinstance(cause, AssertionError), repr(cause)
    assert isinstance(cause, pk.AlpykaError)
    assert str(cause) == (
        f"kernel 'checked_copy': assertion failed at {__file__}:{_line('copy')}: x above the limit"
    ), str(cause)
    assert download(queue, out)[11] == -1  # the thread stopped at the assert: out[11] never written
    # the queue goes on: the same kernel with good data runs and its assert costs nothing visible
    x[11] = 11
    out2 = upload(queue, np.zeros(16, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 4, 4), checked_copy, out2, upload(queue, x), 16, 50)
    queue.wait()
    np.testing.assert_array_equal(download(queue, out2), x)


def test_assert_without_message_shows_its_condition(device, queue):
    out = upload(queue, np.zeros(8, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), bare_assert, out, 8)
    cause = _cause(queue)
    assert isinstance(cause, pk.KernelAssertionError), repr(cause)
    assert str(cause) == f"kernel 'bare_assert': assertion failed at {__file__}:{_line('bare')}: assert i < 3"
    pk.exec(queue, pk.make_workdiv(device, 1, 3), bare_assert, out, 3)  # passes
    queue.wait()
    np.testing.assert_array_equal(download(queue, out)[:3], 1)


def test_assert_in_a_device_function_names_its_line_and_the_kernel(device, queue):
    x = np.array([4.0, 9.0, -1.0, 16.0])
    out = upload(queue, np.zeros(4))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), roots, out, upload(queue, x), 4)
    cause = _cause(queue)
    assert isinstance(cause, pk.KernelAssertionError), repr(cause)
    assert str(cause) == (
        f"kernel 'roots': assertion failed at {__file__}:{_line('device')} (device function "
        "'checked_sqrt'): sqrt of a negative number"
    ), str(cause)
    x[2] = 25.0
    pk.exec(queue, pk.make_workdiv(device, 1, 4), roots, out, upload(queue, x), 4)
    queue.wait()
    np.testing.assert_array_equal(download(queue, out), [2.0, 3.0, 5.0, 4.0])


def test_assert_failing_before_a_barrier_fails_the_launch_without_a_hang(device, queue):
    """A thread that stops before a barrier the others reach: undefined on a GPU (docs/kernels.md);
    every backend reports the launch failed (the assert, or the emulated GPUs' barrier check), then
    runs the next launch."""
    threads = min(8, device.limits.max_threads_per_block)  # 1 on the CPU backends
    workdiv = pk.WorkDiv(8 // threads, threads, 1)
    out = upload(queue, np.zeros(8, np.int64))
    pk.exec(queue, workdiv, assert_before_barrier, out, 3)
    cause = _cause(queue)
    assert isinstance(cause, (pk.KernelAssertionError, pk.KernelCheckError)), repr(cause)
    if isinstance(cause, pk.KernelAssertionError):
        assert f"{os.path.basename(__file__)}:{_line('barrier')}: thread before the barrier" in str(cause)
    else:
        assert cause.kind == "barrier", repr(cause)
    pk.exec(queue, workdiv, assert_before_barrier, out, 99)
    queue.wait()
    np.testing.assert_array_equal(download(queue, out), np.arange(8).reshape(-1, threads)[:, ::-1].ravel())


@pytest.mark.parametrize(
    "kern, marker, text",
    [
        (prints_an_array, "print-array", "print() cannot print an array (argument 'out'"),
        (
            assert_message_not_constant,
            "assert-message",
            "the message of an assert in a kernel must be a string constant",
        ),
        (prints_a_nul, "print-nul", "print() in kernels cannot print a NUL character"),
    ],
    ids=["print-array", "assert-message", "print-nul"],
)
def test_what_cannot_be_printed_or_asserted_is_a_syntax_error_at_its_line(device, queue, kern, marker, text):
    out = upload(queue, np.zeros(4))
    with pytest.raises(KernelSyntaxError) as err:
        pk.exec(queue, pk.make_workdiv(device, 1, 1), kern, out, 4)
    assert text in str(err.value) and f"{os.path.basename(__file__)}:{_line(marker)}:" in str(err.value)
    assert err.value.lineno == _line(marker)


# ---------------------------------------------------------------------- child processes
_CHILD = """
import sys
import numpy as np
name = sys.argv[1]
if name in ("cuda", "rocm"):
    from portable import _registry
    _registry.emulate([name])
import portable as pk


@pk.kernel
def prints(acc, x, n):
    for i in acc.uniform_elements(n):
        print("thread", i, "of", n, "x =", x[i], "small:", i < 2, np.uint64(i) + np.uint64(7),
              np.float32(0.5) * i + np.float32(0.25), "100% \\"quoted\\"")


@pk.kernel
def fails(acc, out, n):
    for i in acc.uniform_elements(n):
        assert i < 0, "never true"
        out[i] = i + 1


dev = pk.device(name)
q = pk.Queue(dev)
n = 6
x = pk.Buffer(dev, (n,), np.int32)
pk.memcpy(q, x, np.arange(10, 10 + n, dtype=np.int32))
out = pk.Buffer(dev, (n,), np.int64)
pk.memset(q, out, 0)
pk.exec(q, pk.make_workdiv(dev, 2, 3), fails, out, n)
try:
    q.wait()
except pk.AsyncError as exc:
    print("ASSERT FAILED:", type(exc.__cause__).__name__, exc.__cause__, flush=True)
else:
    host = np.zeros(n, np.int64)
    pk.memcpy(q, host, out)
    q.wait()
    print("ASSERT SKIPPED:", list(host), flush=True)
pk.exec(q, pk.make_workdiv(dev, 2, 3), prints, x, n)
q.wait()
"""


def _run_child(tmp_path, backend, **env):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    done = subprocess.run(
        [sys.executable, str(script), backend],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=CHILD_LIMIT_S,
    )
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_print_prints_each_threads_line_and_asserts_are_on_by_default(backend, tmp_path):
    out = _run_child(tmp_path, backend)
    lines = out.splitlines()
    wants = [
        f'thread {i} of 6 x = {10 + i} small: {i < 2} {i + 7} {0.5 * i + 0.25:g} 100% "quoted"' for i in range(6)
    ]  # the order between threads is not defined
    if backend == "cpu_threads":  # blocks on several threads at once: numba prints item by item,
        # so two threads' lines may interleave, even glue (docs/kernels.md): every character of
        # every thread's line is there
        missing = Counter("".join(wants).replace(" ", "")) - Counter("".join(out.split()))
        assert not missing, (missing, out)
    else:
        for want in wants:
            assert lines.count(want) == 1, (want, out)
    assert "ASSERT FAILED: KernelAssertionError kernel 'fails': assertion failed at " in out, out
    line = _CHILD.splitlines().index('        assert i < 0, "never true"') + 1
    assert f"child.py:{line}: never true" in out, out


def test_alpyka_asserts_0_compiles_the_asserts_out(backend, tmp_path):
    out = _run_child(tmp_path, backend, ALPYKA_ASSERTS="0")
    assert "ASSERT SKIPPED: [1, 2, 3, 4, 5, 6]" in out, out


def test_alpyka_asserts_takes_0_or_1(tmp_path):
    env = {**os.environ, "ALPYKA_ASSERTS": "maybe"}
    done = subprocess.run(
        [sys.executable, "-c", "import portable"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_LIMIT_S,
    )
    assert done.returncode != 0
    assert "EnvVarError: environment variable ALPYKA_ASSERTS='maybe': expected 1" in done.stderr, done.stderr
