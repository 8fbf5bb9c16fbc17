"""A kernel cache lock held by a stopped process (SIGSTOP, a debugger) costs the others a bounded
wait, ``ALPYKA_LOCK_WAIT`` seconds (portable/compiler/_locks.py): then they compile the kernel
themselves, with one warning naming the holder, and what they write in the cache is still
verified when read back. Here a second process holds the lock and is stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from portable._errors import AlpykaWarning, EnvVarError
from portable.compiler import _locks, build_lock

ROOT = Path(__file__).resolve().parents[2]

#: launches a new kernel on the backend argv[1] once "go" is read, after printing the lock file
#: that guards its compile; prints the AlpykaWarnings it got and numba's (compiled, loaded) counts
_CHILD = """
import json, sys, warnings
import numpy as np
import portable as pk
from portable._errors import AlpykaWarning

backend, cache = sys.argv[1], sys.argv[2]


@pk.kernel
def twice_plus_three(acc, out, x):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] = 2.0 * x[i] + 3.0


q = pk.Queue(pk.device(backend))
out, x = pk.Buffer(q.device, 8, np.float64), pk.Buffer(q.device, 8, np.float64)
pk.memcpy(q, x, np.arange(8.0))
plan = None
if backend == "cpu_serial":
    from backends._host_launch import make_plan
    from portable.compiler._cache import _index
    from portable.spi import signature_key

    plan = make_plan(backend, twice_plus_three, signature_key((out, x), "twice_plus_three"), 1, False)
    print(str(_index(plan.fn._cache))[: -len(".nbi")] + ".lock", flush=True)
else:
    print(cache + "/opencl-programs/lock", flush=True)
sys.stdin.readline()
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    pk.exec(q, pk.make_workdiv(q.device, 1, 8), twice_plus_three, out, x)
    got = np.zeros(8)
    pk.memcpy(q, got, out)
    q.wait()
assert list(got) == [2.0 * i + 3.0 for i in range(8)], got
counts = [0, 0] if plan is None else [sum(plan.fn.stats.cache_misses.values()), sum(plan.fn.stats.cache_hits.values())]
print(json.dumps([[str(w.message) for w in said if issubclass(w.category, AlpykaWarning)], counts]), flush=True)
"""

#: holds the lock file argv[1]: a flock (numba's, the emulator's) or, with "exists", a file that
#: exists while held (pyopencl's); says "held", then sleeps until stopped and killed
_HOLDER = """
import fcntl, os, sys, time
if sys.argv[2] == "exists":
    fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_EXCL)
else:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


class _StoppedHolder:
    """A process holding the lock file ``path`` and stopped (SIGSTOP), killed by its pid at the end."""

    def __init__(self, path: Path, how: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), how], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"
        os.kill(self.proc.pid, signal.SIGSTOP)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def _child(
    backend: str, cache: Path, hold: str | None, directory: bool = False
) -> tuple[list[str], list[int], int | None]:
    """Run :data:`_CHILD` on ``backend`` with a 1 s lock wait, while a stopped process holds its
    lock (``hold``: how, None for no holder; ``directory``: numba's lock of the whole directory,
    not the kernel's compile lock): (its warnings, numba's counts, the holder's pid)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_CACHE_DIR": str(cache), "ALPYKA_LOCK_WAIT": "1"}
    script = cache.parent / "child.py"  # a kernel's source is read from its file
    script.write_text(_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), backend, str(cache)],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    holder = None
    try:
        lock = Path(child.stdout.readline().strip())
        if directory:
            lock = lock.with_name("alpyka.lock")
        if hold is not None:
            lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            holder = _StoppedHolder(lock, hold)
        out, _ = child.communicate("go\n", timeout=300)  # without a bounded wait: forever (numba), 60 s (pyopencl)
        assert child.returncode == 0, out
        said, counts = json.loads(out.strip().splitlines()[-1])
        return said, counts, holder.proc.pid if holder else None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if holder is not None:
            holder.close()


@pytest.mark.alpyka_backends("cpu_serial")
def test_a_stopped_holder_of_numbas_compile_lock_costs_a_bounded_wait(tmp_path):
    """The first process compiles anyway (one warning naming the stopped holder); a second one,
    the holder still stopped, loads what the first cached: the entry was written and tagged."""
    cache = tmp_path / "cache"
    said, counts, pid = _child("cpu_serial", cache, "flock")
    assert counts == [1, 0]  # compiled here, not loaded
    assert len(said) == 1 and f"process {pid} (" in said[0] and "stopped" in said[0], said
    assert "ALPYKA_LOCK_WAIT" in said[0] and "compiling here" in said[0]
    said, counts, _ = _child("cpu_serial", cache, "flock")
    assert counts == [0, 1], said  # loaded from numba's cache, its tags verified


@pytest.mark.alpyka_backends("cpu_serial")
def test_a_stopped_holder_of_numbas_directory_lock_leaves_the_cache_alone(tmp_path):
    """numba's files of a directory are read and written under one lock (files and tags seen
    together): held by a stopped process, the kernel is compiled, neither loaded nor cached."""
    cache = tmp_path / "cache"
    said, counts, pid = _child("cpu_serial", cache, "flock", directory=True)
    assert counts == [1, 0]
    assert len(said) == 1 and f"process {pid} (" in said[0] and "numba's cache left alone" in said[0], said
    assert not list(cache.rglob("*.nbi")) and not list(cache.rglob("*.nbc"))  # nothing written


@pytest.mark.alpyka_backends("opencl")
def test_a_stopped_holder_of_pyopencls_cache_lock_costs_a_bounded_wait(tmp_path):
    """pyopencl's program cache lock (a file that exists while held; pyopencl itself waits a
    minute, then fails the cache): this process builds without the cache after the wait, with
    one warning naming the holder and the lock file."""
    said, _, pid = _child("opencl", tmp_path / "cache", "exists")
    assert len(said) == 1 and f"process {pid} (" in said[0] and "stopped" in said[0], said
    assert "opencl-programs/lock" in said[0] and "without the cache" in said[0]


def test_build_lock_waits_for_a_stopped_holder_a_bounded_time(tmp_path, monkeypatch):
    """The GPU emulator's library builds take :func:`build_lock` too: held by a stopped process
    it yields after ``ALPYKA_LOCK_WAIT`` with one warning; a free one is taken at once, silently."""
    monkeypatch.setenv("ALPYKA_LOCK_WAIT", "0.3")
    monkeypatch.setattr(_locks, "_warned", set())
    lock = tmp_path / "lib.so.lock"
    holder = _StoppedHolder(lock, "flock")
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(2):
                with build_lock(lock):
                    pass
    finally:
        holder.close()
    said = [str(w.message) for w in said if issubclass(w.category, AlpykaWarning)]
    assert len(said) == 1 and f"process {holder.proc.pid} (" in said[0], said  # once per process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with build_lock(lock):  # the holder is gone: the lock is free
            pass


def test_a_lock_wait_that_is_not_a_number_names_the_variable(monkeypatch):
    monkeypatch.setenv("ALPYKA_LOCK_WAIT", "soon")
    with pytest.raises(EnvVarError, match="ALPYKA_LOCK_WAIT='soon': expected a number >= 0"):
        _locks.lock_wait()


def test_a_bad_lock_wait_fails_at_import_not_at_a_launch(monkeypatch):
    """check_at_import (run by ``import portable``) reads the variable: a bad value is an
    EnvVarError there, not an asynchronous error at each launch's compile."""
    from portable.env import check_at_import

    monkeypatch.setenv("ALPYKA_LOCK_WAIT", "-1")
    with pytest.raises(EnvVarError, match="ALPYKA_LOCK_WAIT='-1': expected a number >= 0"):
        check_at_import()


def test_a_stuck_directory_lock_is_waited_for_once_per_process(tmp_path, monkeypatch):
    """numba's directory lock, kept by another holder past the wait, is only tried afterwards (a
    kernel's load and save then cost no second and third wait); once free it is taken again."""
    import fcntl
    import time

    from portable.compiler import _cache

    monkeypatch.setenv("ALPYKA_LOCK_WAIT", "0.5")
    monkeypatch.setattr(_cache, "_stuck", set())
    index = tmp_path / "kernel-1.py310.nbi"
    fd = os.open(tmp_path / "alpyka.lock", os.O_RDWR | os.O_CREAT, 0o600)  # another open file: another holder
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AlpykaWarning)
            took = []
            for exclusive in (False, True, True):
                t0 = time.monotonic()
                with _cache._locked(index, exclusive) as held:
                    assert not held
                took.append(time.monotonic() - t0)
    finally:
        os.close(fd)  # released
    assert took[0] >= 0.45 and max(took[1:]) < 0.4, took
    with _cache._locked(index, True) as held:
        assert held
    assert not _cache._stuck


def test_a_lock_file_no_process_holds_is_named_for_removal_not_removed(tmp_path, monkeypatch):
    """A lock file that exists while held, left by a process killed while it held it: the warning
    says to remove it where nothing builds; alpyka leaves it (a holder /proc cannot see, in
    another PID namespace or on another machine sharing the cache, would lose its lock)."""
    lock = tmp_path / "lock"
    lock.write_text("")
    monkeypatch.setenv("ALPYKA_LOCK_WAIT", "0.1")
    monkeypatch.setattr(_locks, "_warned", set())
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert not _locks.lock_file_free(lock, 10.0, "this process builds without the cache")
    said = [str(w.message) for w in got if issubclass(w.category, AlpykaWarning)]
    assert len(said) == 1 and "an unknown process" in said[0] and f"remove {lock}" in said[0], said
    assert lock.exists()
