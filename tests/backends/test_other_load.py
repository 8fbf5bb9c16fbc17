"""How busy other processes keep the cores (backends/_other_load.py), the signal by which an OpenCL
queue's main thread picks its wait for short known work: joined while other processes leave
fewer than 1.5 cores free (busy cores: the runtime's own wait is the fast one), interruptible
where they leave more (free cores: a worker of the runtime ends a tiny command first). The
signal is computed on fixed ``/proc/stat`` samples here; the OpenCL side (the choice switching,
Ctrl-C on free and busy cores): tests/backends/test_opencl_wait_choice.py."""

import math
import os
import subprocess
import sys
import time

import pytest

from backends import _other_load as ol

STAT = """cpu  {u} 0 {s} {i} {w} 0 0 {st} 7 0
cpu0 {u0} 0 0 {i0} 0 0 0 0 0 0
cpu1 {u1} 0 0 {i1} 0 0 0 0 0 0
intr 1 2 3
"""


def _stat(u=0, s=0, i=0, w=0, st=0, u0=0, i0=0, u1=0, i1=0) -> str:
    return STAT.format(u=u, s=s, i=i, w=w, st=st, u0=u0, i0=i0, u1=u1, i1=i1)


def test_jiffies_sum_the_first_eight_fields_and_count_iowait_idle():
    # guest time (the ninth field) is inside user time already; steal counts as busy
    assert ol.cpu_jiffies(_stat(u=100, s=20, i=300, w=10, st=5)) == (435, 310)


def test_jiffies_of_some_cpus_only():
    text = _stat(u=999, i=999, u0=10, i0=90, u1=70, i1=30)
    assert ol.cpu_jiffies(text, [1]) == (100, 30)
    assert ol.cpu_jiffies(text, [0, 1]) == (200, 120)


def test_others_are_the_busy_cores_less_this_process():
    # 2 cores over 1 s: 150 of 200 jiffies busy (1.5 cores), this process used 0.5 s of CPU
    before, after = (10.0, 1000, 500, 3.0), (11.0, 1200, 550, 3.5)
    assert ol.others_busy(before, after, 2) == pytest.approx(1.0)
    # this process alone kept them busy: nobody else (never below zero, whatever the rounding)
    assert ol.others_busy(before, (11.0, 1200, 550, 5.0), 2) == 0.0
    assert ol.others_busy(before, (10.0, 1200, 550, 3.5), 2) is None  # no wall time
    assert ol.others_busy(before, (11.0, 1000, 500, 3.5), 2) is None  # no tick


class _Machine:
    """A fake ``/proc/stat`` and process CPU clock: ``run(seconds, others, own)`` advances them as
    two cores with ``others`` cores busy in other processes and ``own`` in this one."""

    def __init__(self) -> None:
        self.total = self.idle = 0
        self.own = 0.0
        self.reads = 0

    def read(self) -> str:
        self.reads += 1
        busy, idle = self.total - self.idle, self.idle  # (the lines of cpu0 and cpu1: half each)
        return _stat(u=busy, i=idle, u0=busy // 2, i0=idle // 2, u1=busy - busy // 2, i1=idle - idle // 2)

    def run(self, seconds: float, others: float, own: float) -> None:
        jiffies = round(2 * 100 * seconds)
        busy = round(100 * seconds * (others + own))
        self.total += jiffies
        self.idle += jiffies - busy
        self.own += own * seconds


def test_the_choice_follows_other_processes_and_samples_once_a_period(monkeypatch):
    m = _Machine()
    now = [100.0]
    monkeypatch.setattr(ol.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(ol, "WAITED_S", 0.05)  # (read at construction)
    load = ol.OtherLoad(read=m.read, cpus=[0, 1], cpu_time=lambda: m.own)
    assert load.busy and load.due == pytest.approx(100.0 + ol.PERIOD_S)  # busy until a window ends

    def after(seconds: float, others: float, own: float, waited: float | None = None) -> bool:
        """The machine ran ``seconds``, of which this process waited ``waited`` (all of them)."""
        m.run(seconds, others, own)
        now[0] += seconds
        return load.busy_at(now[0], seconds if waited is None else waited)

    assert not after(0.2, others=0.0, own=1.2)  # free cores: this process's workers spin 1.2
    assert load.others == pytest.approx(0.0)
    reads = m.reads
    assert not after(0.05, others=2.0, own=0.0, waited=0.06)  # enough waits, within the period: no reading
    assert m.reads == reads and load.left == pytest.approx(0.25 * 0.05)  # (a look again after 0.0125 s)
    load.left = 0.05  # (as if those waits had been spent otherwise)
    assert not after(0.3, others=2.0, own=0.0, waited=0.04)  # past the period, 0.04 s of waits: none yet
    assert m.reads == reads
    assert after(0.1, others=2.0, own=0.0, waited=0.011)  # a spinner per core: busy
    assert load.others == pytest.approx(2.0)  # (the window since the last sample: 0.45 s)
    assert load.left == 0.05
    assert after(0.2, others=1.0, own=0.5)  # one core left: too few (1.5 needed)
    assert not after(0.2, others=0.4, own=1.0)  # 1.6 free
    assert after(0.2, others=0.6, own=0.0)  # 1.4 free


def test_a_stalled_wait_holds_the_cores_busy_whatever_the_readings(monkeypatch):
    m, now = _Machine(), [100.0]
    monkeypatch.setattr(ol.time, "perf_counter", lambda: now[0])
    load = ol.OtherLoad(read=m.read, cpus=[0, 1], cpu_time=lambda: m.own)

    def after(seconds: float) -> bool:  # nothing else runs; every second spent waiting
        m.run(seconds, others=0.0, own=1.0)
        now[0] += seconds
        return load.busy_at(now[0], seconds)

    assert not after(0.2)
    load.stalled(now[0])
    assert load.busy
    assert after(0.2) and after(0.2)  # free readings within HOLD_S: still busy
    assert not after(ol.HOLD_S)


def test_without_proc_stat_the_choice_stays_busy():
    load = ol.OtherLoad(read=lambda: None, cpus=None)
    assert load.busy and load.due == math.inf and load.left == math.inf
    assert load.busy_at(1e12, 1e6)


def test_an_unreadable_sample_makes_it_busy_for_good():
    m, texts = _Machine(), []
    load = ol.OtherLoad(read=lambda: texts.pop() if texts else m.read(), cpus=[0, 1], cpu_time=lambda: m.own)
    time.sleep(0.01)
    m.run(0.2, others=0.0, own=0.0)
    assert not load.update(time.perf_counter())
    texts.append("garbage")
    assert load.update(time.perf_counter()) and load.due == load.left == math.inf


def test_the_fixed_load_never_samples():
    assert ol.FixedLoad(busy=True).busy_at(1e12, 1.0) and not ol.FixedLoad(busy=False).busy_at(1e12, 1.0)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat: the choice stays busy")
def test_processes_spinning_on_every_core_read_as_busy():
    """With a spinning process per core (and this one asleep), the real reading counts nearly
    every core busy elsewhere (other work on the machine only adds to it)."""
    load = ol.OtherLoad()
    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)  # they run
        load.update(time.perf_counter())
        time.sleep(0.5)
        assert load.update(time.perf_counter())
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert load.others is not None and load.others >= 0.75 * cores, load.others
