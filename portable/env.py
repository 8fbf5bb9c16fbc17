"""Values read from ``ALPYKA_*`` environment variables: one parser for the core, the backends
and inference, whose error names the variable, its value and what it takes (not Python's bare
"could not convert string to float"); the GPU emulator's two switches (``ALPYKA_EMULATE``,
``ALPYKA_EMULATE_CHECKS``) are read here too."""

from __future__ import annotations

import math
import os
from typing import Any

from ._errors import EnvVarError


def env_number(
    name: str, default: Any, kind: type = int, *, minimum: float | None = None, above: float | None = None
) -> Any:
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
    if (
        value is None
        or (kind is float and not math.isfinite(value))
        or (minimum is not None and value < minimum)
        or (above is not None and value <= above)
    ):
        raise EnvVarError(f"environment variable {name}={raw!r}: expected {want}; set it to such a value or unset it")
    return value


#: the backends the GPU emulator (backends/emulator/) can stand for, in ``ALPYKA_EMULATE``
EMULATED_BACKENDS = ("cuda", "rocm")


def parse_emulate(raw: str | None, name: str = "ALPYKA_EMULATE") -> list[str]:
    """The backends an ``ALPYKA_EMULATE`` value names: ``cuda``, ``rocm`` or ``cuda,rocm``
    (``all`` for both; unset, empty, ``0`` or ``off`` for none). EnvVarError for another value."""
    names = [n.strip().lower() for n in (raw or "").split(",") if n.strip()]
    if names in ([], ["off"], ["0"], ["none"]):
        return []
    if names == ["all"]:
        return list(EMULATED_BACKENDS)
    if any(n not in EMULATED_BACKENDS for n in names):
        raise EnvVarError(
            f"environment variable {name}={raw!r}: expected cuda, rocm or cuda,rocm (the backends "
            f"to run on the CPU's GPU emulator), or off; set it to one of those or unset it"
        )
    return list(dict.fromkeys(names))


def emulate() -> list[str]:
    """The backends ``ALPYKA_EMULATE`` asks to run on the GPU emulator (see :func:`parse_emulate`)."""
    return parse_emulate(os.environ.get("ALPYKA_EMULATE"))


def emulate_checks() -> bool:
    """Whether the GPU emulator checks launches for what a GPU leaves wrong or undefined:
    ``ALPYKA_EMULATE_CHECKS`` (default on; ``0``, ``off``, ``false`` or ``no`` turns them off).
    EnvVarError for a value that is neither."""
    raw = os.environ.get("ALPYKA_EMULATE_CHECKS")
    if raw is None or not raw.strip():
        return True
    value = raw.strip().lower()
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise EnvVarError(
        f"environment variable ALPYKA_EMULATE_CHECKS={raw!r}: expected 1 (checks on, the default) "
        f"or 0 (off: faster, nothing checked); set it to one of those or unset it"
    )
