"""``python -m portable info`` / ``alpyka info``: backends, devices, versions, and reasons."""

from __future__ import annotations

import platform

from ._registry import BACKEND_NAMES, _load, unavailable_backends


def info_text() -> str:
    """A report of every backend: its devices and versions, or why it is unavailable."""
    from . import __version__

    lines = [f"alpyka {__version__} on Python {platform.python_version()} ({platform.machine()})", ""]
    reasons = unavailable_backends()
    for name in BACKEND_NAMES:
        backend = _load(name)
        if backend is None:
            lines.append(f"  {name:<12} unavailable: {reasons[name]}")
            continue
        versions = ", ".join(f"{k} {v}" for k, v in backend.versions().items())
        lines.append(f"  {name:<12} available ({versions})")
        execution = getattr(backend, "execution", None)
        if callable(execution):  # how kernels run there (CPU backends: the threading mechanism)
            lines.append(f"    execution: {execution()}")
        for dev in backend.devices():
            lim = dev.limits
            lines.append(
                f"    [{dev.index}] {dev.name} ({dev.kind}, memory {dev.memory_space}, "
                f"max {lim.max_threads_per_block} threads/block, {lim.multiprocessors} compute units)"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m portable", description=__doc__)
    parser.add_argument("command", nargs="?", default="info", choices=["info"])
    parser.parse_args(argv)
    print(info_text())
    return 0
