"""alpyka_faulty_plugins: backends that misbehave as a careless plugin package might, for
tests/portable/test_backend_plugins.py (issue 38 item 12). Each is a plugin failure that alpyka
reports with its reason (``pk.unavailable_backends()``, ``alpyka info``) instead of ending the
caller's process, dropping it without a word, or handing its junk out as devices.

- :func:`exits`: a factory that calls ``sys.exit``; :mod:`.exiting` does it when imported.
- :func:`junk`: cpu_serial_plugin's backend whose ``devices()`` returns what :data:`JUNK` names.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from alpyka_serial_plugin import SerialPlugin


def exits() -> Any:
    """A factory that ends the process instead of raising."""
    sys.exit(3)


def _other_backend(dev: Any) -> list:
    return [dataclasses.replace(dev, backend_name="cpu_serial")]


#: what a junk backend's ``devices()`` returns, by name, from its one real device
JUNK = {
    "strings": lambda dev: ["cpu:0"],
    "none": lambda dev: None,
    "empty": lambda dev: [],
    "generator": lambda dev: (d for d in [dev]),
    "another_backends_device": _other_backend,
    "wrong_index": lambda dev: [dataclasses.replace(dev, index=3)],
    "no_limits": lambda dev: [dataclasses.replace(dev, limits={"max_threads_per_block": 1})],
}


class JunkPlugin(SerialPlugin):
    """cpu_serial_plugin registered under another name, whose devices() returns junk."""

    def __init__(self, name: str, junk: str) -> None:
        super().__init__()
        real = dataclasses.replace(self._devices[0], backend_name=name)
        self.name = name
        self._junk = JUNK[junk](real)

    def devices(self) -> Any:
        return self._junk


def junk(name: str = "junk_plugin", kind: str = "strings") -> JunkPlugin:
    """A backend ``name`` whose devices() returns the junk :data:`JUNK` names ``kind``."""
    return JunkPlugin(name, kind)
