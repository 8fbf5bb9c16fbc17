"""The load other processes put on the machine while a benchmark runs (the load average, the
cores they kept busy, from ``/proc/stat``) and :class:`BusyCores`, which makes a machine whose
every core runs work. The scripts reach these through ``_common`` (``common.load_average``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from backends._other_load import cpu_jiffies, others_busy, read_proc_stat


def cpu_ticks() -> tuple[float, int, int, float] | None:
    """``(wall s, all jiffies, idle jiffies, CPU s of this process and its waited-for children)``
    now (/proc/stat, read as alpyka's OpenCL waits read it; None elsewhere)."""
    text = read_proc_stat()
    if text is None:
        return None
    try:
        total, idle = cpu_jiffies(text)
    except (ValueError, IndexError):
        return None
    t = os.times()
    return time.perf_counter(), total, idle, t.user + t.system + t.children_user + t.children_system


def others_cores(before: tuple | None, after: tuple | None, cores: int | None = None) -> float | None:
    """How many of the machine's ``cores`` (all of them by default) other processes kept busy on
    average between two :func:`cpu_ticks` (all busy time less this process's and its children's):
    what a parallel runtime measured then could not have."""
    if before is None or after is None:
        return None
    return others_busy(before, after, cores or os.cpu_count() or 1)


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ----------------------------------------------------------------------------- busy cores
#: what a process that keeps one core busy runs
_SPIN = "while True: pass"


class BusyCores:
    """``with BusyCores(n) as busy:`` ``n`` processes spinning on the CPU (busy cores, as a machine
    where every core runs work), started here and killed by their pid at the end; ``busy.load()``:
    the load average and how many cores processes other than this one kept busy since the start
    (the spinners and anyone else, from ``/proc/stat``; None where it is not)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._procs: list[Any] = []
        self._ticks: tuple | None = None

    def __enter__(self) -> BusyCores:
        import subprocess

        self._procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(self.n)]
        time.sleep(0.3 if self.n else 0.0)  # they run before the clock starts
        self._ticks = cpu_ticks()
        return self

    def load(self) -> dict[str, Any]:
        """``{"busy_processes", "load_average", "cores_busy_elsewhere"}`` now."""
        return {
            "busy_processes": self.n,
            "load_average": load_average(),
            "cores_busy_elsewhere": others_cores(self._ticks, cpu_ticks(), os.cpu_count() or 1),
        }

    def __exit__(self, *exc: Any) -> None:
        for p in self._procs:
            p.kill()
            p.wait()
        self._procs = []
