"""The blocking OpenCL launch in one native call (backends/_opencl_native.c).

A fast launcher of a blocking queue runs a launch with the very arguments of its last one
natively: the queue's lock, the wait's choice (Python's ``WaitChoice.choose``), the enqueue and a
joined wait in one call. Other arguments, a failed enqueue and the other waits go through the
Python launcher and wait: what a launch does is defined there once. Where no C compiler builds
the library, the Python launcher runs alone (``native_problem`` says why).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.backends.opencl_launches import add_v, fast_runs, is_native, wait_stand_in
from alpyka_testing.threads import run_threads
from portable.spi import queue_impl

pytestmark = pytest.mark.alpyka_backends("opencl")

ROOT = Path(__file__).resolve().parents[2]


def _native_or_skip() -> None:
    """Skip where the native launch cannot be built here (no C compiler, no Python headers, no
    OpenCL loader ctypes opens, turned off); a compiler and headers that fail to build it fail."""
    import shutil
    import sysconfig

    from backends._opencl_native import native_problem

    problem = native_problem()
    if problem is None:
        return
    can_build = any(shutil.which(c) for c in ("cc", "gcc", "clang")) and os.path.isfile(
        os.path.join(sysconfig.get_paths()["include"], "Python.h")
    )
    if can_build and "ctypes finds no OpenCL loader" not in problem and "turned off" not in problem:
        pytest.fail(f"a C compiler and Python's headers are here, yet the native launch is not built: {problem}")
    pytest.skip(f"the native launch is not built here: {problem}")


def _host(q: pk.Queue, buf) -> np.ndarray:
    host = np.empty(buf.shape, buf.dtype)
    pk.memcpy(q, host, buf)
    q.wait()
    return host


def _opencl_devices() -> list:
    return [d for d in pk.devices("opencl")] if "opencl" in pk.available_backends() else []


@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_a_repeated_blocking_launch_runs_natively_with_the_same_results(which):
    _native_or_skip()
    devices = _opencl_devices()
    if which >= len(devices):
        pytest.skip("one OpenCL device here")
    dev = devices[which]
    if dev.properties.get("simulator"):
        pytest.skip("a simulator's launches run in Python (its flushes run the queue)")
    q = pk.Queue(dev, blocking=True)
    a, b = pk.Buffer(dev, 64, np.float32, queue=q), pk.Buffer(dev, 64, np.float32, queue=q)
    pk.memset(q, a, 0)
    pk.memset(q, b, 0)
    wd = pk.WorkDiv(1, 4, 16)
    one, two = np.float32(1), np.float32(2.5)
    expect_a = expect_b = 0.0
    for i in range(60):  # repeats, other scalar values, the other buffer: native and Python runs mixed
        out, v = (a, one) if i % 7 else (b, two)
        for _ in range(1 + i % 3):
            pk.exec(q, wd, add_v, out, v)
            if out is a:
                expect_a += float(v)
            else:
                expect_b += float(v)
    runs = fast_runs(q, add_v, wd)
    assert runs and all(is_native(r) for r in runs), runs
    np.testing.assert_array_equal(_host(q, a), np.float32(expect_a))
    np.testing.assert_array_equal(_host(q, b), np.float32(expect_b))
    pk.exec(q, wd, add_v, a, one)
    pk.exec(q, wd, add_v, a, one)
    assert queue_impl(q).last_event is None and q.is_idle()  # a joined native wait: the queue idle


def test_a_native_wait_is_timed_and_joined_where_the_python_launcher_would(monkeypatch):
    """Busy cores and a long join limit: after the first runs (unknown: interruptible), a repeated
    launch is joined natively, a new scalar value waits interruptibly once again (the Python
    wait's choice, made for the native launch too)."""
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    _native_or_skip()
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the main thread's choice is tested; this test runs in another thread")
    monkeypatch.setattr(ow, "JOIN_LIMIT_S", 60.0)
    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=True))
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    waits, calls = queue_impl(q).waits, []
    real = waits.interruptible
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    monkeypatch.setattr(waits, "interruptible", lambda ev: (calls.append(ev), real(ev)))
    wd = pk.WorkDiv(1, 1, 8)
    one, two = np.float32(1), np.float32(2)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, one)
    runs = fast_runs(q, add_v, wd)
    assert len(calls) == 3 and runs and all(is_native(r) for r in runs)
    for _ in range(5):
        pk.exec(q, wd, add_v, out, one)
    assert len(calls) == 3
    pk.exec(q, wd, add_v, out, two)
    assert len(calls) == 4
    pk.exec(q, wd, add_v, out, two)
    assert len(calls) == 4
    np.testing.assert_array_equal(_host(q, out), 8 * 1 + 2 * 2)


def test_threads_launching_on_one_blocking_queue():
    _native_or_skip()
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    outs = [pk.Buffer(dev, 32, np.int32, queue=q) for _ in range(4)]
    for out in outs:
        pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 32)

    def work(t: int) -> None:
        v = np.int32(t + 1)
        for _ in range(150):
            pk.exec(q, wd, add_v, outs[t], v)

    run_threads(work, 4)
    for t, out in enumerate(outs):
        np.testing.assert_array_equal(_host(q, out), 150 * (t + 1))
    assert q.is_idle()


def test_a_queue_is_not_idle_while_any_native_wait_runs(rebind, monkeypatch):
    """Two threads' native launches on one blocking queue: while the second still waits, the
    first's wait ending leaves the queue not idle (a marker shared by every launch let the first
    say idle); the second's ending makes it idle."""
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=True))  # (a tiny wait is joined: native)
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    outs = [pk.Buffer(dev, 8, np.float32, queue=q) for _ in range(2)]
    wds = [pk.WorkDiv(1, 1, 8), pk.WorkDiv(1, 1, 8)]
    for out, wd in zip(outs, wds):
        pk.memset(q, out, 0)
        for _ in range(3):
            pk.exec(q, wd, add_v, out, np.float32(1))
        runs = fast_runs(q, add_v, wd)
        assert runs and all(is_native(r) for r in runs)
    go = {name: threading.Event() for name in ("first", "second")}
    entered = {name: threading.Event() for name in ("first", "second")}

    def wait(real, n, evs):
        name = threading.current_thread().name
        entered[name].set()
        if name == "first":
            go[name].wait(30)  # its command may well be done: its wait has not returned
        err = real(n, evs)
        if name == "second":
            go[name].wait(30)  # done, not yet returned
        return err

    rebind(wait=wait_stand_in(wait))
    # the second launch is chosen as on an idle queue, so that both waits are native: behind the
    # first's unfinished wait it would be BEHIND (joined in Python, learning no time)
    monkeypatch.setattr(queue_impl(q).waits, "queue_idle", lambda: True)
    threads = [
        threading.Thread(target=pk.exec, args=(q, wds[i], add_v, outs[i], np.float32(1)), name=name)
        for i, name in enumerate(("first", "second"))
    ]
    try:
        threads[0].start()
        assert entered["first"].wait(30)
        assert not q.is_idle()
        threads[1].start()
        assert entered["second"].wait(30)
        go["first"].set()
        threads[0].join(30)
        assert not threads[0].is_alive()
        assert not q.is_idle()  # the second launch's wait still runs
    finally:
        go["first"].set()
        go["second"].set()
        for t in threads:
            t.join(30)
    assert q.is_idle() and queue_impl(q).last_event is None
    rebind()
    for out in outs:
        np.testing.assert_array_equal(_host(q, out), 4)


@pytest.fixture
def rebind():
    """``rebind(enqueue=None, wait=None)``: the native library bound to stand-ins (ctypes
    callbacks) of the loader's entry points; bound to the loader's own again afterwards."""
    import ctypes

    from backends._opencl_native import ENTRY_POINTS, native_module
    from backends._opencl_waits import opencl_library

    _native_or_skip()
    module, lib = native_module(), opencl_library()
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    real = [address(getattr(lib, name)) for name in ENTRY_POINTS]
    kept = []

    def bind(enqueue=None, wait=None):
        kept.extend(x for x in (enqueue, wait) if x is not None)
        entries = (real[i] if f is None else address(f) for i, f in enumerate((enqueue, wait, None, None)))
        module.bind(*entries, pk.StateError, time.perf_counter)

    yield bind
    module.bind(*real, pk.StateError, time.perf_counter)


def _lock_free(q: pk.Queue) -> bool:
    """Whether another thread can take ``q``'s lock (an RLock: its owner always could)."""
    lock, got = queue_impl(q).lock, []

    def take() -> None:
        if lock.acquire(timeout=5):
            got.append(True)
            lock.release()

    run_threads(lambda _: take(), 1)
    return got == [True]


def _launched(dev):
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, np.float32(1))
    runs = fast_runs(q, add_v, wd)
    assert runs and all(is_native(r) for r in runs)
    return q, out, wd


def test_a_failed_wait_raises_and_leaves_the_launcher_usable(rebind, monkeypatch):
    """The runtime's wait reports a failed command: the error is raised (pyopencl's, where the
    runtime's event says so: here it does not, and pk.StateError says so), the queue's lock is
    free, the launch's time forgotten, and the next runs work."""
    from backends._opencl_waits import WaitChoice

    real_choose, lasts = WaitChoice.choose, []

    def choose(self, last, *rest):
        lasts.append(last)
        return real_choose(self, last, *rest)

    monkeypatch.setattr(WaitChoice, "choose", choose)
    q, out, wd = _launched(pk.device("opencl"))
    failing = wait_stand_in(lambda real, n, evs: real(n, evs) or -14)
    pk.exec(q, wd, add_v, out, np.float32(1))  # timed: the next choice is told its time
    rebind(wait=failing)
    with pytest.raises(pk.StateError, match="reported a failed command.*make a new queue"):
        pk.exec(q, wd, add_v, out, np.float32(1))
    assert isinstance(lasts[-1], float)
    rebind()
    assert _lock_free(q)
    for _ in range(2):
        pk.exec(q, wd, add_v, out, np.float32(1))
    assert lasts[-2] is None and isinstance(lasts[-1], float)  # the failed launch's time forgotten
    np.testing.assert_array_equal(_host(q, out), 7)  # the failed one ran (the stand-in said otherwise)


def test_a_failed_enqueue_is_the_python_launchers(rebind):
    """An enqueue the runtime refuses goes to the Python launcher, which enqueues it through
    pyopencl (raising the runtime's own error where it is refused there too)."""
    import ctypes

    q, out, wd = _launched(pk.device("opencl"))
    refused = []
    args = [ctypes.c_void_p] * 2 + [ctypes.c_uint32] + [ctypes.c_void_p] * 3 + [ctypes.c_uint32] + [ctypes.c_void_p] * 2
    refusing = ctypes.CFUNCTYPE(ctypes.c_int32, *args)(lambda *a: refused.append(a) or -54)
    rebind(enqueue=refusing)
    for _ in range(2):
        pk.exec(q, wd, add_v, out, np.float32(1))
    rebind()
    assert len(refused) == 2
    np.testing.assert_array_equal(_host(q, out), 5)


def _child(tmp_path: Path, body: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    full = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=full)


_LAUNCHES = """
import warnings
warnings.simplefilter("always")
import numpy as np
import portable as pk
from alpyka_testing.backends.opencl_launches import add_v, fast_runs, is_native
from backends._opencl_native import native_problem

dev = pk.device("opencl")
q = pk.Queue(dev, blocking=True)
out = pk.Buffer(dev, 8, np.float32, queue=q)
pk.memset(q, out, 0)
wd = pk.WorkDiv(1, 1, 8)
for _ in range(6):
    pk.exec(q, wd, add_v, out, np.float32(1))
host = np.empty(8, np.float32)
pk.memcpy(q, host, out)
print("sum", host[0], "native", is_native(fast_runs(q, add_v, wd)[0]))
print("problem", native_problem())
"""


def test_without_a_c_compiler_launches_run_in_python(tmp_path):
    done = _child(tmp_path, _LAUNCHES, {"PATH": str(tmp_path / "empty"), "CC": ""})
    assert done.returncode == 0, done.stderr
    assert "sum 6.0 native False" in done.stdout, done.stdout
    assert "no C compiler built it" in done.stdout and "install gcc, or set CC" in done.stdout, done.stdout


def test_turned_off_launches_run_in_python(tmp_path):
    done = _child(tmp_path, _LAUNCHES, {"ALPYKA_OPENCL_NATIVE": "0"})
    assert done.returncode == 0, done.stderr
    assert "sum 6.0 native False" in done.stdout and "turned off (ALPYKA_OPENCL_NATIVE=0)" in done.stdout
    assert not (tmp_path / "cache" / "opencl_native").exists()  # nothing built
    bad = _child(tmp_path, _LAUNCHES, {"ALPYKA_OPENCL_NATIVE": "maybe"})
    assert "sum 6.0 native False" in bad.stdout, bad.stdout + bad.stderr  # a launch never fails for it
    assert "ALPYKA_OPENCL_NATIVE='maybe': expected 1" in bad.stdout, bad.stdout
    assert "AlpykaWarning" in bad.stderr and "native launch failed to load" in bad.stderr, bad.stderr


def test_without_its_source_launches_run_in_python(tmp_path):
    """An install that lost the C source (a packaging step that drops package data) launches in
    Python and says why (it raised at the third launch)."""
    body = "import backends._opencl_native as n\nn.SOURCE = n.SOURCE.with_name('gone.c')\n" + _LAUNCHES
    done = _child(tmp_path, body)
    assert done.returncode == 0, done.stderr
    assert "sum 6.0 native False" in done.stdout and "FileNotFoundError" in done.stdout, done.stdout
    assert "native launch failed to load" in done.stderr, done.stderr


def test_a_changed_native_library_is_built_again(tmp_path):
    _native_or_skip()
    first = _child(tmp_path, _LAUNCHES)
    assert "sum 6.0 native True" in first.stdout, first.stdout + first.stderr
    (lib,) = (tmp_path / "cache" / "opencl_native").glob("opencl_native-*.so")
    lib.write_bytes(lib.read_bytes() + b"\0" * 40)  # appended to: its tag no longer the last bytes
    second = _child(tmp_path, _LAUNCHES)
    assert "sum 6.0 native True" in second.stdout, second.stdout + second.stderr
    assert "is not the one alpyka built there" in second.stderr and "built again" in second.stderr, second.stderr
    third = _child(tmp_path, _LAUNCHES)
    assert "sum 6.0 native True" in third.stdout and "built again" not in third.stderr, third.stderr


def test_the_native_launchs_source_ships_with_alpyka():
    """An installed alpyka (not this checkout) has _opencl_native.c beside _opencl_native.py: it is
    compiled there on first use."""
    import tomllib

    from backends._opencl_native import SOURCE

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert SOURCE.is_file() and SOURCE.parent == ROOT / "backends"
    assert SOURCE.name in data["package-data"]["backends"]


def test_an_exception_in_the_choice_leaves_the_lock_free(monkeypatch):
    """A Ctrl-C (here a stand-in exception) raised in the Python the native call runs under the
    queue's lock (the wait's choice) reaches the caller with the lock let go."""
    _native_or_skip()
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    from backends._opencl_waits import WaitChoice

    real, raising = WaitChoice.choose, []

    def choose(self, last, *rest):
        if raising:
            raise raising[0]
        return real(self, last, *rest)

    monkeypatch.setattr(WaitChoice, "choose", choose)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    for _ in range(3):
        pk.exec(q, wd, add_v, out, np.float32(1))
    runs = fast_runs(q, add_v, wd)
    assert runs and all(is_native(r) for r in runs)

    class Interrupt(BaseException):
        pass

    raising.append(Interrupt())
    with pytest.raises(Interrupt):
        pk.exec(q, wd, add_v, out, np.float32(1))
    raising.clear()
    assert _lock_free(q)
    pk.exec(q, wd, add_v, out, np.float32(1))
    np.testing.assert_array_equal(_host(q, out), 4)  # the interrupted launch enqueued nothing


@pytest.mark.parametrize("cores", ["free", "busy"])
def test_a_native_launch_leaves_the_queue_idle_after_its_wait_whichever_it_was(cores, monkeypatch):
    """After a native launch's wait, joined or in Python (a tiny known launch on free cores, a
    launch with new arguments), the queue's last event is None again: the next launch's wait
    choice then needs no look at the queue (a look per launch cost ~0.4 us on Intel's CPU
    OpenCL with free cores, where a tiny known launch takes ~6 us)."""
    import backends._opencl_waits as ow
    from backends._other_load import FixedLoad

    _native_or_skip()
    monkeypatch.setattr(ow, "other_load", FixedLoad(busy=cores == "busy"))
    dev = pk.device("opencl")
    q = pk.Queue(dev, blocking=True)
    out = pk.Buffer(dev, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.WorkDiv(1, 1, 8)
    for i, v in enumerate((1, 1, 1, 1, 2, 2)):  # the checked path twice, the fast launcher: new, known, new, known
        pk.exec(q, wd, add_v, out, np.float32(v))
        if i >= 2:
            assert all(is_native(r) for r in fast_runs(q, add_v, wd))
            assert queue_impl(q).last_event is None and q.is_idle(), (i, v)
    np.testing.assert_array_equal(_host(q, out), 8)


_QUEUE_ONLY = textwrap.dedent("""
    import sys
    import numpy as np
    import portable as pk
    import backends._opencl_waits as ow
    from alpyka_testing.backends.opencl_launches import add_v

    q = pk.Queue(pk.device("opencl"), blocking=True)
    print("queue", ow._hand_over is not None, flush=True)
    if sys.argv[1] == "launch":
        out, wd = pk.Buffer(q.device, 8, np.float32, queue=q), pk.WorkDiv(1, 1, 8)
        for _ in range(3):  # the third: the fast launcher, native
            pk.exec(q, wd, add_v, out, np.float32(1))
        print("launch", ow._hand_over is not None, flush=True)
""")


def test_a_queue_loads_a_cached_native_library_and_a_blocking_launch_builds_it(tmp_path):
    """Making an OpenCL queue loads the native library where a build is cached (its handed waits
    use its waiter threads), but never compiles it: a first build (0.2-0.5 s) made a fresh
    process's first OpenCL result 0.3 s slower; the first blocking launch builds it, as before."""
    _native_or_skip()
    script = tmp_path / "queue_only.py"
    script.write_text(_QUEUE_ONLY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_CACHE_DIR": str(tmp_path / "cache"), "ALPYKA_CHECK_HIP": "0"}

    def run(mode: str) -> list[str]:
        done = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()

    assert run("queue") == ["queue", "False"]  # nothing cached: nothing built
    assert not list((tmp_path / "cache").rglob("opencl_native-*"))
    assert run("launch") == ["queue", "False", "launch", "True"]  # built by the blocking launch
    assert run("queue") == ["queue", "True"]  # cached: loaded with the queue
