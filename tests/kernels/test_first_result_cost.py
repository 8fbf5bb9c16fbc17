"""What a new kernel's first result costs on the CPU backends stays small: ``import portable``
loads no backend's compiler (numba, the emitters, pyopencl, cupy, torch), and the numba emitter
folds index arithmetic whose operands are known when it writes the code (``x * 1``, ``x + 0``,
a CPU block's thread index 0), so numba has less to type and compile; the folded kernels give
numpy's values on every backend. The first kernel leaves numba's third-party extensions to the
next numba compile (backends/_numba_start.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload
from backends._numba_emit import emit_numba

#: modules that ``import portable`` must leave to the first kernel (or the first use) that needs them
LAZY = (
    "numba",
    "llvmlite",
    "backends._numba_emit",
    "backends._numba_function",
    "backends._numba_atomics",
    "pyopencl",
    "cupy",
    "torch",
    "scipy",
)


def test_import_portable_loads_no_compiler():
    code = f"import sys, portable; print(sorted(m for m in {LAZY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pk.kernel
def saxpy(acc, out, x, y, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i] + y[i]


@pk.kernel
def known_operands(acc, out, n, k):
    for i in acc.uniform_elements(n):
        t = acc.thread_idx  # 0 on the CPU backends' one-thread blocks
        out[i, 0] = i * 1 + 0
        out[i, 1] = (t * i + 0) * k + i * acc.block_threads
        out[i, 2] = 0 * i + k - 0
        out[i, 3] = (1 * k) * (i - 0) + (0 + i)
        out[i, 4] = (k + 0) * 0 + 1 * 1 - 1


def _source(kernel, *args):
    return emit_numba(kernel.ir(kernel.signature(args), 1, False), serial=True).source


def test_flat_loop_start_is_folded():
    x = np.zeros(8, np.float32)
    src = _source(saxpy, x, x, x, np.float32(2), 8)
    assert "_first = 0\n" in src, src
    assert "np.uint64(0) * np.uint64(1)" not in src and "* np.uint64(1)" not in src, src


def test_flat_loop_bound_is_no_min_call():
    """A wave's end is a conditional expression: numba's min() cost ~25 ms more of a saxpy's
    first compile (185 vs 161 ms of CPU, the best of 6 fresh processes at load 7)."""
    x = np.zeros(8, np.float32)
    src = _source(saxpy, x, x, x, np.float32(2), 8)
    assert "min(" not in src and "_end = _stop if _w + _span > _stop else _w + _span" in src, src


def test_known_operands_folded_in_source():
    src = _source(known_operands, np.zeros((4, 5), np.int64), 4, 3)
    assert "+ np.uint64(0)" not in src and "np.uint64(1) *" not in src, src
    assert "] = 0\n" in src, src  # (k + 0) * 0 + 1 * 1 - 1: a constant


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32])
def test_known_operands_values(device, queue, dtype):
    n, k = 37, dtype(3)
    out = upload(queue, np.full((n, 5), 7, dtype))
    pk.exec(queue, pk.make_workdiv(device, 3, 5), known_operands, out, n, k)
    i = np.arange(n, dtype=np.int64)
    threads = pk.make_workdiv(device, 3, 5).threads[0]
    t = 0  # every thread's own elements: acc.thread_idx * i is 0 only where it is thread 0's
    want = np.stack([i, (t * i) * 3 + i * threads, 0 * i + 3, 3 * i + i, 0 * i], axis=1).astype(dtype)
    got = download(queue, out)
    np.testing.assert_array_equal(got[:, [0, 2, 3, 4]], want[:, [0, 2, 3, 4]])
    if threads == 1:  # one-thread blocks: thread_idx is 0, block_threads 1
        np.testing.assert_array_equal(got[:, 1], want[:, 1])


_DEFERRED = """
import sys
import numpy as np
import portable as pk
from numba.core import entrypoints


@pk.kernel
def fill(acc, out, v, n):
    for i in acc.uniform_elements(n):
        out[i] = v


q = pk.Queue(pk.device(sys.argv[1]))
out = pk.Buffer(q.device, 8, np.int64)
pk.exec(q, pk.valid_workdiv(q.device, 8), fill, out, np.int64(3), 8)
res = np.zeros(8, np.int64)
pk.memcpy(q, res, out)
q.wait()
assert (res == 3).all()
after_kernel = entrypoints._already_initialized
from numba import njit

njit(lambda: 1)()
print(after_kernel, entrypoints._already_initialized)
"""


@pytest.mark.parametrize("backend", ["cpu_serial", "cpu_threads"])
def test_first_kernel_leaves_numba_extensions_to_the_next_compile(backend, tmp_path):
    """alpyka's first kernel does not run the installed packages' numba extensions (its code uses
    none); the process's next numba compile, the user's, still does."""
    env = {**os.environ, "ALPYKA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    program = tmp_path / "first_kernel.py"  # a file: the kernel's source is read from it
    program.write_text(_DEFERRED)
    out = subprocess.run([sys.executable, str(program), backend], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True"], out.stdout + out.stderr[-2000:]


@pk.kernel
def prelude_reads_past_end(acc, out, x, n):
    v = x[n]  # before the element loop: the flat loop's prelude, run by every call of its code
    for i in acc.uniform_elements(n):
        out[i] = v


def test_an_error_of_the_code_is_reported_by_the_launch_as_before(device, queue, monkeypatch):
    """The CPU backends call a new plan's code once with no block at the first exec (to compile
    it there); an error that call meets is the launch's to report, at the wait as always."""
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    x, out = upload(queue, np.arange(3.0)), upload(queue, np.zeros(3))
    pk.exec(queue, pk.make_workdiv(device, 1, 3), prelude_reads_past_end, out, x, 3)
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert isinstance(err.value.__cause__, pk.KernelIndexError), repr(err.value.__cause__)
