"""The benchmark scripts (benchmarks/, not a package) for the tests: :func:`run_script` runs one
as a user would, in a child process from the repository root (no progress bar, a
non-interactive matplotlib); :func:`load` imports one (``_common``, ``summary``, ``run_all``,
``bench_models``) in this process."""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load(name: str) -> ModuleType:
    """The benchmark module ``benchmarks/<name>.py``. The scripts import each other by bare name
    (``import _common as common``), as they do when run as scripts, so benchmarks/ goes on
    sys.path here (once, for the whole run): every test then shares one ``_common``."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["ALPYKA_NO_PROGRESS"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def selected(candidates: tuple[str, ...]) -> list[str]:
    """Those of ``candidates`` this run's backend selection keeps (tests/benchmarks/conftest.py puts
    it in the environment, where the scripts read it); skips the test when none is left."""
    import pytest

    chosen = set(os.environ.get("ALPYKA_BACKENDS", "").split(",")) - {""}
    kept = [b for b in candidates if not chosen or b in chosen]
    if not kept:
        pytest.skip(f"--backends / ALPYKA_BACKENDS select none of the backends it measures {list(candidates)}")
    return kept


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python *args`` in the repository root; its output captured as text."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=timeout
    )


def positive_finite(value: object) -> bool:
    """Whether a benchmark's figure is a measured one: a number (not a bool), finite, above 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
