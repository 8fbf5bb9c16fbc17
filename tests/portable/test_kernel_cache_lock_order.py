"""The order of the kernel cache's build lock and numba's compiler lock (portable/compiler/_cache.py):
a thread waits for a kernel's build lock (another process compiling it, or stopped holding it)
without numba's compiler lock, so the process's other threads go on compiling meanwhile; and a
thread that holds numba's lock (a nested compile of a called function, the first launch's
``extensions_deferred``) only tries a build lock, so it never waits for a thread that waits for
numba's lock. A wait that came back (a regression) fails within the test's limit with every
thread's stack (``timeout`` mark, alpyka_testing/hang_guard.py), after a short ``ALPYKA_LOCK_WAIT``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import njit
from numba.core.compiler_lock import global_compiler_lock

from portable.compiler import _cache, _locks, compile_slot, load_generated_module

#: how long a test's thread waits for a build lock: a wait that should not happen costs this
LOCK_WAIT_S = 20
pytestmark = pytest.mark.timeout(120)


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A generated module of two cached numba functions, ``outer`` calling ``inner``, new to
    this process (its own cache directory, a unique source) and compiled by no one yet."""
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALPYKA_LOCK_WAIT", str(LOCK_WAIT_S))
    source = (
        f"# {uuid.uuid4().hex}\n"
        "from numba import njit\n\n"
        "_jit = njit(nogil=True, cache=True)\n\n\n"
        "@_jit\ndef inner(x):\n    return x + 1\n\n\n"
        "@_jit\ndef outer(x):\n    return inner(x) * 2\n"
    )
    mod = load_generated_module(source, "locktest")
    assert isinstance(mod.inner.compile, type(mod.outer.compile))  # both guarded
    return mod


def _lock_of(fn: Any) -> Path:
    index = _cache._index(fn._cache)
    return index.with_name(index.name[: -len(".nbi")] + ".lock")


@contextlib.contextmanager
def _held_elsewhere(path: Path) -> Iterator[None]:
    """Hold ``path``'s file lock on an open file of its own, as another process compiling it does."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class _Waits(list):
    """Each wait for a build lock: (thread name, seconds it may wait); ``started`` is set at the
    start of the first wait that may last, ``ended`` at its end."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.ended = threading.Event(), threading.Event()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> _Waits:
    seen = _Waits()
    real = _locks.flock_within

    def spy(fd: int, exclusive: bool, seconds: float) -> bool:
        seen.append((threading.current_thread().name, seconds))
        if seconds <= 0:
            return real(fd, exclusive, seconds)
        seen.started.set()
        try:
            return real(fd, exclusive, seconds)
        finally:
            seen.ended.set()

    monkeypatch.setattr(_locks, "flock_within", spy)
    return seen


def _thread(name: str, fn: Any, *args: Any) -> tuple[threading.Thread, list]:
    got: list = []
    t = threading.Thread(target=lambda: got.append(fn(*args)), name=name, daemon=True)
    t.start()
    return t, got


def test_a_wait_for_a_build_lock_lets_other_threads_compile(tmp_path, monkeypatch, waits):
    """While one thread waits for a kernel another process is compiling, another thread of the
    process compiles an unrelated numba function at once (it waited up to ALPYKA_LOCK_WAIT for
    numba's compiler lock when the build lock was waited for under it)."""
    mod = _module(tmp_path, monkeypatch)
    with _held_elsewhere(_lock_of(mod.inner)):
        waiter, got = _thread("waiter", mod.inner, 1)
        assert waits.started.wait(60)
        other, other_got = _thread("other", njit(lambda x: x + 3), 4)
        other.join(60)
        assert other_got == [7] and not waits.ended.is_set(), "the other thread's compile waited for the build lock"
    waiter.join(60)
    assert got == [2]
    assert sum(mod.inner.stats.cache_misses.values()) == 1  # compiled once, after the lock was free


def test_a_nested_compile_never_waits_for_a_thread_waiting_for_numbas_lock(tmp_path, monkeypatch, waits):
    """Thread A holds ``inner``'s build lock and waits for numba's compiler lock; this thread
    holds numba's lock and compiles ``outer``, which compiles ``inner`` nested: it only tries
    ``inner``'s build lock and compiles it (waiting would be a deadlock, broken only by
    ALPYKA_LOCK_WAIT); then A finds ``inner`` compiled."""
    mod = _module(tmp_path, monkeypatch)
    holding = threading.Event()

    def a() -> int:
        with compile_slot(mod.inner):
            holding.set()
            return mod.inner(1)

    with global_compiler_lock:
        thread_a, got = _thread("A", a)
        assert holding.wait(2 * LOCK_WAIT_S)
        assert mod.outer(1) == 4
    thread_a.join(60)
    assert got == [2]
    mine = [s for name, s in waits if name == threading.current_thread().name]
    assert mine and set(mine) == {0.0}, mine  # outer's and inner's locks only tried, none waited for
    assert sum(mod.inner.stats.cache_misses.values()) == 1


def test_a_nested_compile_does_not_wait_for_another_process(tmp_path, monkeypatch, waits):
    """A function compiled nested (under numba's compiler lock) whose build lock another process
    holds is compiled here at once: waiting would stop every compile of this process."""
    mod = _module(tmp_path, monkeypatch)
    with _held_elsewhere(_lock_of(mod.inner)):
        assert mod.outer(5) == 12
    first, *nested = [s for _, s in waits]
    assert first == LOCK_WAIT_S and nested and set(nested) == {0.0}, waits  # outer's waited for (free), inner's tried


@pytest.mark.alpyka_backends("cpu_serial")
def test_a_first_launch_waits_for_the_kernel_without_numbas_lock(tmp_path, monkeypatch, waits):
    """A process's first launch holds numba's compiler lock around the compile
    (backends/_numba_start.py): the kernel's build lock is taken before it, so the launch still
    waits for another process compiling the kernel, and meanwhile other threads compile."""
    import portable as pk
    from backends import _numba_start
    from backends._host_launch import make_plan
    from portable.spi import signature_key

    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALPYKA_LOCK_WAIT", str(LOCK_WAIT_S))
    entered = []
    real = _numba_start.extensions_deferred

    @contextlib.contextmanager
    def deferred() -> Iterator[None]:
        entered.append(1)
        with global_compiler_lock, real():  # as the process's first compile holds it
            yield

    monkeypatch.setattr("backends._host_launch.extensions_deferred", deferred)

    @pk.kernel
    def plus_seven(acc, out, x):
        for i in acc.uniform_elements(out.shape[0]):
            out[i] = x[i] + 7.0

    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    out, x = pk.Buffer(q.device, 4, np.float64), pk.Buffer(q.device, 4, np.float64)
    pk.memcpy(q, x, np.arange(4.0))
    plan = make_plan("cpu_serial", plus_seven, signature_key((out, x), "plus_seven"), 1, False)
    with _held_elsewhere(_lock_of(plan.fn)):
        launch, _ = _thread("launch", pk.exec, q, pk.make_workdiv(q.device, 1, 4), plus_seven, out, x)
        assert waits.started.wait(60)
        other, other_got = _thread("other", njit(lambda x: x * 3), 4)
        other.join(60)
        assert other_got == [12] and not waits.ended.is_set(), "the other thread's compile waited for the build lock"
    launch.join(60)
    got = np.zeros(4)
    pk.memcpy(q, got, out)
    assert list(got) == [7.0, 8.0, 9.0, 10.0] and entered
    assert [s for name, s in waits if name == "launch"][0] == LOCK_WAIT_S  # waited for, not only tried


def test_a_stuck_numba_directory_lock_is_waited_for_briefly(tmp_path, monkeypatch):
    """numba's directory lock (held for milliseconds by a writer) is waited for inside numba's
    compile, under its compiler lock: held by a stuck process, the wait ends after
    ``DIRECTORY_LOCK_LONGEST_S`` whatever ``ALPYKA_LOCK_WAIT`` says (the process's other threads
    compile nothing meanwhile); the kernel is then compiled without numba's cache."""
    from portable._errors import AlpykaWarning

    mod = _module(tmp_path, monkeypatch)
    monkeypatch.setattr(_cache, "DIRECTORY_LOCK_LONGEST_S", 0.5)
    monkeypatch.setattr(_locks, "_warned", set())
    asked: list[float] = []
    real = _cache.flock_within

    def spy(fd: int, exclusive: bool, seconds: float) -> bool:
        asked.append(seconds)
        return real(fd, exclusive, seconds)

    monkeypatch.setattr(_cache, "flock_within", spy)
    with _held_elsewhere(_lock_of(mod.inner).with_name("alpyka.lock")):
        with pytest.warns(AlpykaWarning, match="numba's cache left alone"):
            assert mod.inner(1) == 2
    assert asked and asked[0] == 0.5, asked  # not ALPYKA_LOCK_WAIT's 20 s
    assert set(asked[1:]) <= {0.0}, asked  # found stuck: later waits of this process only try it
    assert not list((tmp_path / "cache").rglob("*.nbi"))  # nothing of numba's written
