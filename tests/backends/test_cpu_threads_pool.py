"""cpu_threads' own pool of daemon workers: many host threads at once, small grids inline, big
grids on the pool, no deadlock, and a process that exits and stops on Ctrl-C while a long
kernel runs (those run in subprocesses with bounded timeouts)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import portable as pk

ct = pytest.importorskip("backends.cpu_threads")
tp = pytest.importorskip("backends._thread_pool")
cost = pytest.importorskip("backends._launch_cost")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif("cpu_threads" not in pk.available_backends(), reason="cpu_threads is unavailable here")


@pk.kernel
def axpb(acc, out, x, a, b, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i] + b


def _force_parallel(monkeypatch):
    """Every grid of more than one block goes through the pool, whatever it costs (the cost
    model reads these names in backends/_launch_cost.py)."""
    tp._pool.start()
    monkeypatch.setattr(tp._pool, "calibrated", True)  # no calibration replaces INLINE_S here
    monkeypatch.setattr(cost, "INLINE_S", 0.0)
    monkeypatch.setattr(cost, "_UNTIMED_S", 0.0)
    monkeypatch.setattr(cost, "PARALLEL_GAIN", float("inf"))


@pytest.fixture(params=["measured", "forced_parallel"])
def launch_mode(request, monkeypatch):
    """``measured``: the backend decides (small grids run inline); ``forced_parallel``: every
    grid of more than one block goes through the pool, whatever it costs."""
    if request.param == "forced_parallel":
        _force_parallel(monkeypatch)
    return request.param


def _run_threads(targets, timeout=120.0):
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(fn), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "host threads still running: a deadlock?"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("n", [1, 37, 1000])
def test_four_host_threads_own_queues_1000_launches_each(launch_mode, n):
    dev = pk.device("cpu_threads")
    wd = pk.valid_workdiv(dev, n)
    x = np.arange(n, dtype=np.float32)

    def host_thread(tid: int):
        def run():
            blocking = tid % 2 == 0  # two blocking queues, two non-blocking ones
            q = pk.Queue(dev, blocking=blocking)
            outs = [pk.Buffer(dev, (n,), np.float32) for _ in range(4)]
            back = np.empty(n, np.float32)
            for i in range(1000):
                out = outs[i % 4]
                pk.exec(q, wd, axpb, out, x, np.float32(i % 7), np.float32(tid), n)
                pk.memcpy(q, back, out)
                q.wait()
                np.testing.assert_array_equal(back, (i % 7) * x + tid, err_msg=f"thread {tid}, launch {i}")

        return run

    _run_threads([host_thread(t) for t in range(4)])


def test_forced_parallel_launches_run_on_the_pool(monkeypatch):
    """The names ``_force_parallel`` patches are the ones the launches read: every launch of a
    fresh kernel then goes through the pool."""
    if tp._pool.cores <= 1:
        pytest.skip("one core: every launch runs inline")
    jobs = []

    class CountedJob(tp._Job):
        __slots__ = ()

        def __init__(self, *a):
            super().__init__(*a)
            jobs.append(self)

    monkeypatch.setattr(cost, "_Job", CountedJob)
    _force_parallel(monkeypatch)
    if not tp._pool.nworkers:
        pytest.skip("no pool workers could start")

    @pk.kernel
    def fresh(acc, out, x, n):
        for i in acc.uniform_elements(n):
            out[i] = x[i] + 1

    dev = pk.device("cpu_threads")
    q = pk.Queue(dev, blocking=True)
    n = 1000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    for _ in range(40):
        pk.exec(q, pk.make_workdiv(dev, 8, 125), fresh, out, x, n)
    np.testing.assert_array_equal(out, x + 1)
    assert len(jobs) == 40, f"{len(jobs)} of 40 launches on the pool"


def test_the_backend_reports_the_current_inline_threshold(monkeypatch):
    monkeypatch.setattr(cost, "INLINE_S", 123e-6)
    assert "below 123 us run inline" in ct.load().execution()


def test_big_grid_results(launch_mode):
    dev = pk.device("cpu_threads")
    q = pk.Queue(dev, blocking=True)
    n = 3_000_001  # not a multiple of the chunk count
    x = np.random.default_rng(1).random(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    for a in (1, 2, 3):
        pk.exec(q, pk.make_workdiv(dev, 257, -(-n // 257)), axpb, out, x, np.float32(a), np.float32(0.5), n)
        np.testing.assert_array_equal(out, np.float32(a) * x + np.float32(0.5))


def test_a_chunk_error_reaches_the_caller_and_the_pool_stays_usable():
    pool = tp._pool
    pool.start()
    if not pool.nworkers:
        pytest.skip("one core: no pool workers")
    ran = []

    def chunk(lo, hi):
        ran.append(lo)
        if lo == 3:
            raise ValueError("boom in chunk 3")

    job = tp._Job(chunk, (), list(range(9)))
    with pytest.raises(ValueError, match="boom in chunk 3"):
        pool.run_job(job)
    assert 3 in ran and job not in pool.inflight
    job = tp._Job(lambda lo, hi: ran.append(-lo), (), list(range(9)))
    pool.run_job(job)
    assert job.complete and not job.errors


def test_the_next_launch_waits_for_the_chunks_of_an_interrupted_one(monkeypatch):
    """What Ctrl-C leaves behind: chunks still running on a worker. The next cpu_threads launch
    starts only once they finished, so queue order holds."""
    pool = tp._pool
    pool.start()
    if not pool.nworkers:
        pytest.skip("one core: no pool workers")
    started, finished = threading.Event(), threading.Event()

    def slow(lo, hi):
        started.set()
        time.sleep(0.5)
        finished.set()

    job = tp._Job(slow, (), [0, 1])
    pool.submit(job, helpers=1)  # run by a worker; this thread does not take part
    assert started.wait(10)
    pool.abandon(job)  # as the caller does on KeyboardInterrupt
    pool.inflight.discard(job)
    dev = pk.device("cpu_threads")
    n = 1000
    out = np.zeros(n, np.float32)
    pk.exec(
        pk.Queue(dev, blocking=True),
        pk.valid_workdiv(dev, n),
        axpb,
        out,
        np.ones(n, np.float32),
        np.float32(2),
        np.float32(1),
        n,
    )
    assert finished.is_set() and not pool.abandoned
    np.testing.assert_array_equal(out, 3)


def test_a_launch_from_inside_a_pool_task_does_not_deadlock():
    """Every worker busy in chunks that each launch (and wait for) a grid big enough for the
    pool: the nested launches run on their callers, so everything finishes."""
    pool = tp._pool
    pool.start()
    dev = pk.device("cpu_threads")
    n = 200_000
    x = np.arange(n, dtype=np.float32)
    outs = [np.zeros(n, np.float32) for _ in range(8)]

    def chunk(lo, hi):
        for c in range(lo, hi):
            q = pk.Queue(dev, blocking=True)
            pk.exec(q, pk.make_workdiv(dev, 64, -(-n // 64)), axpb, outs[c], x, np.float32(c), np.float32(1), n)

    def outer():
        job = tp._Job(chunk, (), list(range(9)))
        pool.run_job(job)

    _run_threads([outer, outer], timeout=120)
    for c, out in enumerate(outs):
        np.testing.assert_array_equal(out, c * x + 1)


def test_host_task_of_one_queue_launching_on_others():
    dev = pk.device("cpu_threads")
    outer = pk.Queue(dev)
    n = 500_000
    x = np.ones(n, np.float32)
    out = np.zeros(n, np.float32)

    def task():
        inner = pk.Queue(dev)
        pk.exec(inner, pk.valid_workdiv(dev, n), axpb, out, x, np.float32(2), np.float32(1), n)
        inner.wait()
        pk.exec(pk.Queue(dev, blocking=True), pk.valid_workdiv(dev, n), axpb, out, out, np.float32(2), np.float32(0), n)

    outer.enqueue(task)
    done = threading.Event()
    threading.Thread(target=lambda: (outer.wait(), done.set()), daemon=True).start()
    assert done.wait(60), "a launch from a queue's host task hung"
    np.testing.assert_array_equal(out, np.full(n, 6, np.float32))


def test_info_names_the_threading_mechanism():
    from portable.cli._info import info_text

    text = info_text()
    assert "daemon worker thread" in text and "run inline on the calling thread" in text


# ---------------------------------------------------------------------------------- processes

LONG_KERNEL = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import portable as pk

    from alpyka_testing.spin_kernel import spin

    mode = sys.argv[1]
    dev = pk.device("cpu_threads")
    q = pk.Queue(dev, blocking=mode == "sigint_blocking")
    small = pk.Buffer(dev, (4,), np.float64)
    pk.exec(q, pk.valid_workdiv(dev, 4), spin, small, 1000)  # compiled before the clock starts
    q.wait()
    out = pk.Buffer(dev, (4000,), np.float64)
    print("launching", flush=True)
    try:
        # about 20 ms per block, 80 s of work in all
        pk.exec(q, pk.valid_workdiv(dev, 4000), spin, out, 20_000_000)
        if mode == "sigint_wait":
            q.wait()
        elif mode == "end_later":
            time.sleep(1.0)  # the kernel runs on the pool when main ends
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise  # uncaught, as in most programs: the process ends killed by SIGINT
    print("main ends", flush=True)
""")


def _drain(stream, sink: list[str]) -> None:
    """Read ``stream`` into ``sink`` line by line to its end, then close it (no ResourceWarning)."""
    with stream:
        sink.extend(iter(stream.readline, ""))


class _Proc:
    """A Python subprocess whose stdout and stderr are read by threads as they come."""

    def __init__(self, tmp_path, source: str, *args: str) -> None:
        script = tmp_path / "prog.py"
        script.write_text(source)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.p = subprocess.Popen(
            [sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            threading.Thread(target=_drain, args=(stream, sink), daemon=True).start()

    def wait_for_line(self, line: str, timeout: float = 180) -> None:  # imports, compiling: a busy machine
        deadline = time.monotonic() + timeout
        while line not in (x.strip() for x in self.out):
            if self.p.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {line!r} line\nstdout: {''.join(self.out)}\nstderr: {''.join(self.err)[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float) -> tuple[int, str, str, float]:
        t0 = time.monotonic()
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            pytest.fail(
                f"still running {timeout} s later\nstdout: {''.join(self.out)}\nstderr: {''.join(self.err)[-3000:]}"
            )
        took = time.monotonic() - t0
        time.sleep(0.2)  # the readers reach the end of the pipes
        return rc, "".join(self.out), "".join(self.err), took


@pytest.mark.parametrize("mode", ["end_now", "end_later"])
def test_the_process_exits_while_a_long_kernel_runs(tmp_path, mode):
    p = _Proc(tmp_path, LONG_KERNEL, mode)
    p.wait_for_line("launching")
    rc, out, err, _ = p.finish(timeout=20)
    assert rc == 0 and "main ends" in out, err
    assert "Traceback" not in err and "cannot schedule" not in err, err


@pytest.mark.parametrize("mode", ["sigint_blocking", "sigint_wait"])
def test_ctrl_c_stops_a_long_kernel(tmp_path, mode):
    p = _Proc(tmp_path, LONG_KERNEL, mode)
    p.wait_for_line("launching")
    time.sleep(1.5)  # the kernel is running, on the pool and the calling thread
    p.p.send_signal(signal.SIGINT)
    rc, out, err, took = p.finish(timeout=30)
    assert rc == -signal.SIGINT and "interrupted" in out, (rc, out, err)
    # nothing waits for the chunks still running (~0.1 s idle; headroom for busy cores: the
    # interpreter's own end took 1-3 s there). It joined the queue's worker for 10 s before.
    assert took < 8, f"took {took:.1f} s to stop"


WARMED_WITH_A_SHORT_LOOP = textwrap.dedent("""
    import sys
    import numpy as np
    import portable as pk

    from alpyka_testing.spin_kernel import spin

    dev = pk.device("cpu_threads")
    q = pk.Queue(dev, blocking=sys.argv[1] == "blocking")
    out = pk.Buffer(dev, (16384,), np.float64)
    wd = pk.valid_workdiv(dev, 16384)
    for _ in range(3):  # the kernel's cost at this grid, measured with a loop of 10
        pk.exec(q, wd, spin, out, 10)
        q.wait()
    print("launching", flush=True)
    try:
        pk.exec(q, wd, spin, out, 2**26)  # ~0.1 s a block: half an hour of work on 2 cores
        q.wait()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
""")


@pytest.mark.parametrize("mode", ["blocking", "wait"])
def test_ctrl_c_stops_a_launch_much_slower_than_the_earlier_ones(tmp_path, mode):
    """The cost measured on earlier launches (a loop of 10) says this grid takes ~0.1 ms; with
    a loop of 2**26 each block takes ~0.1 s. The main thread (a blocking launch, or a ``wait()``
    that runs the queue's task) sizes the chunks from this launch's own first blocks, so Ctrl-C
    lands within a block or two. Before, chunks sized from the old estimate (half the grid each)
    were not stopped in 52 s; here the child is killed after 60 s."""
    p = _Proc(tmp_path, WARMED_WITH_A_SHORT_LOOP, mode)
    p.wait_for_line("launching")
    time.sleep(1.5)  # past the first blocks: the chunks run
    p.p.send_signal(signal.SIGINT)
    rc, out, err, took = p.finish(timeout=60)
    assert rc == -signal.SIGINT and "interrupted" in out, (rc, out, err[-3000:])
    # a block or two (~0.1 s each idle, several times that on busy cores) and the interpreter's end
    assert took < 20, f"took {took:.1f} s to stop"


def test_chunks_of_a_slow_launch_are_each_at_most_chunk_max_s():
    """16,384 blocks of 0.1 s: one block a chunk (the chunk count is not capped below what
    CHUNK_MAX_S needs; it was 256 a thread, 32 blocks a chunk here)."""
    bounds = cost._chunk_bounds(0, 16384, 16384 * 0.1, 2)
    assert max(b - a for a, b in zip(bounds, bounds[1:])) == 1


def test_a_slow_first_block_is_confirmed_before_it_sizes_the_launch(monkeypatch):
    """:func:`_own_pace`: after a first block far slower than the estimate, a second piece sized
    from it either confirms the slow pace (this launch is sized from it) or shows a preemption
    (the estimate stands)."""
    clock = [0.0]
    ran = []

    def slow(lo, hi):  # 0.1 s a block on a fake clock
        ran.append((lo, hi))
        clock[0] += 0.1 * (hi - lo)

    monkeypatch.setattr(cost, "_perf", lambda: clock[0])
    monkeypatch.setattr(cost, "_thread_cpu", lambda: clock[0])
    lo, pace = cost._own_pace(slow, 1, 16384, (), 1, 1e-9, 0.1)  # block 0 took 0.1 s
    assert pace == pytest.approx(0.1) and lo == 2 and ran == [(1, 2)]
    ran.clear()
    lo, pace = cost._own_pace(lambda a, b: ran.append((a, b)), 1, 16384, (), 1, 1e-9, 1e-4)  # a preemption
    assert pace == 1e-9 and ran == [(1, lo)] and lo == 1 + int(cost.PILOT_CONFIRM_S / 1e-4)


LATE_THREAD = textwrap.dedent("""
    import threading, time
    import numpy as np
    import portable as pk

    @pk.kernel
    def axpb(acc, out, x, a, n):
        for i in acc.uniform_elements(n):
            out[i] = a * x[i] + 1.0

    def work():
        time.sleep(0.5)  # main has returned: the interpreter waits for this thread at shutdown
        dev = pk.device("cpu_threads")
        for blocking in (True, False):
            q = pk.Queue(dev, blocking=blocking)
            for n in (10, 1000, 2_000_000):
                x = np.arange(n, dtype=np.float64)
                out = np.zeros(n)
                for _ in range(3):
                    pk.exec(q, pk.valid_workdiv(dev, n), axpb, out, x, 2.0, n)
                q.wait()
                assert np.array_equal(out, 2 * x + 1), (blocking, n)
        print("late launches OK", flush=True)

    threading.Thread(target=work).start()
""")


def test_launches_work_while_the_interpreter_waits_for_a_user_thread(tmp_path):
    rc, out, err, _ = _Proc(tmp_path, LATE_THREAD).finish(timeout=120)
    assert rc == 0 and "late launches OK" in out, err


# numba 0.68 imports scipy, and some scipy versions import concurrent.futures' ThreadPoolExecutor,
# whose module registers a threading atexit hook when first imported; threading refuses that once
# shutdown has begun ("can't register atexit after shutdown"). Seen on a GPU machine; here a
# finder makes `import numba` do that first, whatever scipy this machine has.
NUMBA_IMPORTS_CONCURRENT_FUTURES = textwrap.dedent("""
    import importlib.abc, sys

    class FirstTheExecutor(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "numba":
                sys.meta_path.remove(self)
                from concurrent.futures import ThreadPoolExecutor  # noqa: F401
            return None

    assert "concurrent.futures.thread" not in sys.modules and "numba" not in sys.modules
    sys.meta_path.insert(0, FirstTheExecutor())
""")


def test_a_first_numba_import_in_the_shutdown_window_works(tmp_path):
    """The first launch (numba's first import, and what numba imports) from a user thread while
    the interpreter waits for it: ``import portable`` imported concurrent.futures.thread before."""
    rc, out, err, _ = _Proc(tmp_path, NUMBA_IMPORTS_CONCURRENT_FUTURES + LATE_THREAD).finish(timeout=120)
    assert rc == 0 and "late launches OK" in out, err


FORK = textwrap.dedent("""
    import os
    import numpy as np
    import portable as pk

    @pk.kernel
    def axpb(acc, out, x, a, n):
        for i in acc.uniform_elements(n):
            out[i] = a * x[i] + 1.0

    dev = pk.device("cpu_threads")
    q = pk.Queue(dev, blocking=True)
    n = 2_000_000
    x = np.arange(n, dtype=np.float64)
    out = np.zeros(n)
    for _ in range(3):
        pk.exec(q, pk.valid_workdiv(dev, n), axpb, out, x, 2.0, n)  # the pool is running now
    pid = os.fork()
    if pid == 0:
        out[:] = 0
        for _ in range(3):
            pk.exec(q, pk.valid_workdiv(dev, n), axpb, out, x, 3.0, n)
        os._exit(0 if np.array_equal(out, 3 * x + 1) else 1)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_a_working_pool(tmp_path):
    rc, out, err, _ = _Proc(tmp_path, FORK).finish(timeout=120)
    assert rc == 0 and "child 0" in out, (out, err)
