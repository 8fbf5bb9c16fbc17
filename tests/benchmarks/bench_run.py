"""Runs a benchmark script as a user would, in a child process from the repository root (no
progress bar, a non-interactive matplotlib): shared by the benchmark smoke tests, whose runs
start together in two lanes (:class:`SmokeRuns`, the ``smoke_runs`` fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["ALPYKA_NO_PROGRESS"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python *args`` in the repository root; its output captured as text."""
    return subprocess.run([sys.executable, *args], cwd=REPO, env=bench_env(), capture_output=True, text=True,
                          timeout=timeout)


#: the smoke run of each script: its arguments after the script, and its time limit (s)
SMOKE: dict[str, tuple[tuple[str, ...], float]] = {
    "bench_data": ((), 300), "bench_service": ((), 600), "bench_models": (("--models", "deepmet"), 300),
    "bench_kernels": ((), 240), "bench_backends": ((), 180), "bench_inference": ((), 180),
    "bench_pipeline": ((), 240), "bench_remote": ((), 300),
}
#: the smoke runs go in two lanes, one script at a time in each: two processes share the two cores
#: of a CI machine instead of one (they spend much of their time starting up: torch, numba, Triton).
#: The Triton ones share a lane, so two servers never start against each other's load.
LANES = (("bench_service", "bench_remote"),
         ("bench_data", "bench_models", "bench_kernels", "bench_backends", "bench_inference", "bench_pipeline"))


class SmokeRuns:
    """The smoke runs of ``names`` (keys of :data:`SMOKE`), started at once in the two lanes of
    background threads; :meth:`result` waits for one. Each writes into its own folder of ``root``."""

    def __init__(self, names: set[str], root: Path) -> None:
        unknown = names - set(SMOKE)
        if unknown:
            raise KeyError(f"no smoke run for {sorted(unknown)}; known: {sorted(SMOKE)}")
        self.root = root
        self._results: dict[str, subprocess.CompletedProcess | BaseException] = {}
        self._done = {n: threading.Event() for n in names}
        self._threads = [threading.Thread(target=self._lane, args=([n for n in lane if n in names],),
                                          name=f"smoke lane {i}", daemon=True) for i, lane in enumerate(LANES)]
        for t in self._threads:
            t.start()

    def out(self, name: str) -> Path:
        """Where ``name`` writes its document and plot."""
        return self.root / name

    def _lane(self, names: list[str]) -> None:
        for name in names:
            args, limit = SMOKE[name]
            out = self.out(name)
            out.mkdir(parents=True, exist_ok=True)
            try:
                self._results[name] = run_script([f"benchmarks/{name}.py", "--smoke", "--no-progress", *args,
                                                  "--out", str(out)], timeout=limit)
            except BaseException as exc:  # noqa: BLE001 - the test that waits for it raises it
                self._results[name] = exc
            self._done[name].set()

    def result(self, name: str) -> subprocess.CompletedProcess:
        """The finished run of ``name`` (its exception, such as a timeout, raised here)."""
        if name not in self._done:
            raise KeyError(f"{name} was not started: mark its test @pytest.mark.smoke_script({name!r})")
        # at most the lane's limits: the runs before it in its lane, then its own
        lane = next(lane for lane in LANES if name in lane)
        if not self._done[name].wait(sum(SMOKE[n][1] for n in lane[:lane.index(name) + 1]) + 30):
            raise TimeoutError(f"the smoke run of {name} did not finish")
        got = self._results[name]
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        for t in self._threads:
            t.join()
