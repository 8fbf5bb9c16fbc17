"""A Ctrl-C while alpyka's own command starts ends it with one line, not a traceback.

The ``alpyka`` command (and ``python -m portable``, ``python -m inference.serving``, ``python -m
alpyka_demo.pipeline``, ``python -m alpyka_demo.train``) imports portable before its ``main``
runs: numpy, numba and the kernel compiler, 0.3-1 s on a free 2-core machine. A Ctrl-C there
printed Python's report of a KeyboardInterrupt, 10-40 lines through importlib and the
compiler's modules, where the same Ctrl-C a moment later prints ``alpyka info: interrupted``
(:mod:`portable.cli`). Imported first by ``portable/__init__.py``, this module installs, in
those processes only, a SIGINT handler that prints ``alpyka: interrupted`` and ends the process
at once, killed by SIGINT as an uncaught Ctrl-C ends it (nothing has started yet that needs
stopping); the command's ``main`` puts Python's own handler back as it starts
(:func:`command_started`), so its Ctrl-C raises KeyboardInterrupt as before.

``import portable`` anywhere else (a user's program, ``python -c``, IPython, pytest) changes
nothing: a Ctrl-C there is Python's, a KeyboardInterrupt with its traceback, as on ``import
numba``, ``import cupy`` or ``import torch``; a library does not take over its program's
SIGINT or its report of errors. Standard library only: it runs before the rest of portable.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

#: the modules that are alpyka's command when run with ``python -m``
COMMAND_MODULES = ("portable", "inference.serving", "alpyka_demo.pipeline", "alpyka_demo.train")


def is_alpyka_command() -> bool:
    """Whether this process is alpyka's command: the ``alpyka`` console script running as
    ``__main__``, or ``python -m`` of one of :data:`COMMAND_MODULES` (the interpreter's own ``-m``,
    not an argument of the program's). Not a multiprocessing child of either: spawn copies the
    parent's ``sys.argv`` and runs its script as ``__mp_main__``, under a ``-c`` stub of its own."""
    args = list(getattr(sys, "orig_argv", []))
    if "--multiprocessing-fork" in args:
        return False
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if sys.argv and Path(sys.argv[0]).name == "alpyka" and Path(main_file).name == "alpyka":
        return True
    return _interpreter_module(args[1:]) in COMMAND_MODULES


def _interpreter_module(options: list[str]) -> str | None:
    """The module of the interpreter's own ``-m`` among its options (before the program's
    arguments begin), else None."""
    i = 0
    while i < len(options):
        arg = options[i]
        if arg == "-m":
            return options[i + 1] if i + 1 < len(options) else None
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if arg in ("-c",) or not arg.startswith("-"):
            return None  # a command or a script: what follows is the program's
        i += 2 if arg in ("-W", "-X", "-Q") else 1
    return None


def _interrupted_at_start(signum: int, frame: object) -> None:
    """SIGINT while the command imports: one line, then killed by SIGINT (a signal handler: no
    lock, no print)."""
    try:
        os.write(2, b"alpyka: interrupted\n")
    except OSError:  # no stderr to say it on
        pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # (not reached: SIGINT's default action ends the process on delivery)


def guard_command_start() -> None:
    """Install the start's SIGINT handler where this process is alpyka's command, on the main
    thread, with Python's own handler in place (one a program installed is left alone)."""
    if (
        is_alpyka_command()
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _interrupted_at_start)


def command_started() -> None:
    """The command's ``main`` runs: a Ctrl-C raises KeyboardInterrupt again (Python's handler)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        _interrupted_at_start
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


guard_command_start()
