"""cpu_threads' cost model (backends/_launch_cost.py) judges a parallel launch against what that
launch's own data cost, so a kernel whose work depends on its data (CMSSW's ClusterChargeCut: the
digis per module) keeps running in parallel on a heavier event of the same grid."""

import time

import pytest

import portable as pk

tp = pytest.importorskip("backends._thread_pool")
cost = pytest.importorskip("backends._launch_cost")

pytestmark = pytest.mark.skipif("cpu_threads" not in pk.available_backends(), reason="cpu_threads is unavailable here")


def _replay(monkeypatch, wall: float, busy: list[float], cpu: list[float]) -> None:
    """The pool "runs" a job in ``wall`` seconds of a fake clock, its threads reporting ``busy``
    seconds of chunks and ``cpu`` CPU seconds (no thread runs: the figures decide alone)."""
    clock = [0.0]

    def run_job(job: tp._Job) -> None:
        clock[0] += wall
        job.busy += busy
        job.cpu += cpu

    monkeypatch.setattr(cost, "_perf", lambda: clock[0])
    monkeypatch.setattr(tp._pool, "run_job", run_job)
    monkeypatch.setattr(cost, "_cost", {})
    monkeypatch.setattr(cost, "_ratio", {})


@pytest.mark.skipif(not cost._CPU_CLOCK_FINE, reason="this OS's thread CPU clock ticks too coarsely")
def test_a_heavier_event_of_one_grid_is_judged_by_its_own_cpu_time(monkeypatch):
    key = (object(), 20)
    light = 1e-4  # seconds per block measured on a light event: 1000 blocks, 0.1 s inline
    _replay(monkeypatch, wall=0.55, busy=[0.5, 0.5], cpu=[0.5, 0.5])  # a 10x heavier event, 2 threads
    cost._parallel(lambda lo, hi: None, 0, 1000, (), key, 1, light, 0.1)
    # the two threads did 1 s of work in 0.55 s: parallel pays off (the light estimate said 5.5x slower)
    assert cost._ratio[key] == pytest.approx(0.55)
    assert cost._ratio[key] < cost.PARALLEL_GAIN


@pytest.mark.skipif(not cost._CPU_CLOCK_FINE, reason="this OS's thread CPU clock ticks too coarsely")
def test_threads_sharing_one_core_make_the_launch_inline(monkeypatch):
    """Other processes hold the other core: our two threads ran by turns, the launch took as long
    as their CPU time summed (and more), so the size runs inline."""
    key = (object(), 20)
    _replay(monkeypatch, wall=1.05, busy=[0.9, 0.6], cpu=[0.5, 0.5])
    cost._parallel(lambda lo, hi: None, 0, 1000, (), key, 1, 1e-3, 1.0)
    assert cost._ratio[key] == pytest.approx(1.05)
    assert cost._ratio[key] > cost.PARALLEL_GAIN


def test_the_pool_reports_each_threads_cpu_time():
    """A real parallel job: each participating thread reports the CPU time of its chunks."""
    tp._pool.start()
    if not tp._pool.nworkers:
        pytest.skip("one core: no pool workers")

    def spin(lo: int, hi: int) -> None:
        t_end = time.thread_time() + 0.002 * (hi - lo)
        while time.thread_time() < t_end:
            pass

    job = tp._Job(spin, (), [0, 2, 4])
    tp._pool.run_job(job)
    assert len(job.cpu) == len(job.busy) >= 1
    assert sum(job.cpu) >= 0.0079  # 4 blocks of 2 ms of CPU each, whichever thread ran them


@pytest.mark.skipif(not cost._CPU_CLOCK_FINE, reason="this OS's thread CPU clock ticks too coarsely")
def test_a_size_made_inline_under_load_goes_parallel_on_the_first_fast_retry(monkeypatch):
    """Parallel launches measured while other processes held the cores made the size inline (ratio
    3); the next retry finds the cores free: the size runs in parallel from then on."""
    key = (object(), 20)
    _replay(monkeypatch, wall=0.55, busy=[0.5, 0.5], cpu=[0.5, 0.5])
    cost._ratio[key] = 3.0
    cost._parallel(lambda lo, hi: None, 0, 1000, (), key, 1, 1e-3, 1.0)
    assert cost._ratio[key] == pytest.approx(0.55) and cost._ratio[key] < cost.PARALLEL_GAIN
    _replay(monkeypatch, wall=2.0, busy=[1.0, 1.0], cpu=[0.5, 0.5])  # one slow launch: a part of the way
    cost._ratio[key] = 0.55
    cost._parallel(lambda lo, hi: None, 0, 1000, (), key, 1, 1e-3, 1.0)
    assert cost._ratio[key] == pytest.approx(0.55 + (2.0 - 0.55) * cost.EMA)
