"""Plugins that misbehave are plugin failures with their reason (issue 38 item 12), shown by
``pk.unavailable_backends()`` and ``alpyka info``: one that calls ``sys.exit`` when loaded (it
ended the process of ``pk.available_backends()``), one whose name is a built-in's or another
distribution's (dropped without a word), one whose ``devices()`` returns junk (it came back as a
device). The plugins are tests/plugin_backend/alpyka_faulty_plugins, modelled on the
out-of-tree cpu_serial_plugin next to it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import portable as pk
from portable import _registry

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SRC = ROOT / "tests" / "plugin_backend"


@pytest.fixture
def registry(monkeypatch):
    """The registry's state, restored after the test (registrations are process-wide)."""
    monkeypatch.setattr(_registry, "_programmatic", dict(_registry._programmatic))
    monkeypatch.setattr(_registry, "_loaded", dict(_registry._loaded))
    monkeypatch.setattr(_registry, "_reasons", dict(_registry._reasons))
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    return _registry


def test_a_factory_that_calls_sys_exit_leaves_the_process_running(registry):
    pk.register_backend("exiting_plugin", "alpyka_faulty_plugins:exits")
    assert "exiting_plugin" not in pk.available_backends()
    assert "called sys.exit(3) while it loaded" in pk.unavailable_backends()["exiting_plugin"]
    with pytest.raises(pk.BackendUnavailable, match="sys.exit"):
        pk.device("exiting_plugin")


JUNK = {
    "strings": "returned a str ('cpu:0') at position 0",
    "none": "returned a NoneType, not a list",
    "empty": "returned an empty list",
    "generator": "returned a generator, not a list",
    "another_backends_device": "a device of backend 'cpu_serial' with index 0, not 'junk_plugin' index 0",
    "wrong_index": "with index 3, not 'junk_plugin' index 0",
    "no_limits": "a device with limits of type dict",
}


@pytest.mark.parametrize("kind", sorted(JUNK))
def test_junk_from_devices_is_a_plugin_failure_not_a_device(registry, kind):
    from alpyka_faulty_plugins import junk

    pk.register_backend("junk_plugin", lambda: junk("junk_plugin", kind))
    assert "junk_plugin" not in pk.available_backends()
    reason = pk.unavailable_backends()["junk_plugin"]
    assert JUNK[kind] in reason and "its devices()" in reason, reason
    with pytest.raises(pk.BackendUnavailable, match="backend 'junk_plugin' is unavailable"):
        pk.devices("junk_plugin")


def test_a_builtin_replaced_in_process_is_checked_as_a_plugin(registry):
    """``register_backend(builtin, ..., replace=True)`` before its first use: the replacement is
    a plugin, its devices checked (cpu_threads taken out of this test's copy of the loaded
    backends, as in a process that has not used it yet)."""
    from alpyka_faulty_plugins import junk

    registry._loaded.pop("cpu_threads", None)

    pk.register_backend("cpu_threads", lambda: junk("cpu_threads", "strings"), replace=True)
    assert "returned a str" in pk.unavailable_backends()["cpu_threads"]


def _installed(tmp_path: Path) -> Path:
    """Two distributions as pip would leave them: cpu_serial_plugin's, and faulty-plugins,
    whose entry points exit at import and in the factory, take the names ``cuda`` and
    ``cpu_serial_plugin``, and return junk devices."""
    site = tmp_path / "site"
    for pkg in ("alpyka_serial_plugin", "alpyka_faulty_plugins"):
        shutil.copytree(PLUGIN_SRC / pkg, site / pkg)
    dists = {
        "alpyka_serial_plugin-1.0": ("alpyka-serial-plugin", "cpu_serial_plugin = alpyka_serial_plugin:load\n"),
        "faulty_plugins-1.0": (
            "faulty-plugins",
            "exit_at_import = alpyka_faulty_plugins.exiting:load\n"
            "exit_in_factory = alpyka_faulty_plugins:exits\n"
            "junk_devices = alpyka_faulty_plugins:junk\n"
            "cuda = alpyka_serial_plugin:load\n"
            "cpu_serial_plugin = alpyka_serial_plugin:load\n",
        ),
    }
    for folder, (name, eps) in dists.items():
        info = site / f"{folder}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[alpyka.backends]\n{eps}")
    return site


def test_installed_faulty_plugins_are_reported_and_the_process_goes_on(tmp_path):
    env = dict(os.environ)
    env.pop("ALPYKA_BACKENDS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(_installed(tmp_path)), str(ROOT), env.get("PYTHONPATH", "")])
    code = (
        "import json, portable as pk; avail = pk.available_backends(); "
        "print(json.dumps([avail, pk.unavailable_backends()]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    avail, reasons = json.loads(done.stdout.strip().splitlines()[-1])
    assert "cpu_serial" in avail and "cpu_serial_plugin" in avail
    for name in ("exit_at_import", "exit_in_factory", "junk_devices"):
        assert name not in avail and name in reasons, (name, reasons)
    assert "called sys.exit('alpyka_faulty_plugins.exiting: no device here" in reasons["exit_at_import"]
    assert "called sys.exit(3)" in reasons["exit_in_factory"]
    assert "its devices() returned a str ('cpu:0')" in reasons["junk_devices"]
    assert "the name of alpyka's own cuda backend" in reasons["cuda (from faulty-plugins)"]
    # the two distributions' cpu_serial_plugin: the first found is loaded, the other reported
    twice = [k for k in reasons if k.startswith("cpu_serial_plugin (from ")]
    assert len(twice) == 1 and "registers a backend named 'cpu_serial_plugin'" in reasons[twice[0]], reasons
    assert "does already; only the first is loaded" in reasons[twice[0]]
    info = subprocess.run(
        [sys.executable, "-m", "portable", "info"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert info.returncode == 0, info.stderr[-3000:]
    for line in (
        "exit_at_import unavailable: backend 'exit_at_import' called sys.exit(",
        "junk_devices unavailable: its devices() returned a str ('cpu:0') at position 0",
        "cuda (from faulty-plugins) unavailable: distribution 'faulty-plugins' registers a backend named 'cuda'",
        "cpu_serial_plugin available (alpyka_serial_plugin 1.0)",
        f"{twice[0]} unavailable: distribution",
    ):
        assert line in info.stdout, info.stdout
