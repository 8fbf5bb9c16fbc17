"""The suite is location-proof: ``python -m pytest /path/to/repo/tests/...`` from another directory
imports the checkout's packages, not test directories of the same name (tests/soa, tests/inference
would otherwise become namespace packages ``soa`` and ``inference``)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_collects_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    targets = [str(REPO / "tests" / d) for d in ("soa", "inference", "kernels")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *targets, "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:alpyka"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "error" not in proc.stdout.lower().split("collected")[-1]
