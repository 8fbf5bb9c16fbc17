"""The layering rules that ruff checks: banned imports (TID251), declared per package in
soa/, portable/, backends/, inference/ and alpyka_demo/ ruff.toml (each extends pyproject.toml).

Each rule is checked on a probe file handed to ruff as if it sat in the package
(``--stdin-filename``): what a package must not import is reported, what it may import is not,
every private module of portable is banned where only the public API is allowed, and the tree
keeps the bans. What ruff cannot say (import circles, module names in strings, decisions by a
backend's name) is tests/portable/test_layering.py's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the packages whose ruff.toml bans imports
PACKAGES = ("soa", "portable", "backends", "inference", "alpyka_demo")


def _ruff_bans(package: str, source: str) -> list[str]:
    """ruff's TID251 reports for ``source`` placed in ``package`` (one line each), with the
    project's configuration as it applies there."""
    probe = f"{package}/_ban_probe.py"
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "TID251", "--output-format", "concise"]
        + ["--stdin-filename", probe, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    reports = [line for line in done.stdout.splitlines() if line.startswith(probe) and "TID251" in line]
    assert done.returncode == (1 if reports else 0), done.stdout + done.stderr
    return reports


#: (package, import, the banned module ruff names): each rule of the layering (CONTRIBUTING.md, "Architecture")
BANNED = [
    ("soa", "import portable", "portable"),
    ("soa", "from backends import cpu_serial", "backends"),
    ("soa", "from inference import Model", "inference"),
    ("portable", "from backends import cpu_serial", "backends"),
    ("portable", "import backends.opencl", "backends"),
    ("portable", "from inference import Model", "inference"),
    ("portable", "import torch", "torch"),
    ("portable", "from alpyka_demo import pipeline", "alpyka_demo"),
    ("portable", "import alpyka_testing.kernels", "alpyka_testing"),
    ("backends", "import torch.nn", "torch"),
    ("backends", "from inference._model import Model", "inference"),
    ("backends", "from portable._buffer import Buffer", "portable._buffer"),
    ("backends", "from portable.compiler._kernel import Kernel", "portable.compiler._kernel"),
    ("backends", "from portable import _queue", "portable._queue"),
    ("backends", "import alpyka_testing", "alpyka_testing"),
    ("inference", "from backends.opencl import OpenCLBackend", "backends"),
    ("inference", "from portable.spi import Backend", "portable.spi"),
    ("inference", "from portable._buffer import Buffer", "portable._buffer"),
    ("inference", "import alpyka_demo", "alpyka_demo"),
    ("inference", "from alpyka_testing.models import mlp", "alpyka_testing"),
    ("alpyka_demo", "from alpyka_testing import kernels", "alpyka_testing"),
]


@pytest.mark.parametrize(("package", "source", "module"), BANNED, ids=[f"{p}:{s}" for p, s, _ in BANNED])
def test_ruff_bans_what_a_package_must_not_import(package: str, source: str, module: str) -> None:
    reports = _ruff_bans(package, source + "\n")
    assert len(reports) == 1 and f"`{module}` is banned" in reports[0], reports


#: (package, import): what each package may use, which the bans must leave alone
ALLOWED = [
    ("portable", "import soa"),
    ("portable", "from ._buffer import Buffer"),
    ("portable", "from .compiler._kernel import Kernel"),
    ("backends", "import portable as pk"),
    ("backends", "from portable.spi import Backend, queue_impl"),
    ("backends", "from portable.compiler import ir"),
    ("backends", "from portable.compiler.types import ScalarType"),
    ("backends", "from ._host import HostQueue"),
    ("backends", "import soa"),
    ("inference", "import portable as pk"),
    ("inference", "import soa"),
    ("inference", "import torch"),
    ("inference", "from ._model import Model"),
    ("alpyka_demo", "import inference"),
    ("alpyka_demo", "import portable as pk"),
]


@pytest.mark.parametrize(("package", "source"), ALLOWED, ids=[f"{p}:{s}" for p, s in ALLOWED])
def test_ruff_allows_what_a_package_may_import(package: str, source: str) -> None:
    assert _ruff_bans(package, source + "\n") == []


def _private_modules() -> list[str]:
    """Every private module of portable (a part of its name starts with ``_``), by its
    shortest private prefix: ``portable._buffer``, ``portable.compiler._kernel``."""
    found = set()
    for f in (ROOT / "portable").rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        private = [i for i, part in enumerate(parts) if part.startswith("_")]
        if private:
            found.add(".".join(parts[: private[0] + 1]))
    return sorted(found)


@pytest.mark.parametrize("package", ["backends", "inference"])
def test_every_private_module_of_portable_is_banned(package: str) -> None:
    """backends see the core through portable.spi and its public modules, inference through its
    public API: ruff names no module pattern, so each ruff.toml lists portable's private modules,
    and a new one must be added there."""
    modules = _private_modules()
    assert "portable._buffer" in modules and "portable.compiler._kernel" in modules, modules
    reports = _ruff_bans(package, "".join(f"import {m}\n" for m in modules))
    unbanned = [m for line, m in enumerate(modules, 1) if not any(f":{line}:" in r for r in reports)]
    assert not unbanned, f"add these to {package}/ruff.toml's banned-api: {unbanned}"


def test_the_packages_keep_the_bans() -> None:
    """The tree itself: no package imports what its ruff.toml bans (what .ci/run's ruff check
    reports too, here for a run of the tests alone)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "TID251", "--output-format", "concise", *PACKAGES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
