"""Processes that start with the same kernel compile it once: numba's compile of a cached kernel
function takes a lock beside its index (portable/compiler/_cache.py), so a process that finds
another compiling it waits and then loads what that one saved (the workers and child processes
of a test run share ``ALPYKA_CACHE_DIR``)."""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: builds the kernel's module (numba compiles at the first call), says where numba's index is,
#: waits for "go", launches, and prints how often numba compiled it and loaded it from disk
_CHILD = """
import sys
import numpy as np
import portable as pk
from backends._host_launch import make_plan
from portable.compiler._cache import _index
from portable.spi import signature_key


@pk.kernel
def twice_plus_one(acc, out, x):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] = 2.0 * x[i] + 1.0


q = pk.Queue(pk.device("cpu_serial"))
out, x = pk.Buffer(q.device, 8, np.float64), pk.Buffer(q.device, 8, np.float64)
pk.memcpy(q, x, np.arange(8.0))
plan = make_plan("cpu_serial", twice_plus_one, signature_key((out, x), "twice_plus_one"), 1, False)
print(_index(plan.fn._cache), flush=True)
sys.stdin.readline()
pk.exec(q, pk.make_workdiv(q.device, 1, 8), twice_plus_one, out, x)
got = np.zeros(8)
pk.memcpy(q, got, out)
q.wait()
assert list(got) == [2.0 * i + 1.0 for i in range(8)], got
stats = plan.fn.stats
print(sum(stats.cache_misses.values()), sum(stats.cache_hits.values()), flush=True)
"""


@pytest.mark.alpyka_backends("cpu_serial")
def test_two_processes_compile_one_kernel_once(tmp_path):
    """Two processes launch a kernel no one compiled yet, at once (both released by one lock
    held here): one compiles it, the other waits and loads it from numba's disk cache."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_CACHE_DIR": str(cache), "ALPYKA_CHECK_HIP": "0"}
    children = [
        subprocess.Popen(
            [sys.executable, str(script)], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        index = {Path(p.stdout.readline().strip()) for p in children}
        assert len(index) == 1 and not next(iter(index)).exists(), index  # one function, not compiled yet
        lock = next(iter(index)).with_suffix(".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as a process compiling it would
            for p in children:
                p.stdin.write("go\n")
                p.stdin.flush()
            time.sleep(1.0)
            assert all(p.poll() is None for p in children)  # both wait for the lock
        finally:
            os.close(fd)
        counts = [tuple(int(n) for n in p.stdout.readline().split()) for p in children]
        assert [p.wait(timeout=300) for p in children] == [0, 0]
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
            p.stdout.close()
    assert sorted(counts) == [(0, 1), (1, 0)], counts  # (compiled, loaded from disk) per process


def test_the_gpu_emulator_builds_one_library_once(tmp_path, monkeypatch):
    """The GPU emulator's C++ build of a kernel takes the same kind of lock (beside the library in
    the cache): two builders of one new library at once, here two threads (a lock file is taken
    per open file, so they wait for each other as processes do), compile it once."""
    from backends import _shared_libraries
    from backends._c_source import CSource
    from backends.emulator import cuda_on_cpu

    if cuda_on_cpu.compiler_problem() is not None:
        pytest.skip(cuda_on_cpu.compiler_problem())
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    builds = []
    build_library = _shared_libraries.build_library

    def counted(*args):
        builds.append(args[0].source_name)
        time.sleep(0.5)  # the other builder arrives meanwhile
        return build_library(*args)

    monkeypatch.setattr(_shared_libraries, "build_library", counted)
    text = 'extern "C" __global__ void alpyka_add_locked(int* p) { atomicAdd(p, 5); }\n'
    entry = "alpyka_add_locked"
    src = CSource(text=text, entry=entry, dialect="cuda", args=[], line_map={}, source_file="k.py", kernel_name="add")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda _: cuda_on_cpu.build(src, "alpyka_add_locked"), range(2)))
    assert builds == ["alpyka_add_locked.cu"], builds
    for compiled in built:
        out = np.zeros(1, np.int32)
        cuda_on_cpu.run(compiled, (1,), (4,), (np.uint64(out.ctypes.data),), 0)
        assert out[0] == 20
