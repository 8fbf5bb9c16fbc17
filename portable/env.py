"""Numbers read from ``ALPYKA_*`` environment variables: one parser for the core, the backends
and inference, whose error names the variable, its value and what it takes (not Python's bare
"could not convert string to float")."""

from __future__ import annotations

import math
import os
from typing import Any

from ._errors import EnvVarError


def env_number(name: str, default: Any, kind: type = int, *, minimum: float | None = None,
               above: float | None = None) -> Any:
    """``kind(os.environ[name])`` (int or float), or ``default`` when the variable is unset or
    empty. EnvVarError (a ValueError) for a value that is not such a number (floats: finite),
    below ``minimum`` or not above ``above``."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    want = "an integer" if kind is int else "a number"
    if minimum is not None:
        want += f" >= {minimum:g}"
    if above is not None:
        want += f" > {above:g}"
    try:
        value = kind(raw.strip())
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)) or (
            minimum is not None and value < minimum) or (above is not None and value <= above):
        raise EnvVarError(f"environment variable {name}={raw!r}: expected {want}; set it to such a value or unset it")
    return value
