"""The backend registry, device lookup and `python -m portable info`."""

import subprocess
import sys

import pytest

import portable as pk


def test_known_and_available():
    assert pk.backends() == ["cpu_serial", "cpu_threads", "opencl", "cuda", "rocm"]
    avail = pk.available_backends()
    assert {"cpu_serial", "cpu_threads"} <= set(avail)
    reasons = pk.unavailable_backends()
    assert set(avail) | set(reasons) == set(pk.backends()) and not set(avail) & set(reasons)
    assert all(isinstance(r, str) and r for r in reasons.values())


def test_unknown_backend_lists_known_ones():
    with pytest.raises(ValueError, match="known backends are cpu_serial, cpu_threads, opencl, cuda, rocm"):
        pk.device("fpga")


def test_unavailable_backend_gives_reason():
    reasons = pk.unavailable_backends()
    if not reasons:
        pytest.skip("every backend is available on this machine")
    name, reason = next(iter(reasons.items()))
    with pytest.raises(pk.BackendUnavailable, match=reason[:30].replace("(", r"\(").replace(")", r"\)")):
        pk.device(name)


def test_devices_and_host(device):
    assert device in pk.devices(device.backend_name)
    assert pk.host().is_host_memory and pk.host().backend_name == "cpu_serial"
    with pytest.raises(pk.NoSuchDevice, match="out of range"):
        pk.device(device.backend_name, 99)


def test_python_m_portable_info():
    out = subprocess.run([sys.executable, "-m", "portable", "info"], capture_output=True, text=True, check=True).stdout
    for name in pk.backends():
        assert name in out
    for name in pk.unavailable_backends():
        assert f"{name}" in out and "unavailable" in out
    assert "available (" in out


def test_a_backend_whose_load_fails_is_unavailable_with_the_reason(monkeypatch):
    import types

    from portable import _registry

    broken = types.ModuleType("backends.rocm")

    def load():
        raise RuntimeError("driver exploded")

    broken.load = load
    monkeypatch.setitem(__import__("sys").modules, "backends.rocm", broken)
    monkeypatch.setattr(_registry, "_loaded", {k: v for k, v in _registry._loaded.items() if k != "rocm"})
    monkeypatch.setattr(_registry, "_reasons", {k: v for k, v in _registry._reasons.items() if k != "rocm"})
    monkeypatch.setattr(_registry, "_emulated", [n for n in _registry._emulated if n != "rocm"])  # the real module
    assert "rocm" not in pk.available_backends()
    assert "RuntimeError: driver exploded" in pk.unavailable_backends()["rocm"]
    with pytest.raises(pk.BackendUnavailable, match="driver exploded"):
        pk.device("rocm")
