"""Numeric ``ALPYKA_*`` environment variables: a value alpyka cannot use is an EnvVarError (a
ValueError) naming the variable, its value and what it takes, wherever the variable is read
(it was Python's bare "could not convert string to float: 'abc'")."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import portable as pk
from portable.env import env_number

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "raw, kind, bounds, want",
    [
        ("abc", float, {}, "a number"),
        ("2.5", int, {}, "an integer"),
        ("nan", float, {}, "a number"),
        ("inf", float, {"minimum": 0}, "a number >= 0"),
        ("-1", int, {"minimum": 0}, "an integer >= 0"),
        ("0", float, {"above": 0}, "a number > 0"),
    ],
)
def test_env_number_names_the_variable_its_value_and_what_it_takes(monkeypatch, raw, kind, bounds, want):
    monkeypatch.setenv("ALPYKA_SOMETHING", raw)
    with pytest.raises(pk.EnvVarError, match=rf"ALPYKA_SOMETHING='{raw}': expected {want}"):
        env_number("ALPYKA_SOMETHING", 1, kind, **bounds)
    assert issubclass(pk.EnvVarError, ValueError) and issubclass(pk.EnvVarError, pk.AlpykaError)


def test_env_number_reads_good_values_and_defaults(monkeypatch):
    monkeypatch.setenv("ALPYKA_SOMETHING", " 12 ")
    assert env_number("ALPYKA_SOMETHING", 1, int, minimum=1) == 12
    assert env_number("ALPYKA_SOMETHING", 1.0, float, above=0) == 12.0
    monkeypatch.setenv("ALPYKA_SOMETHING", "")
    assert env_number("ALPYKA_SOMETHING", 7, int) == 7
    monkeypatch.delenv("ALPYKA_SOMETHING")
    assert env_number("ALPYKA_SOMETHING", None, float) is None


def test_opencl_probe_timeout(monkeypatch):
    from backends import _opencl_devices

    monkeypatch.setenv("ALPYKA_OPENCL_PROBE_TIMEOUT", "abc")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_OPENCL_PROBE_TIMEOUT='abc': expected a number > 0"):
        _opencl_devices.probe(None, None)  # read before the device is touched


def test_threads_inline_us_at_import():
    """Read when the cpu_threads backend's cost model is imported: the import fails naming it."""
    env = {**os.environ, "ALPYKA_THREADS_INLINE_US": "abc"}
    done = subprocess.run(
        [sys.executable, "-c", "import backends._launch_cost"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "EnvVarError: environment variable ALPYKA_THREADS_INLINE_US='abc': expected a number >= 0" in done.stderr


def test_dask_worker_device(monkeypatch):
    pytest.importorskip("distributed", reason="pk.distributed needs dask (pip install -e '.[dask]')")
    from portable.distributed._worker import pick_device

    monkeypatch.setenv("ALPYKA_DEVICE", "first")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_DEVICE='first': expected an integer >= 0"):
        pick_device(SimpleNamespace(name="w0"), "cpu_serial")
    monkeypatch.setenv("ALPYKA_DEVICE", "0")
    assert pick_device(SimpleNamespace(name="w0"), "cpu_serial") is pk.device("cpu_serial")


@pytest.mark.parametrize(
    "name, module",
    [
        ("ALPYKA_DEBUG", "portable"),
        ("ALPYKA_ASSERTS", "portable"),
        ("ALPYKA_VERIFY_IR", "portable"),
        ("ALPYKA_EMULATE_CHECKS", "portable"),
        ("ALPYKA_TORCH_THREADS", "inference"),
    ],
)
def test_a_bad_value_read_deep_inside_ends_a_script_at_import_with_one_line(name, module, tmp_path):
    """A switch read at a launch or a compile (ALPYKA_DEBUG, ALPYKA_VERIFY_IR, ALPYKA_EMULATE_CHECKS)
    and inference's ALPYKA_TORCH_THREADS (read at the first model) ended a script with a traceback
    through the launch, or ALPYKA_ASSERTS with one through the import machinery: each is read at
    import now, and the script ends with the one line that names the variable."""
    script = tmp_path / "script.py"
    script.write_text(f"import {module}\nprint('imported')\n")
    env = {**os.environ, name: "maybe"}
    env.pop("ALPYKA_TRACEBACK", None)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "imported" not in done.stdout, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"script.py: error: EnvVarError: environment variable {name}='maybe': expected"), lines


def test_torch_threads(monkeypatch):
    pytest.importorskip("torch", reason="inference needs torch (pip install -e '.[torch]')")
    from inference import _runtime

    for raw in ("abc", "0", "1.5"):
        monkeypatch.setenv("ALPYKA_TORCH_THREADS", raw)
        with pytest.raises(pk.EnvVarError, match=f"ALPYKA_TORCH_THREADS='{raw}': expected an integer >= 1"):
            _runtime._env_threads()  # (portable.env.torch_threads)


def test_serve_shm_sweep_ticks_at_import():
    pytest.importorskip("pytriton", reason="alpyka serve needs PyTriton (pip install -e '.[serve]')")
    env = {**os.environ, "ALPYKA_SERVE_SHM_SWEEP_TICKS": "often"}
    done = subprocess.run(
        [sys.executable, "-c", "import inference.serving._child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "ALPYKA_SERVE_SHM_SWEEP_TICKS='often': expected an integer >= 1" in done.stderr


def test_test_support_variables(monkeypatch):
    """The suite's own: the hang guard's limit and the CUDA stand-in's threads and seed."""
    from alpyka_testing import hang_guard
    from backends.emulator import cuda_on_cpu

    monkeypatch.setenv("ALPYKA_HANG_TIMEOUT", "soon")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_HANG_TIMEOUT='soon': expected a number > 0"):
        hang_guard.pytest_configure(None)  # read before anything is armed
    monkeypatch.setenv("ALPYKA_EMULATE_THREADS", "many")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_EMULATE_THREADS='many': expected an integer >= 1"):
        cuda_on_cpu._threads()
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", "1e3")
    with pytest.raises(pk.EnvVarError, match="ALPYKA_EMULATE_SEED='1e3': expected an integer"):
        cuda_on_cpu.seed()
    monkeypatch.setenv("ALPYKA_EMULATE_SEED", "-1")
    assert cuda_on_cpu.seed() == 2**64 - 1


def test_emulator_executor(monkeypatch):
    """``ALPYKA_EMULATE_EXEC``: ``cpp`` or ``opencl``; the opencl executor needs an OpenCL CPU device."""
    from backends.emulator import fake_cupy_kernels

    monkeypatch.setenv("ALPYKA_EMULATE_EXEC", "gpu")
    with pytest.raises(pk.EnvVarError, match=r"ALPYKA_EMULATE_EXEC='gpu': use one of cpp, opencl"):
        fake_cupy_kernels.executor_name()
    monkeypatch.setattr(pk, "devices", lambda backend: [])  # no OpenCL CPU device
    with pytest.raises(pk.EnvVarError, match=r"has none here: unset ALPYKA_EMULATE_EXEC \(the default executor, cpp\)"):
        fake_cupy_kernels._cpu_device()


@pytest.mark.parametrize(
    "name, raw, want",
    [
        ("ALPYKA_EMULATE_THREADS", "abc", "expected an integer >= 1"),
        ("ALPYKA_EMULATE_THREADS", "0", "expected an integer >= 1"),
        ("ALPYKA_EMULATE_SEED", "1.5", "expected an integer"),
    ],
)
def test_emulator_threads_and_seed_at_import(name, raw, want):
    """Read when portable is imported (they surfaced only as cudaErrorLaunchFailure at the first
    emulated launch): the import fails naming the variable."""
    env = {**os.environ, name: raw}
    done = subprocess.run(
        [sys.executable, "-c", "import portable"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert f"EnvVarError: environment variable {name}={raw!r}: {want}" in done.stderr, done.stderr


def test_env_flag_is_the_one_boolean_parser(monkeypatch):
    """ALPYKA_DEBUG, ALPYKA_ASSERTS and ALPYKA_EMULATE_CHECKS take the same spellings."""
    from portable.compiler import debug_enabled
    from portable.env import debug_flag, emulate_checks, env_flag

    for raw, value in [("1", True), ("On", True), (" true ", True), ("YES", True), ("0", False), ("off", False)]:
        assert env_flag("ALPYKA_X", not value, raw) is value
        assert debug_flag(raw) is value and debug_flag(raw.encode()) is value
        monkeypatch.setenv("ALPYKA_DEBUG", raw)
        monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", raw)
        assert debug_enabled() is value and emulate_checks() is value
    for raw in ("false", "no", "", None):
        assert debug_flag(raw) is False
    for raw in ("2", "maybe", "debug"):
        with pytest.raises(pk.EnvVarError, match=f"ALPYKA_DEBUG={raw!r}: expected 1"):
            debug_flag(raw)


@pk.kernel
def _fill_for_the_guards(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = 1.5


@pytest.mark.alpyka_backends("opencl")
def test_ci_guards_read_off_as_off(device, queue, monkeypatch):
    """ALPYKA_CHECK_CUDA and ALPYKA_CHECK_HIP take env_flag's spellings: ``off`` turned them on
    (any value but ``0`` did); the kernel here is built with both off and neither guard runs."""
    from backends import _c_build, _hip_check

    def refuse(*args, **kwargs):
        raise AssertionError("a guard ran although its variable says off")

    monkeypatch.setattr(_c_build, "nvrtc_compile", refuse)
    monkeypatch.setattr(_c_build, "nvrtc_check", refuse)  # (a marker of this kernel skips nvrtc_compile)
    monkeypatch.setattr(_hip_check, "check_source", refuse)
    monkeypatch.setenv("ALPYKA_CHECK_CUDA", "off")
    monkeypatch.setenv("ALPYKA_CHECK_HIP", "False")
    out = pk.Buffer(device, (8,), np.float64)
    pk.exec(queue, pk.make_workdiv(device, 1, 8), _fill_for_the_guards, out, 8)
    host = np.zeros(8)
    pk.memcpy(queue, host, out)
    queue.wait()
    np.testing.assert_array_equal(host, np.full(8, 1.5))


def test_traceback_takes_the_boolean_spellings(monkeypatch, capsys):
    """ALPYKA_TRACEBACK=0 (or off/false/no) keeps the one-line error (any non-empty value showed
    the traceback); 1/on/true/yes shows it, and so does a value alpyka cannot read."""
    from portable.cli import CliError, run

    def command(argv, prog):
        raise CliError("the one line")

    for raw in ("0", "off", "false", "no", ""):
        monkeypatch.setenv("ALPYKA_TRACEBACK", raw)
        assert run(command, [], "alpyka") == 2
        assert "alpyka: error: the one line" in capsys.readouterr().err
    for raw in ("1", "on", "yes", "maybe"):
        monkeypatch.setenv("ALPYKA_TRACEBACK", raw)
        with pytest.raises(CliError, match="the one line"):
            run(command, [], "alpyka")


def test_a_bad_alpyka_backend_is_named_as_the_variable(monkeypatch):
    """``ALPYKA_BACKEND=nope alpyka demo`` (or any script taking ``pk.default_backend()``) said
    "unknown backend 'nope'" with no word of the variable, to a user who typed no backend name:
    the message names ALPYKA_BACKEND and its value now, for an unknown and an unusable backend."""
    from portable import _registry

    monkeypatch.setenv("ALPYKA_BACKEND", "nope")
    with pytest.raises(pk.EnvVarError, match=r"ALPYKA_BACKEND='nope': unknown backend 'nope'.*unset it"):
        pk.default_backend()
    monkeypatch.setenv("ALPYKA_BACKEND", "cpu_serial")
    assert pk.default_backend() == "cpu_serial"

    def unusable(name):
        raise pk.BackendUnavailable(f"backend {name!r} is unavailable: a test made it so")

    monkeypatch.setattr(_registry, "get_backend", unusable)
    with pytest.raises(pk.BackendUnavailable, match=r"ALPYKA_BACKEND='cpu_serial': backend .* a test made it so"):
        pk.default_backend()
