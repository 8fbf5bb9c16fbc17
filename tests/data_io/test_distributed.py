"""pk.distributed.run on Dask: local worker processes give the in-process results, in chunk
order, with setup once per worker; failing chunks and dying workers are handled and reported.

One LocalCluster (2 worker processes) is shared by the module; a test that needs the embedded
cluster uses one worker. Every worker process started here is gone when the tests end.
"""

import os
import time

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_type, raises_value

distributed = pytest.importorskip("distributed", reason="the data extra: pip install 'alpyka[data]'")
skhep = pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.3.12")
pytest.importorskip("uproot", reason="the data extra: pip install 'alpyka[data]'")
psutil = pytest.importorskip("psutil")

from alpyka_testing.data import BRANCHES, Leptons, run_pair_masses  # noqa: E402

HZZ = skhep.data_path("uproot-HZZ.root")
#: a hang guard: dask workers start as child processes (minutes on a busy 2-core machine)
pytestmark = pytest.mark.timeout(300)


def _children() -> set[int]:
    """Child processes, less multiprocessing's resource tracker (one helper per parent process,
    started with the first spawned process and kept until the parent exits)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.Error:
            pass
    return out


@pytest.fixture(scope="module")
def client():
    """A two-process local cluster. Its Nanny writes its workers' variables (``OMP_NUM_THREADS=1``,
    ``PYTHONHASHSEED``, ...) into this process's environment and leaves them: put back at the end."""
    before, environ = _children(), dict(os.environ)
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=50,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
        deadline = time.monotonic() + 30  # worker processes end (headroom: a busy machine)
        while _children() - before and time.monotonic() < deadline:
            time.sleep(0.1)
        os.environ.clear()
        os.environ.update(environ)
        assert not _children() - before, "worker processes left behind"


# ---------------------------------------------------------------------- functions the workers run
def setup_queue(device):
    global SETUPS
    SETUPS = globals().get("SETUPS", 0) + 1
    return {"queue": pk.Queue(device), "setups": SETUPS}


def dimuon_chunk(state, chunk):
    coll, offsets = chunk.read(Leptons, state["queue"], BRANCHES)
    pairs = run_pair_masses(state["queue"], coll, offsets)
    return np.array(pairs.mass), os.getpid(), state["setups"]


def square(state, x):
    if x == 2:
        raise ValueError("bad chunk")
    return x * x


def die_once(state, item):
    x, marker = item
    if x == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the worker process dies in the middle of the run
    return x * 10, os.getpid()


def always_die(state, x):
    os._exit(1)


def failing_setup(device):
    raise OSError("no calibration file here")


def setups_seen(state, x):
    return state["setups"], os.getpid()


def lock_at_three(state, x):
    import threading

    return threading.Lock() if x == 3 else x + 100


def held_until(state, x):
    """Chunk ``x`` at once where it is a number; a path is held until that file exists (at most
    60 s: a hang guard), as a long chunk the test ends itself."""
    if isinstance(x, str):
        deadline = time.monotonic() + 60
        while not os.path.exists(x) and time.monotonic() < deadline:
            time.sleep(0.05)
    return x


# ---------------------------------------------------------------------- tests
def test_same_as_in_process(client):
    chunks = pk.root_chunks(HZZ, "events", 500)
    results = pk.distributed.run(
        dimuon_chunk, chunks, setup=setup_queue, client=client, backend="cpu_serial", timeout=90
    )
    q = pk.Queue(pk.device("cpu_serial"))
    local = [dimuon_chunk({"queue": q, "setups": 1}, c)[0] for c in chunks]
    assert len(results) == len(chunks) == 5
    for (got, _, _), want in zip(results, local):
        np.testing.assert_array_equal(got, want)
    assert {setups for _, _, setups in results} == {1}, "setup ran more than once on a worker"
    pids, workers = {pid for _, pid, _ in results}, set(client.run(os.getpid).values())
    assert len(workers) == 2 and pids <= workers, (pids, workers)  # in the cluster's worker processes
    assert os.getpid() not in pids


def test_scheduler_address(client):
    assert pk.distributed.run(square, [1, 3, 4], client=client.scheduler.address, timeout=60) == [1, 9, 16]


def test_chunk_error_raise_or_collect(client):
    with pytest.raises(pk.distributed.ChunkError, match=r"chunk 2 \(2\) failed: ValueError: bad chunk") as info:
        pk.distributed.run(square, [0, 1, 2, 3], client=client, timeout=60)
    assert info.value.index == 2 and isinstance(info.value.cause, ValueError)
    out = pk.distributed.run(square, [0, 1, 2, 3], client=client, on_error="collect", timeout=60)
    assert out[:2] == [0, 1] and out[3] == 9
    assert isinstance(out[2], pk.distributed.ChunkError) and "chunk 2" in str(out[2])


def test_a_failed_setup_is_each_chunks_cause_naming_the_fix(client):
    """``setup(device)`` raised on the workers: every chunk fails with a ``pk.StateError`` (a
    RuntimeError) naming the setup's error, which is its ``__cause__``."""
    out = pk.distributed.run(square, [1, 3], setup=failing_setup, client=client, on_error="collect", timeout=60)
    for err in out:
        assert isinstance(err, pk.distributed.ChunkError), err
        cause = err.cause
        assert isinstance(cause, pk.StateError) and isinstance(cause, RuntimeError), repr(cause)
        assert "setup(device) failed on worker" in str(cause) and "no calibration file here" in str(cause)
        assert "fix the setup function (its error is the __cause__)" in str(cause)


def test_killed_worker_chunks_rerun_exactly_once(client, tmp_path):
    marker = str(tmp_path / "died")
    items = [(x, marker) for x in range(8)]
    out = pk.distributed.run(die_once, items, client=client, timeout=90)
    assert os.path.exists(marker), "no worker was killed"
    assert [v for v, _ in out] == [x * 10 for x in range(8)]


def test_embedded_cluster_worker_death_is_an_error_and_cleaned_up():
    before = _children()
    with pytest.raises(pk.distributed.ChunkError, match=r"chunk 0 \(7\) killed its worker"):
        pk.distributed.run(always_die, [7], workers=1, allowed_failures=0, timeout=60)
    deadline = time.monotonic() + 30  # worker processes end (headroom: a busy machine)
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children() - before, "the embedded cluster left worker processes behind"


def test_bad_arguments():
    with raises_value("on_error must be 'raise' or 'collect', got 'ignore'"):
        pk.distributed.run(square, [1], on_error="ignore")
    with raises_type(r"client must be None, a distributed\.Client or a scheduler address"):
        pk.distributed.run(square, [1], client=42)
    assert pk.distributed.run(square, []) == []


@pytest.mark.parametrize("allowed", [0, 2, 3])
def test_allowed_failures_reach_the_embedded_clusters_scheduler(monkeypatch, allowed):
    """``allowed_failures`` is the scheduler's ``allowed-failures`` while the embedded cluster
    starts (its scheduler reads it then); no cluster is started here: the stand-in stops there."""
    import dask

    seen = []

    class Started(Exception):
        pass

    def cluster(**kw):
        seen.append((dask.config.get("distributed.scheduler.allowed-failures"), kw["n_workers"]))
        raise Started

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    with pytest.raises(Started):
        pk.distributed.run(square, [1], workers=1, allowed_failures=allowed)
    assert seen == [(allowed, 1)]


def test_closed_dask_connections_at_teardown_are_not_logged(caplog):
    """After Ctrl-C the embedded cluster's workers die first (the terminal interrupts the whole
    process group) and the scheduler's last broadcasts fail: asyncio's "Future exception was
    never retrieved" for those closed connections is dropped; any other such record stays."""
    import asyncio
    import logging

    from distributed.comm.core import CommClosedError

    from portable.distributed import _quiet_closed_comms

    _quiet_closed_comms()
    _quiet_closed_comms()  # installed once
    log = logging.getLogger("asyncio")
    assert sum(type(f).__name__ == "_ClosedCommsAtTeardown" for f in log.filters) == 1
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for exc in (
                CommClosedError("in <TCP (closed) Scheduler Broadcast>: Stream is closed"),
                ValueError("a real failure"),
            ):
                loop.call_exception_handler({"message": "Future exception was never retrieved", "exception": exc})
    finally:
        loop.close()
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert [type(e) for e in logged] == [ValueError]


def test_a_second_run_on_the_same_cluster_reuses_each_workers_setup(client):
    first = pk.distributed.run(
        setups_seen, range(6), setup=setup_queue, client=client, backend="cpu_serial", timeout=60
    )
    second = pk.distributed.run(
        setups_seen, range(6), setup=setup_queue, client=client, backend="cpu_serial", timeout=60
    )
    per_worker = {pid: n for n, pid in first}
    for n, pid in second:  # the same count on each worker: setup did not run again
        assert per_worker.get(pid, n) == n, (first, second)
    other = pk.distributed.run(setups_seen, range(2), setup=lambda dev: {"setups": -1}, client=client, timeout=60)
    assert [n for n, _ in other] == [-1, -1]  # another setup is another state


def test_a_long_lived_cluster_keeps_only_the_latest_setups(client):
    for k in range(6):  # six different setups: the oldest are unregistered and forgotten
        assert (
            pk.distributed.run(setups_seen, [0], setup=lambda dev, k=k: {"setups": k}, client=client, timeout=60)[0][0]
            == k
        )

    def count(dask_worker):
        from portable.distributed import _worker as _dask_worker

        return (sum(n.startswith("alpyka-setup-") for n in dask_worker.plugins), len(_dask_worker._STATES))

    for plugins, states in client.run(count).values():
        assert plugins <= 4 and states <= 4, (plugins, states)


def test_a_result_that_cannot_be_pickled_is_that_chunks_error(client):
    out = pk.distributed.run(lock_at_three, [1, 2, 3, 4], client=client, on_error="collect", timeout=60)
    assert out[0] == 101 and out[1] == 102 and out[3] == 104, out
    err = out[2]
    assert isinstance(err, pk.distributed.ChunkError) and err.index == 2, err
    assert "chunk 2 (3) its result could not be sent back" in str(err) and "lock" in str(err).lower(), str(err)
    with pytest.raises(pk.distributed.ChunkError, match=r"chunk 2 \(3\) its result could not be sent back"):
        pk.distributed.run(lock_at_three, [1, 2, 3, 4], client=client, timeout=60)


def test_a_function_or_chunk_that_cannot_be_pickled_is_named(client):
    import threading

    lock = threading.Lock()

    def holds_a_lock(state, x):
        with lock:
            return x

    with raises_type(r"the process function .*holds_a_lock.* cannot be pickled.*lock.*at a module's top level"):
        pk.distributed.run(holds_a_lock, [1], client=client, timeout=60)
    with raises_type(r"the setup function .* cannot be pickled"):
        pk.distributed.run(square, [1], setup=holds_a_lock, client=client, timeout=60)
    with raises_type(r"chunk 1 \(<unlocked _thread.lock.*\) cannot be pickled"):
        pk.distributed.run(square, [1, threading.Lock()], client=client, timeout=60)


def test_a_timeout_says_what_was_done_and_what_is_pending(client, tmp_path):
    """Chunks 2 and 3 run until the test ends them (they slept 8 s, which kept both workers busy
    after the test). The quick chunks' first run on a cluster (the workers import this module and
    take the run's setup: seconds on a busy machine, past a 2 s timeout with none done) is made
    before the timed run, which then measures the timeout alone."""
    release = tmp_path / "release"
    assert pk.distributed.run(held_until, [0, 1], client=client, timeout=120) == [0, 1]
    try:
        done = r"timeout=2 s passed with 2 of 4 chunks done; pending chunks: 2, 3; give a longer timeout="
        with pytest.raises(pk.Timeout, match=done) as err:
            pk.distributed.run(held_until, [0, 1, str(release), str(release)], client=client, timeout=2)
        assert isinstance(err.value, TimeoutError)  # alpyka's error, still the builtin
    finally:
        release.touch()  # the held chunks end: the workers are free for what follows
