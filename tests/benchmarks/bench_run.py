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


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python *args`` in the repository root; its output captured as text."""
    return subprocess.run([sys.executable, *args], cwd=REPO, env=bench_env(), capture_output=True, text=True,
                          timeout=timeout)
