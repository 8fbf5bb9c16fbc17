"""Values read from ``ALPYKA_*`` environment variables: one parser for the core, the backends
and inference, whose error names the variable, its value and what it takes (not Python's bare
"could not convert string to float"); one parser for the boolean switches (:func:`env_flag`:
``ALPYKA_DEBUG``, ``ALPYKA_ASSERTS``, ``ALPYKA_VERIFY_IR``, ``ALPYKA_EMULATE_CHECKS``); the GPU
emulator's variables (``ALPYKA_EMULATE``, ``_CHECKS``, ``_THREADS``, ``_SEED``) are read here too.
A bad value of one read where it acts, deep in a launch or a compile, is found at import too
(:func:`check_at_import`): a script ends with one line naming it, not a traceback."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ._errors import EnvVarError

_T = TypeVar("_T")


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


#: the spellings of a boolean switch's two values (any case, blanks around ignored)
FLAG_ON = ("1", "on", "true", "yes")
FLAG_OFF = ("0", "off", "false", "no")

#: the boolean switches of the core -> what 1 and 0 do there (the ``meaning`` of :func:`env_flag`
#: in their messages); each is read where it acts, and all at import (:func:`check_at_import`)
SWITCHES = {
    "ALPYKA_DEBUG": " (range checks in kernels)",
    "ALPYKA_ASSERTS": " (asserts in kernels checked, the default; 0 compiles them out)",
    "ALPYKA_VERIFY_IR": " (the kernel IR verified after every compiler pass)",
    "ALPYKA_EMULATE_CHECKS": " (the GPU emulator's checks; 0 is faster, nothing checked)",
}


def env_flag(name: str, default: bool, raw: str | bytes | None = None, *, meaning: str = "") -> bool:
    """A boolean ``ALPYKA_*`` switch: ``1``/``on``/``true``/``yes`` or ``0``/``off``/``false``/``no``
    (any case), ``default`` when unset or empty. ``raw`` is the value when the caller read it
    already (bytes from CPython's raw environment too), else ``os.environ[name]``. EnvVarError
    naming the variable for another value; ``meaning`` says what 1 and 0 do there."""
    if raw is None:
        raw = os.environ.get(name)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value in FLAG_ON:
        return True
    if value in FLAG_OFF:
        return False
    raise EnvVarError(
        f"environment variable {name}={raw!r}: expected 1 (on, also on/true/yes) or 0 (off, also "
        f"off/false/no){meaning}; set it to one of those or unset it"
    )


#: ``ALPYKA_DEBUG``'s raw values seen so far -> on/off (read at every launch: one dict lookup)
_DEBUG_SEEN: dict[Any, bool] = {None: False, b"": False, "": False, b"0": False, "0": False, b"1": True, "1": True}


def debug_flag(raw: str | bytes | None) -> bool:
    """Whether an ``ALPYKA_DEBUG`` value (str or bytes, None when unset) asks for the range checks
    inside kernels (:func:`env_flag`'s spellings; default off). EnvVarError for another value."""
    flag = _DEBUG_SEEN.get(raw)
    if flag is None:
        flag = env_flag("ALPYKA_DEBUG", False, raw if raw is not None else "", meaning=SWITCHES["ALPYKA_DEBUG"])
        if len(_DEBUG_SEEN) < 64:
            _DEBUG_SEEN[raw] = flag
    return flag


def emulate_checks() -> bool:
    """Whether the GPU emulator checks launches for what a GPU leaves wrong or undefined:
    ``ALPYKA_EMULATE_CHECKS`` (default on; ``0``, ``off``, ``false`` or ``no`` turns them off).
    EnvVarError for a value that is neither."""
    return env_flag("ALPYKA_EMULATE_CHECKS", True, meaning=SWITCHES["ALPYKA_EMULATE_CHECKS"])


def emulate_threads() -> int:
    """The OS threads the GPU emulator runs a grid's blocks on: ``ALPYKA_EMULATE_THREADS`` (an
    integer >= 1; default: the cores this process may use). EnvVarError for another value."""
    default = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return env_number("ALPYKA_EMULATE_THREADS", default, int, minimum=1)


def emulate_seed() -> int:
    """The seed of the order in which the GPU emulator runs a block's threads between barriers:
    ``ALPYKA_EMULATE_SEED`` (an integer, default 1; kept modulo 2**64). EnvVarError for another value."""
    return env_number("ALPYKA_EMULATE_SEED", 1, int) & (2**64 - 1)


def torch_threads() -> int:
    """The size of each of torch's own thread pools for inference: ``ALPYKA_TORCH_THREADS`` (an
    integer >= 1, default 1; read by ``inference``, and checked when it is imported). EnvVarError
    for another value."""
    return env_number("ALPYKA_TORCH_THREADS", 1, int, minimum=1)


def check_at_import() -> None:
    """Read the variables whose bad value would otherwise surface only deep inside a launch (the
    GPU emulator's threads and seed, read by its runtime at every launch; the kernel cache's lock
    wait, read at every compile; the switches of :data:`SWITCHES`, read at a launch or a compile),
    so that a bad value is an EnvVarError when portable is imported."""
    emulate_threads()
    emulate_seed()
    env_number("ALPYKA_LOCK_WAIT", 0.0, float, minimum=0)  # (portable.compiler._locks.lock_wait)
    for name, meaning in SWITCHES.items():
        env_flag(name, False, meaning=meaning)


def read_at_import() -> list[str]:
    """``ALPYKA_EMULATE``'s backends, after :func:`check_at_import` (what ``import portable``
    reads), through :func:`reported_at_import`."""

    def read() -> list[str]:
        check_at_import()
        return emulate()

    return reported_at_import(read)


def reported_at_import(read: Callable[[], _T]) -> _T:
    """``read()``, a read of environment variables while a module is imported. A bad value stops
    the import with an EnvVarError; where nothing catches it (the ``alpyka`` command, a script),
    the program ends with one line, ``<prog>: error: EnvVarError: <the message>``, not a traceback
    through the import machinery: the fix is in the environment. ``ALPYKA_TRACEBACK=1`` shows
    the traceback."""
    try:
        return read()
    except EnvVarError as exc:
        _report_if_uncaught(exc)
        raise


def _report_if_uncaught(exc: EnvVarError) -> None:
    """Make ``exc``, if it ends the program, a one-line report (``sys.excepthook``; any other
    uncaught exception goes to the hook that was there)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            traceback_wanted = env_flag("ALPYKA_TRACEBACK", False)
        except EnvVarError:
            traceback_wanted = True
        if value is not exc or traceback_wanted:
            previous(kind, value, tb)
            return
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "python"
        print(f"{prog}: error: {type(exc).__name__}: {exc}", file=sys.stderr)

    sys.excepthook = hook
