"""Which OpenCL devices the opencl backend uses (backends/_opencl_devices.py): each one probed
with a kernel, broken runtimes left out with their reason, simulators left out unless named, the
documented order, ALPYKA_OPENCL_DEVICE, and pip-installed runtimes registered with the ICD loader."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from backends import _opencl_devices as od

# ---------------------------------------------------------------------- a scriptable OpenCL
GPU, CPU, ACC = 4, 2, 8


class FakeDevice:
    def __init__(self, name, type_bits, build_error=None, wrong=False, hangs=False):
        self.name, self.type, self.max_work_group_size = name, type_bits, 256
        self.build_error, self.wrong, self.hangs = build_error, wrong, hangs


class FakePlatform:
    def __init__(self, name, vendor="", version="OpenCL 3.0"):
        self.name, self.vendor, self.version = name, vendor, version


def fake_cl():
    class Event:
        def __init__(self, done):
            self.command_execution_status = 0 if done else 1

    class Context:
        def __init__(self, devices):
            self.device = devices[0]

    class Program:
        def __init__(self, ctx, src):
            self.ctx = ctx

        def build(self, devices):
            if devices[0].build_error:
                raise RuntimeError(f"clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n{devices[0].build_error}")
            return self

    class Buffer:
        def __init__(self, ctx, flags, size):
            self.ctx = ctx

    class Kernel:
        def __init__(self, program, name):
            self.ctx = program.ctx

        def set_args(self, *args):
            self.local_bytes = args[1].size

    def enqueue_nd_range_kernel(cq, knl, glob, loc):
        knl.ctx.launched = (glob[0], loc[0])
        return Event(done=not knl.ctx.device.hangs)

    def enqueue_copy(cq, host, buf, is_blocking):
        n, t = buf.ctx.launched
        g = np.arange(n)
        host[:] = 3 * ((g // t) * t + t - 1 - g % t) + 1 + g // t + (1 if buf.ctx.device.wrong else 0)

    return types.SimpleNamespace(
        device_type=types.SimpleNamespace(GPU=GPU, CPU=CPU, ACCELERATOR=ACC),
        command_execution_status=types.SimpleNamespace(COMPLETE=0),
        mem_flags=types.SimpleNamespace(WRITE_ONLY=1),
        Context=Context,
        Program=Program,
        Buffer=Buffer,
        Kernel=Kernel,
        CommandQueue=lambda ctx, dev: types.SimpleNamespace(flush=lambda: None),
        LocalMemory=lambda n: types.SimpleNamespace(size=n),
        enqueue_nd_range_kernel=enqueue_nd_range_kernel,
        enqueue_copy=enqueue_copy,
    )


POCL = FakePlatform("Portable Computing Language", "The pocl project", "OpenCL 3.0 PoCL 3.0")
INTEL = FakePlatform("Intel(R) OpenCL", "Intel(R) Corporation")
NV = FakePlatform("NVIDIA CUDA", "NVIDIA Corporation")
GRIND = FakePlatform("Oclgrind", "University of Bristol")


def _labels(cands):
    return [c.device.name for c in cands]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(od.ENV_DEVICE, raising=False)


def test_default_order_gpus_then_cpus_by_measured_speed_and_no_simulator():
    found = [
        (POCL, FakeDevice("pocl-cpu", CPU)),
        (GRIND, FakeDevice("grind", ACC)),
        (INTEL, FakeDevice("intel-cpu", CPU)),
        (NV, FakeDevice("h100", GPU)),
    ]
    used, rejected = od.select(fake_cl(), found)
    assert _labels(used) == ["h100", "intel-cpu", "pocl-cpu"]
    assert _labels(rejected) == ["grind"] and "simulator" in rejected[0].reason
    assert [c.hardware for c in used] == ["gpu", "cpu", "cpu"]


def test_a_runtime_that_cannot_build_is_left_out_with_its_reason():
    found = [
        (POCL, FakeDevice("pocl-cpu", CPU, build_error="error: unknown target CPU 'generic'")),
        (INTEL, FakeDevice("intel-cpu", CPU)),
    ]
    used, rejected = od.select(fake_cl(), found)
    assert _labels(used) == ["intel-cpu"]
    assert "cannot build a kernel" in rejected[0].reason and "unknown target CPU 'generic'" in rejected[0].reason


def test_a_wrong_result_or_a_probe_that_never_completes_is_left_out(monkeypatch):
    monkeypatch.setenv(od.ENV_PROBE_TIMEOUT, "0.2")
    found = [
        (POCL, FakeDevice("wrong", CPU, wrong=True)),
        (INTEL, FakeDevice("stuck", CPU, hangs=True)),
        (NV, FakeDevice("good", GPU)),
    ]
    used, rejected = od.select(fake_cl(), found)
    assert _labels(used) == ["good"]
    reasons = {c.device.name: c.reason for c in rejected}
    assert "wrong result" in reasons["wrong"]
    assert "did not complete within" in reasons["stuck"]
    assert od._abandoned, "the stuck probe's objects are kept, never waited for"


def test_the_variable_selects_and_orders_devices(monkeypatch):
    found = [
        (POCL, FakeDevice("pocl-cpu", CPU)),
        (GRIND, FakeDevice("grind", ACC)),
        (INTEL, FakeDevice("intel-cpu", CPU)),
    ]
    monkeypatch.setenv(od.ENV_DEVICE, "pocl, oclgrind")
    used, rejected = od.select(fake_cl(), found)
    assert _labels(used) == ["pocl-cpu", "grind"]  # the patterns' order; a simulator when named
    assert "not named by" in rejected[0].reason
    monkeypatch.setenv(od.ENV_DEVICE, "all")
    used, _ = od.select(fake_cl(), found)
    assert _labels(used) == ["intel-cpu", "pocl-cpu", "grind"]


def test_patterns_name_runtimes_not_the_cpu_their_devices_are_named_after(monkeypatch):
    found = [(POCL, FakeDevice("pthread-Intel Xeon", CPU)), (INTEL, FakeDevice("AMD EPYC", CPU))]
    monkeypatch.setenv(od.ENV_DEVICE, "intel")
    assert _labels(od.select(fake_cl(), found)[0]) == ["AMD EPYC"]  # Intel's runtime, not PoCL on a Xeon
    monkeypatch.setenv(od.ENV_DEVICE, "device=xeon")
    assert _labels(od.select(fake_cl(), found)[0]) == ["pthread-Intel Xeon"]


@pytest.mark.parametrize("raw", ["1", "pocl, 0"])
def test_a_number_is_refused_as_no_device_index(monkeypatch, raw):
    """``ALPYKA_OPENCL_DEVICE=1``, meant as the second device, matched the "1" of Intel's version
    "OpenCL 3.1" and ran there, not on PoCL: a number is an EnvVarError naming the fix."""
    found = [(INTEL, FakeDevice("intel-cpu", CPU)), (POCL, FakeDevice("pocl-cpu", CPU))]
    monkeypatch.setenv(od.ENV_DEVICE, raw)
    with pytest.raises(pk.EnvVarError, match=r"is a number, and patterns are part of a platform's name"):
        od.select(fake_cl(), found)


def test_the_probe_runs_only_on_the_devices_that_would_be_used(monkeypatch):
    bad = FakeDevice("pocl-cpu", CPU, build_error="boom")
    monkeypatch.setenv(od.ENV_DEVICE, "intel")
    used, rejected = od.select(fake_cl(), [(POCL, bad), (INTEL, FakeDevice("intel-cpu", CPU))])
    assert _labels(used) == ["intel-cpu"] and "not named" in rejected[0].reason  # not "cannot build"


def _counting(monkeypatch) -> list[str]:
    """The names of the devices probed from now on, in order."""
    probed: list[str] = []
    real = od.probe

    def probe(cl, cand, timeout=None):
        probed.append(cand.device.name)
        real(cl, cand, timeout)

    monkeypatch.setattr(od, "probe", probe)
    return probed


def test_the_default_device_probes_only_the_devices_up_to_it(monkeypatch):
    probed = _counting(monkeypatch)
    found = [
        (POCL, FakeDevice("pocl-cpu", CPU)),
        (INTEL, FakeDevice("intel-cpu", CPU, build_error="boom")),
        (NV, FakeDevice("h100", GPU, wrong=True)),
    ]
    sel = od.Selection(fake_cl(), found)
    assert _labels(sel.probe_until(1)) == ["pocl-cpu"]  # the first two failed: never numbered
    assert probed == ["h100", "intel-cpu", "pocl-cpu"] and sel.settled
    sel = od.Selection(fake_cl(), [(POCL, FakeDevice("pocl-cpu", CPU)), (INTEL, FakeDevice("intel-cpu", CPU))])
    probed.clear()
    assert _labels(sel.probe_until(1)) == ["intel-cpu"] and probed == ["intel-cpu"] and not sel.settled
    assert sel.rejected() == []  # PoCL is not probed yet, so not rejected either
    assert _labels(sel.probe_until(None)) == ["intel-cpu", "pocl-cpu"] and probed == ["intel-cpu", "pocl-cpu"]
    assert _labels(sel.probe_until(1)) == ["intel-cpu"] and len(probed) == 2  # each probed once


def test_a_ctrl_c_during_a_probe_leaves_the_selection_as_before_it(monkeypatch):
    """A KeyboardInterrupt (or any exception) inside a probe neither loses the device nor
    numbers it: the next request probes it again, as if that probe had not started."""
    real, calls = od.probe, []

    def probe(cl, cand, timeout=None):
        calls.append(cand.device.name)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(cl, cand, timeout)

    monkeypatch.setattr(od, "probe", probe)
    sel = od.Selection(fake_cl(), [(POCL, FakeDevice("pocl-cpu", CPU)), (INTEL, FakeDevice("intel-cpu", CPU))])
    with pytest.raises(KeyboardInterrupt):
        sel.probe_until(1)
    assert not sel.settled and sel.used == [] and sel.rejected() == []
    assert _labels(sel.probe_until(None)) == ["intel-cpu", "pocl-cpu"]
    assert calls == ["intel-cpu", "intel-cpu", "pocl-cpu"] and sel.settled


def test_a_ctrl_c_after_a_probe_ended_keeps_its_outcome_once(monkeypatch):
    """A probe that ended before the interrupt counts once: its device is numbered once (or
    rejected once), never probed again."""
    real, calls = od.probe, []

    def probe(cl, cand, timeout=None):
        calls.append(cand.device.name)
        real(cl, cand, timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt  # (as if it landed on the probe's last line)

    monkeypatch.setattr(od, "probe", probe)
    sel = od.Selection(fake_cl(), [(POCL, FakeDevice("pocl-cpu", CPU)), (INTEL, FakeDevice("intel-cpu", CPU))])
    with pytest.raises(KeyboardInterrupt):
        sel.probe_until(1)
    assert _labels(sel.probe_until(None)) == ["intel-cpu", "pocl-cpu"]
    assert calls == ["intel-cpu", "pocl-cpu"]


# ---------------------------------------------------------------------- registration
def _prefix(tmp_path: Path, icd: str, lib_name: str | None) -> Path:
    prefix = tmp_path / "prefix"
    (prefix / "etc" / "OpenCL" / "vendors").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "etc" / "OpenCL" / "vendors" / "vendor-cpu.icd").write_text(icd)
    if lib_name:
        (prefix / "lib" / lib_name).write_bytes(b"")
    return prefix


def test_pip_installed_runtimes_are_registered_with_their_real_path(tmp_path, monkeypatch):
    prefix = _prefix(tmp_path, "/opt/anaconda1anaconda2anaconda3/lib/libvendorocl.so\n", "libvendorocl.so")
    system = tmp_path / "system"
    system.mkdir()
    (system / "gpu.icd").write_text("libnvidia-opencl.so.1\n")
    monkeypatch.setattr(od, "_prefixes", lambda: [prefix])
    monkeypatch.setattr(od, "SYSTEM_VENDORS", system)
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(od.ENV_VENDORS, "")  # recorded (so the value register_runtimes writes is undone) ...
    monkeypatch.delenv(od.ENV_VENDORS)  # ... and absent for the test
    where = od.register_runtimes()
    assert where is not None and od.os.environ[od.ENV_VENDORS] == where
    files = {p.name: p.read_text().strip() for p in Path(where).iterdir()}
    assert files == {"vendor-cpu.icd": str(prefix / "lib" / "libvendorocl.so"), "gpu.icd": "libnvidia-opencl.so.1"}
    assert od.register_runtimes() is None  # the variable is set now: left alone


def test_a_users_own_vendors_directory_and_missing_libraries_are_respected(tmp_path, monkeypatch):
    prefix = _prefix(tmp_path, "/nowhere/libgone.so\n", None)
    monkeypatch.setattr(od, "_prefixes", lambda: [prefix])
    monkeypatch.setenv(od.ENV_VENDORS, "")
    monkeypatch.delenv(od.ENV_VENDORS)
    assert od.register_runtimes() is None  # its library is not installed: nothing to register
    monkeypatch.setenv(od.ENV_VENDORS, "/my/vendors")
    assert od.register_runtimes() is None and od.os.environ[od.ENV_VENDORS] == "/my/vendors"


# ---------------------------------------------------------------------- this machine
def _backend_section(info: str, name: str) -> list[str]:
    """The lines of `alpyka info` under one backend's heading (other backends list the same CPU)."""
    lines = info.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {name} "))
    rest = lines[start + 1 :]
    end = next((i for i, ln in enumerate(rest) if ln.startswith("  ") and not ln.startswith("    ")), len(rest))
    return rest[:end]


@pytest.mark.alpyka_backends("opencl")
def test_every_device_in_use_passed_the_probe_and_says_its_hardware(device):
    from portable.cli._info import info_text

    devs = pk.devices("opencl")
    assert devs[0] is device
    for dev in devs:
        assert dev.properties["type"] in ("gpu", "cpu", "accelerator", "other")
        assert dev.kind == "gpu"  # the execution model: many threads per block, on any hardware
        assert "oclgrind" not in dev.name.lower() or od.patterns()
    section = _backend_section(info_text(), "opencl")
    for dev in devs:
        head = f"[{dev.index}] {dev.name} ("  # device names have brackets of their own: "Intel(R) Xeon(R)"
        line = next(ln for ln in section if ln.strip().startswith(head))
        hw = dev.properties["type"]
        assert line.split(head, 1)[1].startswith(hw), line
        if hw == "cpu":
            assert "(gpu" not in line, line


_FRESH_PROCESS = """
import json
from backends import _opencl_devices as od
probed = []
real = od.probe
od.probe = lambda cl, cand, timeout=None: (probed.append(cand.label), real(cl, cand, timeout))[1]
import portable as pk
first = pk.device("opencl")
at_first = list(probed)
devs, excluded = pk.devices("opencl"), pk.get_backend("opencl").excluded_devices()
print(json.dumps({
    "at_first": at_first, "probed": probed, "first": f"{first.properties['platform']} {first.name}",
    "same": devs[0] is first, "used": [f"{d.properties['platform']} {d.name}" for d in devs],
    "excluded": dict(excluded),
}))
"""


@pytest.mark.alpyka_backends("opencl")
def test_a_fresh_process_probes_only_the_device_it_uses(device, tmp_path):
    """``pk.device("opencl")`` in a new process probes the devices in order up to the first that
    passes; the full list probes the rest, each once, and numbers the same device 0."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "ALPYKA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["at_first"][-1] == got["first"] and got["same"]
    assert all(label in got["excluded"] for label in got["at_first"][:-1])  # those before it failed
    assert sorted(got["probed"]) == sorted(set(got["probed"])), "a device probed twice"
    assert set(got["used"]) <= set(got["probed"])  # every device in use passed its probe
    assert set(got["probed"]) - set(got["used"]) <= set(got["excluded"])  # the others say why
