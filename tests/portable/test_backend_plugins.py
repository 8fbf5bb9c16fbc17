"""Backends are plugins (issue 34 item 1): registered under the entry-point group
``alpyka.backends`` or through ``pk.register_backend``, loaded lazily, and known to the rest of
alpyka by the capabilities their devices declare, never by name.

The out-of-tree backend is tests/plugin_backend/alpyka_serial_plugin (``cpu_serial_plugin``):
installed here as a distribution on a temporary ``sys.path`` of a child process, it runs kernel
tests of the matrix through ``--backends=cpu_serial_plugin`` with no edit to alpyka.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from portable import _registry

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SRC = ROOT / "tests" / "plugin_backend"
PLUGIN = "cpu_serial_plugin"
#: kernel tests of the matrix the plugin runs (tests/kernels/), in a child pytest
KERNEL_TESTS = ["tests/kernels/test_language.py", "tests/kernels/test_indices.py", "tests/kernels/test_launch.py"]


@pytest.fixture
def registry(monkeypatch):
    """The registry's state, restored after the test (registrations are process-wide)."""
    monkeypatch.setattr(_registry, "_programmatic", dict(_registry._programmatic))
    monkeypatch.setattr(_registry, "_loaded", dict(_registry._loaded))
    monkeypatch.setattr(_registry, "_reasons", dict(_registry._reasons))
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    return _registry


def _installed_plugin(tmp_path: Path) -> Path:
    """A folder holding the plugin as an installed distribution: its package and a dist-info
    whose entry_points.txt registers it under ``alpyka.backends``, as pip would leave it."""
    site = tmp_path / "site"
    shutil.copytree(PLUGIN_SRC / "alpyka_serial_plugin", site / "alpyka_serial_plugin")
    info = site / "alpyka_serial_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: alpyka-serial-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[alpyka.backends]\n{PLUGIN} = alpyka_serial_plugin:load\n")
    return site


def _child_env(site: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ALPYKA_BACKENDS", None)
    paths = [str(p) for p in (site, ROOT) if p is not None]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ---------------------------------------------------------------- registration and loading
def test_builtins_come_first_in_their_order_then_plugins_alphabetically(registry):
    pk.register_backend("zz_plugin", "alpyka_serial_plugin:load")
    pk.register_backend(PLUGIN, "alpyka_serial_plugin:load")
    assert pk.backends() == ["cpu_serial", "cpu_threads", "opencl", "cuda", "rocm", PLUGIN, "zz_plugin"]
    assert PLUGIN in pk.available_backends()


def test_a_registered_plugin_runs_kernels_on_its_declared_device(registry):
    pk.register_backend(PLUGIN, "alpyka_serial_plugin:load")
    dev = pk.device(PLUGIN)
    assert dev.backend_name == PLUGIN and dev.capabilities == pk.DeviceCapabilities.host()
    n = 1000
    x, y = pk.Buffer(dev, (n,), np.float32), pk.Buffer(dev, (n,), np.float32)
    x.array[:] = np.arange(n, dtype=np.float32)
    y.array[:] = 1.0
    q = pk.Queue(dev, blocking=False)
    pk.exec(q, pk.valid_workdiv(dev, n), _axpy, np.float32(2.0), x, y, n)
    q.wait()
    np.testing.assert_array_equal(np.asarray(y), 2.0 * np.arange(n, dtype=np.float32) + 1.0)
    # the plugin kept what it learnt of the kernel in its own plans, through spi.KernelHandle only
    assert list(dev.backend.plans(_axpy).values()) == [1]
    from portable.cli._info import info_text

    assert f"{PLUGIN:<12} available (alpyka_serial_plugin 1.0)" in info_text()


@pk.kernel
def _axpy(acc, a, x, y, n):
    for i in acc.uniform_elements(n):
        y[i] = a * x[i] + y[i]


@pytest.mark.parametrize(
    "factory, reason",
    [
        ("no_such_module_for_alpyka:load", "could not be imported: No module named 'no_such_module_for_alpyka'"),
        ("alpyka_serial_plugin:no_such_factory", "failed to load: AttributeError"),
        (lambda: (_ for _ in ()).throw(ImportError("libsycl.so: cannot open")), "libsycl.so: cannot open"),
        (lambda: (_ for _ in ()).throw(pk.BackendUnavailable("no SYCL device")), "no SYCL device"),
        (lambda: object(), "its factory returned a object, not a portable.spi.Backend"),
        (42, "its factory is not callable (int)"),
    ],
)
def test_a_plugin_that_cannot_load_is_unavailable_with_the_reason(registry, factory, reason):
    pk.register_backend("broken_plugin", factory)
    assert "broken_plugin" in pk.backends() and "broken_plugin" not in pk.available_backends()
    assert reason in pk.unavailable_backends()["broken_plugin"]
    with pytest.raises(pk.BackendUnavailable, match="backend 'broken_plugin' is unavailable"):
        pk.device("broken_plugin")


def test_registration_refuses_bad_names_taken_names_and_loaded_backends(registry):
    with pytest.raises(ValueError, match="identifier"):
        pk.register_backend("sycl:0", "alpyka_serial_plugin:load")
    pk.register_backend("zz_plugin", "alpyka_serial_plugin:load")
    with pytest.raises(ValueError, match="registered already; pass replace=True"):
        pk.register_backend("zz_plugin", "alpyka_serial_plugin:load")
    pk.register_backend("zz_plugin", "no_such_module_for_alpyka:load", replace=True)
    assert "could not be imported" in pk.unavailable_backends()["zz_plugin"]
    pk.device("cpu_serial")
    with pytest.raises(ValueError, match="already loaded"):
        pk.register_backend("cpu_serial", "alpyka_serial_plugin:load", replace=True)


def test_importing_alpyka_imports_no_backend_and_listing_them_neither():
    out = _run(
        "import sys, portable as pk; names = pk.backends(); "
        "print(names, sorted(m for m in sys.modules if m.split('.')[0] == 'backends'))",
        _child_env(),
    )
    assert out.strip() == "['cpu_serial', 'cpu_threads', 'opencl', 'cuda', 'rocm'] []"


# ---------------------------------------------------------------- the entry-point group
def test_an_installed_plugin_is_found_through_its_entry_point(tmp_path):
    """A distribution on sys.path whose metadata registers under alpyka.backends: no register
    call, no edit to alpyka; ``alpyka info`` lists it."""
    site = _installed_plugin(tmp_path)
    env = _child_env(site)
    out = _run("import portable as pk; print(pk.backends()[-1], pk.device('cpu_serial_plugin').capabilities.kind)", env)
    assert out.split() == [PLUGIN, "cpu"]
    info = subprocess.run(
        [sys.executable, "-m", "portable", "info"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert info.returncode == 0, info.stderr
    assert f"{PLUGIN:<12} available (alpyka_serial_plugin 1.0)" in info.stdout


def test_an_installed_plugin_runs_the_kernel_matrix(tmp_path):
    """The suite's own kernel tests on the plugin, chosen as any backend is (``--backends``)."""
    site = _installed_plugin(tmp_path)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            f"--backends={PLUGIN}",
            "-rs",
            *KERNEL_TESTS,
        ],
        capture_output=True,
        text=True,
        env=_child_env(site),
        cwd=ROOT,
        timeout=600,
    )
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    passed = int(out.stdout.rpartition(" passed")[0].split()[-1])
    assert passed >= 15, tail  # the tests ran on the plugin, not skipped


def test_the_builtins_are_found_without_installed_metadata(monkeypatch):
    """A source checkout that is not pip-installed: the group is empty, the built-ins come from
    the registry's own list."""
    monkeypatch.setattr(_registry, "_factories", None)
    monkeypatch.setattr(_registry.importlib.metadata, "entry_points", lambda group=None: [])
    assert pk.backends() == list(_registry.BUILTIN_BACKENDS)


def test_another_distribution_cannot_take_a_builtin_name(monkeypatch):
    from types import SimpleNamespace

    def entry_point(name, dist):  # what importlib.metadata hands out: name, group, dist, load()
        return SimpleNamespace(
            name=name,
            group="alpyka.backends",
            dist=SimpleNamespace(name=dist),
            load=lambda: __import__("alpyka_serial_plugin").load,
        )

    found = [entry_point("cuda", "evil-plugin"), entry_point("opencl", "alpyka"), entry_point("aa_plugin", "good")]
    monkeypatch.setattr(_registry.importlib.metadata, "entry_points", lambda group=None: found)
    monkeypatch.setattr(_registry, "_factories", None)
    monkeypatch.setattr(_registry, "_refused", {})
    factories = _registry._discover()
    assert factories["cuda"] == _registry.BUILTIN_BACKENDS["cuda"]
    assert (
        "the name of alpyka's own cuda backend" in _registry._refused["cuda (from evil-plugin)"]
    )  # not dropped silently
    assert factories["opencl"] is found[1] and factories["aa_plugin"] is found[2]
    assert list(factories)[-1] == "aa_plugin"


# ---------------------------------------------------------------- declared capabilities
def test_every_device_declares_its_capabilities(device):
    caps = device.capabilities
    assert isinstance(caps, pk.DeviceCapabilities)
    assert caps.kind == device.kind == device.backend.kind
    assert caps.warp_size == device.limits.warp_size
    assert caps.host_addressable == device.is_host_memory
    assert caps.c_dialect in (None, "opencl", "cuda", "hip")
    assert caps.emulated == (device.backend_name in _registry.emulated())
    if caps.host_addressable:
        assert caps.torch_device_type == "cpu" and caps.dlpack_device_type == pk.spi.DLPACK_CPU


def test_capabilities_are_checked():
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        pk.DeviceCapabilities("fpga", False)
    limits = pk.host().limits
    with pytest.raises(ValueError, match="capabilities.kind"):
        pk.Device("x", 0, "x", "gpu", "x:0", limits, capabilities=pk.DeviceCapabilities.host())


def _device(name: str, caps: pk.DeviceCapabilities | None) -> pk.Device:
    return pk.Device(name, 0, "model device", "gpu", f"{name}:0", pk.host().limits, capabilities=caps)


def test_torch_reaches_memory_by_capabilities_not_by_name():
    """A device torch addresses as cuda whatever its backend's name; one named cuda that does
    not declare it goes through the copy path."""
    pytest.importorskip("torch")
    from inference._torch_queue import memory_path, torch_device

    sycl = _device("sycl", pk.DeviceCapabilities("gpu", False, None, "cuda", 32, False, pk.spi.DLPACK_CUDA))
    assert memory_path(sycl) == "cuda" and str(torch_device(sycl)) == "cuda:0"
    opencl_like = _device("cuda", pk.DeviceCapabilities("gpu", False, "opencl", None, 32))
    assert memory_path(opencl_like) == "copy" and str(torch_device(opencl_like)) == "cpu"


def test_serving_parses_devices_against_the_registered_backends(registry):
    from inference.serving import server_devices

    pk.register_backend(PLUGIN, "alpyka_serial_plugin:load")
    assert server_devices(PLUGIN) == ("cpu", PLUGIN)
    assert server_devices("cuda:1") == ("cuda:1", "cuda:1")
    with pytest.raises(ValueError, match="alpyka backend"):
        server_devices("metal")
