"""ALPYKA_EMULATE, the user's switch to the GPU emulator (backends/emulator/): in a program of
one's own, ``pk.device("cuda")`` exists on any machine and runs the generated CUDA text on the
CPU; ``alpyka info`` says the backend is emulated; a value it does not know stops the import
with the variable's name and the values it takes (docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import portable as pk
from backends.emulator import fake_cupy_kernels
from portable.env import emulate_checks, parse_emulate

ROOT = Path(__file__).resolve().parents[2]

#: a user's script: a kernel on pk.device("cuda"), its answer against numpy's
USER_SCRIPT = """
import numpy as np
import portable as pk

@pk.kernel
def axpy(acc, y, x, a, n):
    for i in acc.uniform_elements(n):
        y[i] = a * x[i] + y[i]

dev = pk.device("cuda")
q = pk.Queue(dev)
x = np.arange(1000, dtype=np.float64)
y = np.ones(1000)
bx, by = pk.Buffer(dev, x.shape, x.dtype), pk.Buffer(dev, y.shape, y.dtype)
pk.memcpy(q, bx, x)
pk.memcpy(q, by, y)
pk.exec(q, pk.valid_workdiv(dev, x.size), axpy, by, bx, 2.0, x.size)
got = np.empty_like(y)
pk.memcpy(q, got, by)
q.wait()
assert np.array_equal(got, 2.0 * x + y), got
print("ok", dev.backend_name, dev.name)
"""


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPYKA_EMULATE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**env, **values}


def _needs_the_emulator() -> None:
    why = fake_cupy_kernels.why_not()
    if why is not None:
        pytest.skip(f"the GPU emulator cannot run here: {why}")


def test_a_user_script_runs_a_kernel_on_emulated_cuda(tmp_path):
    _needs_the_emulator()
    script = tmp_path / "my_script.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=_env(ALPYKA_EMULATE="cuda"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok cuda "), done.stdout


def test_info_marks_emulated_backends():
    _needs_the_emulator()
    done = subprocess.run(
        [sys.executable, "-m", "portable", "info"],
        env=_env(ALPYKA_EMULATE="rocm"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {
        line.split()[0]: line
        for line in done.stdout.splitlines()
        if line.startswith("  ") and not line.startswith("    ")
    }
    assert "available, emulated on the CPU (ALPYKA_EMULATE), not a GPU" in rows["rocm"], done.stdout
    assert "emulated" not in rows["cpu_serial"] and "emulated" not in rows["cuda"], done.stdout


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    """``argv`` run with ``env`` added to the suite's environment (``_env``), its output captured."""
    return subprocess.run(argv, env=_env(**env), capture_output=True, text=True, timeout=120)


def test_an_unknown_value_stops_the_import_naming_the_variable():
    done = _run([sys.executable, "-c", "import portable"], ALPYKA_EMULATE="cdua")
    assert done.returncode != 0
    assert "EnvVarError: environment variable ALPYKA_EMULATE='cdua': expected cuda, rocm or cuda,rocm" in done.stderr, (
        done.stderr
    )


def test_the_alpyka_command_reports_an_unknown_value_in_one_line(tmp_path):
    """``ALPYKA_EMULATE=cdua alpyka info`` printed a traceback of 33 lines through the import
    machinery (the command's errors are one line); a program that catches the import's error, or
    ALPYKA_TRACEBACK=1, is unchanged."""
    script = tmp_path / "alpyka"  # what pip writes for the console script
    script.write_text("import sys\nfrom portable.cli._main import main\nsys.exit(main())\n")
    env = _env(ALPYKA_EMULATE="cdua")
    done = subprocess.run([sys.executable, str(script), "info"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout)
    assert done.stderr.startswith("alpyka: error: EnvVarError: environment variable ALPYKA_EMULATE='cdua': expected ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    shown = _run([sys.executable, str(script), "info"], ALPYKA_EMULATE="cdua", ALPYKA_TRACEBACK="1")
    assert "Traceback" in shown.stderr and "EnvVarError" in shown.stderr, shown.stderr
    caught = _run(
        [sys.executable, "-c", "try:\n    import portable\nexcept ValueError as e:\n    print('caught', e)"],
        ALPYKA_EMULATE="cdua",
    )
    assert caught.returncode == 0 and caught.stdout.startswith("caught environment variable ALPYKA_EMULATE")
    assert caught.stderr == "", caught.stderr


@pytest.mark.parametrize(
    "raw,names",
    [
        (None, []),
        ("", []),
        ("off", []),
        ("cuda", ["cuda"]),
        ("ROCM", ["rocm"]),
        ("cuda, rocm", ["cuda", "rocm"]),
        ("all", ["cuda", "rocm"]),
    ],
)
def test_the_values_alpyka_emulate_takes(raw, names):
    assert parse_emulate(raw) == names


@pytest.mark.parametrize("raw", ["opencl", "cuda,gpu", "1", "yes"])
def test_values_alpyka_emulate_refuses(raw):
    with pytest.raises(pk.EnvVarError, match=f"ALPYKA_EMULATE={raw!r}: expected cuda, rocm or cuda,rocm"):
        parse_emulate(raw)


def test_the_checks_switch(monkeypatch):
    monkeypatch.delenv("ALPYKA_EMULATE_CHECKS", raising=False)
    assert emulate_checks() is True
    for raw, on in [("0", False), ("off", False), ("1", True), ("on", True)]:
        monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", raw)
        assert emulate_checks() is on
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "maybe")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_EMULATE_CHECKS='maybe': expected 1"):
        emulate_checks()


def test_emulate_later_in_a_process_takes_what_has_not_been_loaded(monkeypatch):
    """``_registry.emulate`` (the suite's way, after import) refuses another backend and one
    already loaded for real: its devices and buffers would belong to the real one."""
    from portable import _registry

    with pytest.raises(ValueError, match="the GPU emulator runs cuda, rocm, not 'opencl'"):
        _registry.emulate(["opencl"])
    monkeypatch.setattr(_registry, "_emulated", [])
    monkeypatch.setattr(_registry, "_loaded", {**_registry._loaded, "cuda": object()})
    with pytest.raises(ValueError, match="already loaded for real.*ALPYKA_EMULATE=cuda"):
        _registry.emulate(["cuda"])


def test_the_emulators_header_ships_with_alpyka():
    """An installed alpyka (not this checkout) has cuda_on_cpu.h and the cuda_on_cpu_*.h parts it
    includes beside cuda_on_cpu.py: the emulator force-includes it into every kernel it compiles."""
    import fnmatch
    import re

    import tomllib

    from backends.emulator import cuda_on_cpu

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert any(p == "backends*" for p in data["packages"]["find"]["include"])
    shipped = data["package-data"]["backends.emulator"]
    header = ROOT / "backends" / "emulator" / "cuda_on_cpu.h"
    parts = re.findall(r'^#include "([^"]+)"', header.read_text(), re.M)
    assert parts, "cuda_on_cpu.h includes its parts"
    for name in ["cuda_on_cpu.h", *parts]:
        assert (header.parent / name).is_file()
        assert any(fnmatch.fnmatch(name, pattern) for pattern in shipped), name
    # the kernel cache's key covers every part: an edit to any of them rebuilds the kernels
    assert {path.name for path in cuda_on_cpu.HEADERS} == {"cuda_on_cpu.h", *parts}


@pytest.mark.parametrize(("backend", "want_hip"), [("cuda", False), ("rocm", True)])
def test_a_missing_cupy_names_the_emulator_too(monkeypatch, backend, want_hip):
    """a user without a GPU read "install cupy-cuda13x" only, not how to run the backend anyway"""
    from backends._cupy_common import import_cupy

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    match = rf"cupy is not importable.*install cupy-.*ALPYKA_EMULATE={backend} runs"
    with pytest.raises(pk.BackendUnavailable, match=match):
        import_cupy(backend, want_hip)
