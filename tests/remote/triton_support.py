"""Whether the real Triton (PyTriton's bundled tritonserver) can run here, for skip marks."""

from __future__ import annotations

import sys


def pytriton_reason() -> str | None:
    """None when PyTriton can run here, else why not."""
    try:
        import pytriton.triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"PyTriton cannot run here: {exc}"
    if not sys.platform.startswith("linux"):
        return "PyTriton's bundled tritonserver runs on Linux only"
    return None
