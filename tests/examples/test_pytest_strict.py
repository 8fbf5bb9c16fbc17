"""The suite's pytest configuration is strict (issue 42 item 5): an xfail mark on a test that
passes fails the run, and an unknown ini option is an error rather than a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path)]
    cmd += ["-p", "no:cacheprovider", "-p", "no:alpyka", "-p", "no:xdist", "-q", *extra]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_an_xfail_that_passes_fails_the_run(tmp_path):
    (tmp_path / "test_xpass.py").write_text(
        "import pytest\n\n\n@pytest.mark.xfail(reason='was broken')\ndef test_fixed():\n    pass\n"
    )
    run = _pytest(tmp_path, "test_xpass.py")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "XPASS(strict)" in run.stdout


def test_an_unknown_ini_option_is_an_error(tmp_path):
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    run = _pytest(tmp_path, "-o", "no_such_option=1", "test_ok.py")
    assert run.returncode != 0, run.stdout + run.stderr
    assert "no_such_option" in run.stderr
