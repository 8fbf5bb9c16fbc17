"""The cupy stand-in runs the generated CUDA and HIP source itself (cuda_on_cpu.h/.py): many
threads per block, real barriers, a seeded order of a block's threads between barriers (so a
missing barrier gives a wrong result), and one clear reason where no C++ compiler exists."""

from __future__ import annotations

import os

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.blocks import BLOCK, block_sums
from backends import _shared_libraries
from backends.emulator import cuda_on_cpu, fake_cupy_kernels

# the rocm stand-in runs this file too: the stand-in's own tests: HIP's text compiled for the CPU
pytestmark = pytest.mark.hip_differs
standin = pytest.mark.alpyka_backends("cuda", "rocm")


@pytest.fixture
def on_the_standin(backend):
    if backend not in fake_cupy_kernels.served_here():
        pytest.skip(f"{backend} is not the stand-in here (a real GPU: a missing barrier may go unnoticed)")
    if fake_cupy_kernels.executor_name() != "cpp":
        pytest.skip("the stand-in runs OpenCL twins in this run (ALPYKA_EMULATE_EXEC=opencl)")


@pk.kernel
def sums_missing_loop_barrier(acc, out, x, n):
    """alpyka_testing.backends.blocks.block_sums without the barrier inside the tree loop."""
    sh = acc.shared_array(BLOCK, np.float64)
    t = acc.thread_idx
    s = 0.0
    for i in acc.uniform_elements(n):
        s += x[i]
    sh[t] = s
    acc.sync_block_threads()
    stride = acc.block_threads // 2
    while stride > 0:
        if t < stride:
            sh[t] += sh[t + stride]
        stride //= 2
    if acc.once_per_block():
        out[acc.block_idx] = sh[0]


@pk.kernel
def reverse_without_barrier(acc, out, x, n):
    """Reads another thread's shared word with no barrier at all (runs without fibers)."""
    sh = acc.shared_array(BLOCK, np.float32)
    t = acc.thread_idx
    base = acc.block_idx * acc.block_threads
    sh[t] = x[base + t]
    out[base + t] = sh[acc.block_threads - 1 - t]


@pk.kernel
def shift_without_barrier(acc, out, x, n):
    """Reads the previous thread's word: right whenever threads run in index order, which a GPU
    does not promise; the stand-in's shuffled order must expose it."""
    sh = acc.shared_array(BLOCK, np.float32)
    t = acc.thread_idx
    base = acc.block_idx * acc.block_threads
    sh[t] = x[base + t]
    if t > 0:
        out[base + t] = sh[t - 1]


@pk.kernel
def count_block(acc, out, n):
    sh = acc.shared_array(1024, np.int32)
    t = acc.thread_idx
    sh[t] = 1
    acc.sync_block_threads()
    if t == 0:
        s = 0
        for k in range(acc.block_threads):
            s += sh[k]
        out[acc.block_idx] = s


def _run(queue, device, kernel, x, blocks):
    out = pk.Buffer(device, blocks, np.float64, queue=queue)
    buf = pk.Buffer(device, x.shape, x.dtype, queue=queue)
    pk.memcpy(queue, buf, x)
    pk.exec(queue, pk.WorkDiv(blocks, BLOCK, 1), kernel, out, buf, x.size)
    host = np.empty(blocks)
    pk.memcpy(queue, host, out)
    queue.wait()
    return host


def _expected(x, blocks):
    idx = np.arange(x.size)
    return np.bincount((idx % (blocks * BLOCK)) // BLOCK, weights=x, minlength=blocks)


@standin
@pytest.mark.parametrize("seed", ["1", "2", "12345"])
def test_a_missing_barrier_gives_a_wrong_result_and_the_barrier_fixes_it(
    device, queue, on_the_standin, monkeypatch, seed
):
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", seed)
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")  # the racy kernel's value is the point, not the racecheck's report
    x = np.random.default_rng(7).random(4 * BLOCK * 3)
    blocks = 4
    want = _expected(x, blocks)
    np.testing.assert_allclose(_run(queue, device, block_sums, x, blocks), want, rtol=1e-12)
    got = _run(queue, device, sums_missing_loop_barrier, x, blocks)
    assert not np.allclose(got, want, rtol=1e-9), "a block reduction without its loop barrier came out right"


@standin
@pytest.mark.parametrize("kernel", [reverse_without_barrier, shift_without_barrier], ids=["reverse", "shift"])
def test_threads_of_a_block_that_never_synchronise_do_not_see_each_others_writes(
    device, queue, on_the_standin, kernel, monkeypatch
):
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "0")  # the schedule's values are the point, not the checks' report
    n = 2 * BLOCK
    x = np.arange(1, n + 1, dtype=np.float32)
    xb = pk.Buffer(device, n, np.float32, queue=queue)
    pk.memcpy(queue, xb, x)
    out = pk.Buffer(device, n, np.float32, queue=queue)
    pk.memset(queue, out, 0)
    pk.exec(queue, pk.WorkDiv(2, BLOCK, 1), kernel, out, xb, n)
    got = np.empty(n, np.float32)
    pk.memcpy(queue, got, out)
    queue.wait()
    blocks = x.reshape(2, BLOCK)
    if kernel is reverse_without_barrier:
        want = blocks[:, ::-1].ravel()
    else:
        want = np.concatenate([np.zeros((2, 1), np.float32), blocks[:, :-1]], axis=1).ravel()
    assert (got != want).sum() > BLOCK // 4, "threads ran in an order that hides the missing barrier"


@standin
def test_the_source_that_runs_is_the_generated_cuda_text(device, queue, on_the_standin, tmp_path, monkeypatch):
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path))
    x = np.ones(BLOCK, np.float64)
    device.backend.plans(block_sums).clear()  # built anew, into this test's cache directory
    assert _run(queue, device, block_sums, x, 1)[0] == BLOCK
    libs = list((tmp_path / "cuda_on_cpu").glob("alpyka_block_sums-*.so"))
    assert libs, "no library compiled from the kernel's CUDA/HIP source"


@standin
def test_many_workers_with_full_blocks_of_fibers(device, queue, on_the_standin, monkeypatch):
    """32 OS threads, each with a block of 1024 fibers: the stacks are one mapping per worker (a
    mapping per stack exhausted vm.max_map_count on many-core machines)."""
    monkeypatch.setenv("ALPYKA_EMULATE_THREADS", "32")
    out = pk.Buffer(device, 64, np.int32, queue=queue)
    pk.exec(queue, pk.WorkDiv(64, 1024, 1), count_block, out, 64 * 1024)
    got = np.empty(64, np.int32)
    pk.memcpy(queue, got, out)
    queue.wait()
    assert (got == 1024).all(), got


def test_no_compiler_is_one_reason_naming_the_fix(monkeypatch):
    monkeypatch.setattr(cuda_on_cpu, "_probed", False)
    monkeypatch.setattr(cuda_on_cpu, "_compiler", None)
    monkeypatch.setattr(cuda_on_cpu, "_problem", None)
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setenv("PATH", "/nonexistent")
    why = cuda_on_cpu.compiler_problem()
    assert why is not None and "no C++ compiler" in why and "install g++" in why, why
    assert "no-such-compiler: not found" in why
    monkeypatch.setattr(fake_cupy_kernels, "executor_name", lambda: "cpp")
    assert fake_cupy_kernels.why_not() == why
    with pytest.raises(pk.BackendUnavailable, match="ALPYKA_EMULATE.*no C\\+\\+ compiler"):
        fake_cupy_kernels.load("cuda")  # what the registry records as the emulated backend's reason


def test_a_compile_error_shows_the_kernel_line(tmp_path, monkeypatch):
    if cuda_on_cpu.compiler_problem() is not None:
        pytest.skip(cuda_on_cpu.compiler_problem())
    from backends._c_build import KernelBuildError
    from backends._c_source import CSource

    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path))
    text = 'extern "C" __global__ void alpyka_bad(int* p) {\n    undefined_thing(p);  // k.py:7\n}\n'
    src = CSource(
        text=text, entry="alpyka_bad", dialect="cuda", args=[], line_map={2: 7}, source_file="k.py", kernel_name="bad"
    )
    with pytest.raises(KernelBuildError, match=r"(?s)kernel line\(s\): k.py:7.*>>\s+2 \|     undefined_thing"):
        cuda_on_cpu.build(src, "alpyka_bad")


# ---------------------------------------------------------------------- the library cache
# Each run is a fresh process: the dynamic loader hands a process the library it already loaded
# from a path, so what a process finds on disk is only seen by the next one.
_ADD = """\
import sys, warnings
warnings.simplefilter("always")
import numpy as np
from backends._c_source import CSource
from backends.emulator import cuda_on_cpu

for k in map(int, sys.argv[1:]):
    text = 'extern "C" __global__ void alpyka_add(int* p) { atomicAdd(p, %d); }\\n' % k
    src = CSource(text=text, entry="alpyka_add", dialect="cuda", args=[], line_map={}, source_file="k.py",
                  kernel_name="add")
    out = np.zeros(1, np.int32)
    cuda_on_cpu.run(cuda_on_cpu.build(src, "alpyka_add"), (1,), (4,), (np.uint64(out.ctypes.data),), 0)
    print(int(out[0]))
"""


def _needs_compiler():
    if cuda_on_cpu.compiler_problem() is not None:
        pytest.skip(cuda_on_cpu.compiler_problem())


def _add(tmp_path, cache, *ks, prefix=()):
    """Run alpyka_add(k) for each k in a fresh process: (the sums, the AlpykaWarning lines)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "add.py"
    script.write_text(_ADD)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "ALPYKA_CACHE_DIR": str(cache), "ALPYKA_CHECK_HIP": "0"}
    done = subprocess.run(
        [*prefix, sys.executable, str(script), *map(str, ks)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"rc {done.returncode}: {done.stderr[-3000:]}"
    return [int(x) for x in done.stdout.split()], [ln for ln in done.stderr.splitlines() if "AlpykaWarning" in ln]


def _libs(cache):
    return sorted((cache / "cuda_on_cpu").glob("alpyka_add-*.so"), key=lambda p: p.stat().st_mtime_ns)


@pytest.mark.parametrize("damage", ["swapped", "truncated", "bytes appended", "not tagged"])
def test_a_cached_library_that_is_not_the_one_built_is_built_again(tmp_path, damage):
    """A swapped library gave a wrong sum silently, a truncated one killed the interpreter
    (SIGBUS): a library is loaded only with its own tag."""
    _needs_compiler()
    cache = tmp_path / "cache"
    assert _add(tmp_path, cache, 1, 2) == ([4, 8], [])
    one, two = _libs(cache)
    if damage == "swapped":
        a, b = one.read_bytes(), two.read_bytes()
        one.write_bytes(b)
        two.write_bytes(a)
    elif damage == "truncated":
        one.write_bytes(one.read_bytes()[: one.stat().st_size // 2])
    elif damage == "bytes appended":
        one.write_bytes(one.read_bytes() + b"\0" * 40)
    else:  # the library alone, as a compiler leaves it
        one.write_bytes(one.read_bytes()[: -(len(_shared_libraries.TAG_MARK) + 32)])
    sums, said = _add(tmp_path, cache, 1)
    assert sums == [4]
    assert len(said) == 1 and one.name in said[0] and "built again" in said[0], said
    assert _add(tmp_path, cache, 1) == ([4], [])  # the rebuilt library is tagged: loaded


@pytest.mark.parametrize("how", ["writable by others", "another user's"])
def test_a_library_in_a_cache_that_is_not_private_is_not_loaded(tmp_path, how):
    _needs_compiler()
    if how == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    cache = tmp_path / "cache"
    assert _add(tmp_path, cache, 1, 2) == ([4, 8], [])
    one, two = _libs(cache)
    one.write_bytes(two.read_bytes())  # planted: tagged, but for another kernel
    if how == "writable by others":
        (cache / "cuda_on_cpu").chmod(0o777)
    else:
        os.chown(cache, 65534, 65534)
    before = sorted(p.name for p in (cache / "cuda_on_cpu").iterdir())
    sums, said = _add(tmp_path, cache, 1, 3)
    assert sums == [4, 12]
    assert len(said) == 1 and "not private to this user" in said[0], said
    assert sorted(p.name for p in (cache / "cuda_on_cpu").iterdir()) == before, "wrote into a shared cache"


@pytest.mark.parametrize("how", ["not a directory", "full"])
def test_a_cache_that_cannot_be_written_builds_in_a_private_temporary_directory(tmp_path, how):
    """Read-only or full: the emulator raised OSError / KernelBuildError (ld: no space left); it
    builds in a private temporary directory instead, with one warning naming ALPYKA_CACHE_DIR."""
    _needs_compiler()
    prefix: tuple[str, ...] = ()
    if how == "not a directory":
        (tmp_path / "file").write_text("")
        cache = tmp_path / "file" / "cache"
    else:  # a 64 KiB file system: room for the directories and the secret, not for a library
        import shutil
        import subprocess

        cache = tmp_path / "cache"
        cache.mkdir(mode=0o700)
        mount = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size=64k,mode=0700 tmpfs "{cache}" && exec "$@"', "-"]
        if shutil.which("unshare") is None or subprocess.run([*mount, "true"], capture_output=True).returncode:
            pytest.skip("a small file system for the cache needs unshare -m and mount (root, CAP_SYS_ADMIN)")
        prefix = tuple(mount)
    sums, said = _add(tmp_path, cache, 1, 2, prefix=prefix)
    assert sums == [4, 8]
    assert len(said) == 1 and "ALPYKA_CACHE_DIR" in said[0] and "cannot be written" in said[0], said
