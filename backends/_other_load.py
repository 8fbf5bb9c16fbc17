"""How many cores processes other than this one keep busy (the machine's busy time from
``/proc/stat`` less this process's own CPU time), sampled rarely: what an OpenCL wait chooses by."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable

#: ``/proc/stat``'s fields summed: user nice system idle iowait irq softirq steal (guest time is
#: counted inside user and nice already; steal, a hypervisor's other guests, is busy elsewhere)
_FIELDS = 8
_IDLE, _IOWAIT = 3, 4
#: a sample once the waits that ask for it (:meth:`OtherLoad.busy_at`) took this long since the
#: last one, and at least :data:`PERIOD_S` later: reading ``/proc/stat`` costs 15-25 us (150 us
#: cold), 0.1% of that time (0.75%) however sparse the waits are in wall time
WAITED_S = 0.02
#: the shortest window a sample averages over (10 ms ticks: 20 of them a core)
PERIOD_S = 0.1
#: cores that must be left free of other processes for the free-core choice: the waiting thread
#: and one worker of the runtime
FREE_CORES_NEEDED = 1.5

#: after a wait that stalled on cores counted free (:meth:`OtherLoad.stalled`), the cores count
#: as busy this long whatever the readings say: the cores were busy with this process's own
#: threads (a long kernel of another queue on the runtime's workers, a thread pool), which the
#: readings do not see
HOLD_S = 0.5

#: ``(wall s, jiffies, idle jiffies, this process's CPU s)``: one reading
Sample = tuple[float, int, int, float]


def read_proc_stat() -> str | None:
    """``/proc/stat``'s text (None where there is none: not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def cpu_jiffies(text: str, cpus: Iterable[int] | None = None) -> tuple[int, int]:
    """``(all jiffies, idle jiffies)`` of ``cpus`` (every CPU when None) in ``/proc/stat``'s text
    (ValueError where it has none of them)."""
    if cpus is None:
        lines = [ln for ln in text.split("\n", 1)[:1] if ln.startswith("cpu ")]
    else:
        wanted = {f"cpu{c}" for c in cpus}
        lines = [ln for ln in text.splitlines() if ln.split(" ", 1)[0] in wanted]
    if not lines:
        raise ValueError("no CPU line in /proc/stat")
    total = idle = 0
    for line in lines:
        ticks = [int(x) for x in line.split()[1 : 1 + _FIELDS]]
        total += sum(ticks)
        idle += ticks[_IDLE] + ticks[_IOWAIT]
    return total, idle


def others_busy(before: Sample, after: Sample, cores: int) -> float | None:
    """How many of ``cores`` processes other than this one kept busy on average between two
    samples (None for an empty window)."""
    wall, total, idle = after[0] - before[0], after[1] - before[1], after[2] - before[2]
    if wall <= 0 or total <= 0:
        return None
    busy = cores * (1.0 - idle / total)
    return max(0.0, busy - (after[3] - before[3]) / wall)


def _own_cpus() -> list[int] | None:
    """The CPUs this process may run on, where fewer than the machine's (None: all of them)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return None if len(allowed) >= (os.cpu_count() or 0) else allowed


class OtherLoad:
    """Whether processes other than this one leave it fewer than :data:`FREE_CORES_NEEDED` free
    cores (:attr:`busy`). A reading is taken once the waits that ask (:meth:`busy_at`) used up
    :attr:`left` (:data:`WAITED_S` after each reading) and :data:`PERIOD_S` passed. Busy until
    the first window ends, for :data:`HOLD_S` after a wait on cores counted free stalled, and
    always where ``/proc/stat`` is not. A hot caller inlines :meth:`busy_at`: subtract its wait
    from :attr:`left`, call :meth:`used_up` where that went below zero, then read :attr:`busy`."""

    __slots__ = ("busy", "left", "due", "others", "_held", "_cpus", "_cores", "_last", "_read", "_cpu_time")

    def __init__(
        self,
        read: Callable[[], str | None] = read_proc_stat,
        cpus: list[int] | None = None,
        cpu_time: Callable[[], float] = time.process_time,
    ) -> None:
        self._read, self._cpu_time = read, cpu_time  # (process_time: every thread of the process)
        self._cpus = _own_cpus() if cpus is None else cpus
        self._cores = len(self._cpus) if self._cpus is not None else os.cpu_count() or 1
        self.busy = True
        self.others: float | None = None  # the last window's figure
        self._held = -math.inf  # busy until then (:meth:`stalled`)
        self._last = self._sample(time.perf_counter())
        self.left = WAITED_S if self._last is not None else math.inf  # seconds of waits before a reading
        self.due = math.inf if self._last is None else self._last[0] + PERIOD_S

    def _sample(self, now: float) -> Sample | None:
        text = self._read()
        if text is None:
            return None
        try:
            total, idle = cpu_jiffies(text, self._cpus)
        except (ValueError, IndexError):
            return None
        return now, total, idle, self._cpu_time()

    def update(self, now: float) -> bool:
        """Take a reading now (``now``: ``time.perf_counter()``) and return :attr:`busy` for the
        window since the last one."""
        sample = self._sample(now)
        if sample is None:
            self.left = self.due = math.inf  # unreadable: the busy choice from now on
            self.busy = True
            return True
        others = others_busy(self._last, sample, self._cores) if self._last is not None else None
        self._last, self.due, self.left = sample, now + PERIOD_S, WAITED_S
        if others is not None:  # (a window without a tick keeps the last choice)
            self.others = others
            self.busy = self._cores - others < FREE_CORES_NEEDED or now < self._held
        return self.busy

    def used_up(self, now: float) -> None:
        """The waits used up :attr:`left`: a reading where :data:`PERIOD_S` passed, else a look
        again after a quarter of :data:`WAITED_S` more."""
        if now >= self.due:
            self.update(now)
        else:
            self.left = 0.25 * WAITED_S

    def busy_at(self, now: float, waited: float) -> bool:
        """:attr:`busy` for a wait at ``now`` of work whose last wait took ``waited`` seconds."""
        self.left -= waited
        if self.left < 0.0:
            self.used_up(now)
        return self.busy

    def stalled(self, now: float) -> None:
        """A wait chosen for free cores took far longer than a tiny command does: busy for
        :data:`HOLD_S` from ``now``."""
        self.busy, self._held = True, now + HOLD_S


class FixedLoad:
    """An :class:`OtherLoad` that never takes a reading: always busy, or always free (tests,
    benchmarks)."""

    __slots__ = ("busy", "left", "due", "others")

    def __init__(self, busy: bool) -> None:
        self.busy, self.left, self.due, self.others = busy, math.inf, math.inf, None

    def used_up(self, now: float) -> None:
        self.left = math.inf

    def busy_at(self, now: float, waited: float) -> bool:
        return self.busy

    def stalled(self, now: float) -> None:
        pass
