"""Runs a benchmark script as a user would, in a child process from the repository root (no
progress bar, a non-interactive matplotlib): shared by the benchmark smoke tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["ALPYKA_NO_PROGRESS"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def selected(candidates: tuple[str, ...]) -> list[str]:
    """Those of ``candidates`` this run's backend selection keeps (conftest.py puts it in the
    environment, where the scripts read it); skips the test when none is left."""
    import pytest

    chosen = set(os.environ.get("ALPYKA_BACKENDS", "").split(",")) - {""}
    kept = [b for b in candidates if not chosen or b in chosen]
    if not kept:
        pytest.skip(f"--backends / ALPYKA_BACKENDS select none of the backends it measures {list(candidates)}")
    return kept


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python *args`` in the repository root; its output captured as text."""
    return subprocess.run([sys.executable, *args], cwd=REPO, env=bench_env(), capture_output=True, text=True,
                          timeout=timeout)
