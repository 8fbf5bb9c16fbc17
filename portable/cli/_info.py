"""``python -m portable info`` / ``alpyka info``: backends, devices, versions, and reasons."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any

from .._registry import _load, backends, unavailable_backends

#: how ``alpyka info`` marks a backend ALPYKA_EMULATE runs on the CPU (not Intel's FPGA emulator, an
#: OpenCL device that Intel's runtime names "FPGA Emulation Device")
EMULATED = "emulated on the CPU (ALPYKA_EMULATE), not a GPU"

if TYPE_CHECKING:
    from .._device import Device


def info_text() -> str:
    """A report of every backend: its devices and versions, or why it is unavailable."""
    from .. import __version__

    lines = [f"alpyka {__version__} on Python {platform.python_version()} ({platform.machine()})", ""]
    reasons = unavailable_backends()
    names = backends()
    for name in names:  # the built-ins, then plugins registered under alpyka.backends
        backend = _load(name)
        if backend is None:
            lines.append(f"  {name:<12} unavailable: {reasons[name]}")
            continue
        try:
            lines += _report(name, backend)
        except Exception as exc:  # noqa: BLE001 - a plugin's report that fails is shown, not raised
            lines.append(f"  {name:<12} available, but its report failed: {type(exc).__name__}: {exc}")
    for label, why in reasons.items():  # plugins left out because their name is taken
        if label not in names:
            lines.append(f"  {label} unavailable: {why}")
    return "\n".join(lines)


def _report(name: str, backend: Any) -> list[str]:
    """The lines of an available backend: versions, execution, devices, devices not used."""
    versions = ", ".join(f"{k} {v}" for k, v in backend.versions().items())
    how = f", {EMULATED}" if any(d.capabilities.emulated for d in backend.devices()) else ""
    lines = [f"  {name:<12} available{how} ({versions})"]
    execution = getattr(backend, "execution", None)
    if callable(execution):  # how kernels run there (CPU backends: the threading mechanism)
        lines.append(f"    execution: {execution()}")
    for dev in backend.devices():
        lines.append(f"    [{dev.index}] {dev.name} ({_describe(dev)})")
    for what, why in backend.excluded_devices():
        lines.append(f"    not used: {what}: {why}")
    return lines


def _describe(dev: Device) -> str:
    """The device's hardware, where it differs from its execution model, memory and limits."""
    lim, props = dev.limits, dev.properties
    hardware = props.get("type", dev.kind)
    model = "" if hardware == dev.kind else ", blocks of many threads as on a GPU"
    runtime = f", {props['platform']}" if "platform" in props else ""
    return (
        f"{hardware}{model}{runtime}, memory {dev.memory_space}, max {lim.max_threads_per_block} "
        f"threads/block, {lim.multiprocessors} compute units"
    )


def main(argv: list[str] | None = None, prog: str = "python -m portable", command_word: bool = True) -> int:
    """``python -m portable [info]``; ``alpyka info`` passes its ``prog`` and no command word
    (``command_word=False``: its usage line names the command the user typed)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    if command_word:
        parser.add_argument("command", nargs="?", default="info", choices=["info"])
    parser.parse_args(argv)
    print(info_text())
    return 0
