"""The layering rules as import-linter contracts ([tool.importlinter] in pyproject.toml: the
layers soa <- portable <- backends | inference <- alpyka_demo, portable's private modules, no torch
below inference, compiler passes free of backends and the runtime, no alpyka_testing in the
library), checked on grimp's graph of every import.

The tree keeps the contracts, and each rule refuses what it should: probe modules placed in a
copy of the packages import what a package must not (each is named in the broken contracts) and
what it may (none is). What no linter says (import circles inside portable's layers, module
names in strings, decisions by a built-in backend's name) is tests/portable/test_layering.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter (the test extra) is not installed")

ROOT = Path(__file__).resolve().parents[2]
#: the packages the contracts cover
PACKAGES = ("soa", "portable", "backends", "inference", "alpyka_demo")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages found from ``cwd`` (its pyproject.toml), no cache written."""
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    code = (
        "import sys; from importlinter.cli import lint_imports_command as main; sys.argv[1:] = ['--no-cache']; main()"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


#: (package, import, the module it must not import): each rule of the layering (CONTRIBUTING.md, "Architecture")
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
    ("backends", "from portable.compiler._inline import inline_device_functions", "portable.compiler._inline"),
    ("backends", "from portable import _queue", "portable._queue"),
    ("backends", "import alpyka_testing", "alpyka_testing"),
    ("inference", "from backends.opencl import OpenCLBackend", "backends"),
    ("inference", "from portable.spi import Backend", "portable.spi"),
    ("inference", "from portable._buffer import Buffer", "portable._buffer"),
    ("inference", "import alpyka_demo", "alpyka_demo"),
    ("inference", "from alpyka_testing.models import mlp", "alpyka_testing"),
    ("alpyka_demo", "from alpyka_testing import kernels", "alpyka_testing"),
]


#: (package, import): what each package may use, which the bans must leave alone
ALLOWED = [
    ("portable", "import soa"),
    ("portable", "from ._buffer import Buffer"),
    ("portable", "from .compiler._kernel import Kernel"),
    ("backends", "import portable as pk"),
    ("backends", "from portable.spi import Backend, queue_impl"),
    ("backends", "from portable.compiler import ir"),
    ("backends", "from portable.compiler.types import ScalarType"),
    ("backends", "from portable.compiler.passes import CPU_PIPELINE"),
    ("backends", "from ._host import HostQueue"),
    ("backends", "import soa"),
    ("inference", "import portable as pk"),
    ("inference", "import soa"),
    ("inference", "import torch"),
    ("inference", "from ._model import Model"),
    ("alpyka_demo", "import inference"),
    ("alpyka_demo", "import portable as pk"),
]


def test_the_packages_keep_the_contracts() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def test_each_contract_refuses_what_a_package_must_not_import(tmp_path: Path) -> None:
    """One run over a copy of the packages with a probe module per rule: every banned probe is
    named with the module it must not import, no allowed probe is named."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    probes = {}
    for i, (package, source, module) in enumerate(BANNED):
        probes[f"{package}._banned_probe_{i}"] = (source, module)
        (tmp_path / package / f"_banned_probe_{i}.py").write_text(source + "\n")
    for i, (package, source) in enumerate(ALLOWED):
        probes[f"{package}._allowed_probe_{i}"] = (source, None)
        (tmp_path / package / f"_allowed_probe_{i}.py").write_text(source + "\n")
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    missed = [
        (name, source)
        for name, (source, module) in probes.items()
        if module is not None and not any(f"{name} -> {module}" in line for line in lines)
    ]
    assert not missed, f"not refused: {missed}\n{done.stdout}"
    wrongly = [
        (name, source) for name, (source, module) in probes.items() if module is None and f"{name} " in done.stdout
    ]
    assert not wrongly, f"refused though allowed: {wrongly}\n{done.stdout}"
