"""What the ``alpyka`` command offers its subcommands: :class:`CliError` and the one error printer.

A subcommand is a function ``command(argv: list[str], prog: str) -> int`` (the exit status)
registered under the entry-point group ``alpyka.commands`` (see pyproject.toml); ``prog`` is
its name for messages (``"alpyka serve"``). It raises its errors; :func:`run` prints them, the
same way for every subcommand:

- an error the user can fix (an :class:`~portable.AlpykaError`, :class:`CliError` included, or
  a ``ValueError``/``TypeError``/``LookupError``/``ImportError``/``OSError`` raised on bad input)
  prints one line, ``<prog>: error: <the first line of its message>``, and the exit status is 2;
  an optional package that is missing (torch, tritonclient, pytriton) says how to install it;
- the reader of the output gone (``alpyka info | head -1``) ends it quietly, exit status 141;
- any other exception (a bug) keeps its traceback; ``ALPYKA_TRACEBACK=1`` shows the traceback
  of every error.

A subcommand's module makes its own ``main`` with :func:`run` too, so ``python -m`` runs print
errors the same way, and a Ctrl-C too: one line, ``<prog>: interrupted``, then the process ends
killed by SIGINT as Python ends an uncaught one (a shell loop running it stops, as it would for
any other command; exit status 130 let it go on). A script (examples/) ends with
``sys.exit(run_script(main))`` for the same, and wraps a slow import before it (``import torch``:
seconds) in :func:`ctrl_c_as_one_line`, the piece of run_script that says it. A command that
handles SIGINT itself (the demo, ``alpyka serve``) ends through :func:`end_by_interrupt` once it
has stopped its work.
:func:`load_reference` imports what a ``module:attribute`` argument names (the ``alpyka``
command's own subcommands, ``alpyka aot``/``export``'s module factories, ``alpyka serve``'s
pipelines); its errors are a :class:`BadReference`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .._command_start import command_started
from .._device import device
from .._errors import AlpykaError, EnvVarError
from .._registry import default_backend, get_backend
from ..env import env_flag
from ._messages import error_line
from ._reference import FILE_ATTR, BadReference, load_reference

__all__ = [
    "FILE_ATTR",
    "USER_ERRORS",
    "BadReference",
    "CliError",
    "at_least",
    "backend_argument",
    "command_started",
    "ctrl_c_as_one_line",
    "description",
    "die_by_sigint",
    "end_by_interrupt",
    "error_line",
    "load_reference",
    "run",
    "run_script",
    "say_interrupted",
]

#: the exceptions printed as one line (besides AlpykaError): what bad input raises
USER_ERRORS: tuple[type[BaseException], ...] = (AlpykaError, ValueError, TypeError, LookupError, ImportError, OSError)

#: whether this process has said that it was interrupted (or that it is stopping on a Ctrl-C)
_interrupt_said = False


class CliError(AlpykaError, ValueError):
    """An error the user can fix on the command line; printed as one line."""


def at_least(least: int, most: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number of at least ``least`` and, where given, at most
    ``most`` (``--events 0`` or ``--tracks -5`` is refused with the usage and one line naming the
    flag, not a numpy error later; ``most``: a limit of the work, such as a kernel's shared array,
    past which the run would be wrong or fail deep inside)."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"expected a whole number of at most {most}, got {value}")
        return value

    whole.__name__ = f"at_least_{least}" if most is None else f"from_{least}_to_{most}"
    return whole


def description(doc: str | None) -> str:
    """A script's ``--help`` description from its docstring: the first paragraph on one line, RST's
    double backticks as single ones (the first line alone stopped mid-sentence, "... Broken Line
    track fit (RecoTracker/PixelTrackFitting's ``brokenline`` namespace and")."""
    first = (doc or "").strip().split("\n\n")[0]
    return " ".join(first.split()).replace("``", "`")


def backend_argument(
    parser: argparse.ArgumentParser, help: str | None = None, *, device_check: Callable[[Any], Any] | None = None
) -> None:
    """Give a script's ``parser`` its optional positional ``backend``: a backend usable here, by
    default ``pk.default_backend()``. A name that is unknown or unusable (``nope``, ``cuda``
    without cupy, or such a name in ``ALPYKA_BACKEND``) is refused with the usage and one line
    naming the fix, exit status 2, as argparse refuses a bad flag (it was a traceback from
    ``pk.device`` inside the script's ``main``). ``device_check(device)``, where given, is asked
    of the backend's default device too, and its AlpykaError refuses the name alike (a script of
    torch models passes ``inference.torch_device``: an emulated GPU, where torch has no device,
    was a traceback at the first ``Model.forward``)."""
    parser.add_argument(
        "backend",
        nargs="?",
        default="",  # a str default goes through ``type`` too: the default backend is checked alike
        type=_backend_type(device_check),
        help=help or "a backend (default: pk.default_backend(), the fastest CPU backend here)",
    )


def _backend_type(device_check: Callable[[Any], Any] | None) -> Callable[[str], str]:
    """The ``argparse`` type of :func:`backend_argument`: :func:`_backend_name` with ``device_check``."""

    def backend(text: str) -> str:
        return _backend_name(text, device_check)

    return backend


def _backend_name(text: str, device_check: Callable[[Any], Any] | None = None) -> str:
    """``text`` if it names a usable backend, else (empty) the default backend; ArgumentTypeError
    with the registry's message, or ``device_check``'s of the backend's default device, otherwise."""
    try:
        with ctrl_c_as_one_line():  # (while the backend loads or probes a device: before run_script)
            name = text or default_backend()
            get_backend(name)
            if device_check is not None:
                device_check(device(name))
    except AlpykaError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def run(command: Callable[[list[str], str], int], argv: Sequence[str] | None, prog: str) -> int:
    """Run ``command(argv, prog)`` and return its exit status; print an error the user can fix
    as one line (exit status 2) and let any other exception through (module docstring)."""
    global _running
    command_started()  # a Ctrl-C raises KeyboardInterrupt again (portable/_command_start.py)
    args = list(sys.argv[1:] if argv is None else argv)
    outer, _running = _running, prog
    try:
        return command(args, prog)
    except KeyboardInterrupt:
        end_by_interrupt(f"{prog}: interrupted")
        raise
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_broken():
            return _reader_gone()
        if _traceback_wanted() or not isinstance(exc, USER_ERRORS):
            raise
        print(f"{prog}: error: {error_line(exc)}", file=sys.stderr)
        return 2
    finally:
        _running = outer


#: the name of the command :func:`run` runs (``"alpyka serve"``), None outside one: a Ctrl-C's
#: line names it (:func:`ctrl_c_as_one_line`) where the command imports a script that says it
_running: str | None = None


def run_script(main: Callable[..., int | None], *args: Any, prog: str | None = None) -> int:
    """Run a script's ``main(*args)`` and return its exit status (None: 0), for
    ``sys.exit(run_script(main))``. A Ctrl-C prints one line on stderr, ``<prog>: interrupted``
    (``prog``: the script's file name), instead of a ``KeyboardInterrupt`` traceback, and the
    KeyboardInterrupt goes on: the process ends as Python ends one on an uncaught Ctrl-C (the
    heap frozen, docs/runtime.md, "Exit and Ctrl-C", then killed by SIGINT, so a shell loop
    running scripts stops too), and a second Ctrl-C while it ends ends it at once. In an
    interactive session (IPython's ``%run``, ``python -i``) or off the main thread the
    KeyboardInterrupt goes on as it is. Errors other than Ctrl-C keep their tracebacks: a script
    is read for its code."""
    with ctrl_c_as_one_line(prog):
        rc = main(*args)
    return 0 if rc is None else rc


@contextlib.contextmanager
def ctrl_c_as_one_line(prog: str | None = None) -> Iterator[None]:
    """A Ctrl-C in the block ends the process as :func:`run_script`'s does: one line on stderr,
    ``<prog>: interrupted`` (``prog``: the script's file name), no traceback, then killed by
    SIGINT (:func:`end_by_interrupt`; the KeyboardInterrupt goes on). For a script's slow work
    before ``run_script``, such as its ``import torch`` (seconds)::

        with ctrl_c_as_one_line():
            import torch

    Inside a command :func:`run` runs (``alpyka serve`` importing the script) the line names
    that command, the one the user typed (before: ``alpyka: interrupted``, the script's name
    taken from ``sys.argv[0]``, ``alpyka`` or ``__main__.py``)."""
    try:
        yield
    except KeyboardInterrupt:
        end_by_interrupt(f"{_running or prog or Path(sys.argv[0]).name}: interrupted")
        raise


def end_by_interrupt(line: str | None) -> bool:
    """Make a Ctrl-C end this process as Python ends one it did not catch, with one line: print
    ``line`` on stderr unless this process said it was interrupted already (None: print nothing,
    the caller said it its own way), make a second Ctrl-C end the process at once, and silence
    the interpreter's report of a KeyboardInterrupt; the caller then raises (or re-raises) a
    KeyboardInterrupt, and the interpreter, once finalised, ends killed by SIGINT. True where
    done: on the main thread of a non-interactive process; elsewhere (IPython's ``%run``,
    ``python -i``, a thread) nothing is changed and False says the session goes on."""
    global _interrupt_said
    if threading.current_thread() is not threading.main_thread() or _interactive():
        return False
    signal.signal(signal.SIGINT, _exit_at_once)
    if line is not None and not _interrupt_said:
        print(line, file=sys.stderr, flush=True)
    _interrupt_said = True
    if not getattr(sys.excepthook, "quiet_interrupt", False):
        sys.excepthook = _quiet_interrupt(sys.excepthook)
    return True


def say_interrupted(line: str) -> None:
    """Print ``line`` (``"<prog>: interrupted"``) on stderr once per process, at once, for a
    command that stops its work before it ends (:func:`end_by_interrupt` then prints nothing)."""
    global _interrupt_said
    if not _interrupt_said:
        _interrupt_said = True
        print(line, file=sys.stderr, flush=True)


def die_by_sigint() -> None:
    """End the process now, killed by SIGINT (no finalisation: what the caller must not wait
    for, a second Ctrl-C or a thread stuck where the interpreter cannot end under it); stdout
    and stderr are flushed first where they can be."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # no stream, or its reader gone
            pass
    _exit_at_once(signal.SIGINT, None)


def _interactive() -> bool:
    """Whether a session goes on after the script (``python -i``, a REPL, IPython)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "IPython" in sys.modules


def _quiet_interrupt(previous: Callable[..., Any]) -> Callable[..., Any]:
    """``sys.excepthook`` that prints nothing for the KeyboardInterrupt :func:`run_script` let go
    on (its line is printed), and hands any other exception to ``previous``."""

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)

    hook.quiet_interrupt = True  # type: ignore[attr-defined]
    return hook


def _exit_at_once(signum: int, frame: Any) -> None:
    """A second Ctrl-C while an interrupted script ends (its queues' workers get 0.5 s at exit):
    end now, killed by SIGINT as the first would have ended it (a signal handler: no lock, no
    output)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # (not reached: SIGINT's default action ends the process on delivery)


def _stdout_broken() -> bool:
    """Whether stdout's reader left (a pipe whose read end closed: ``poll`` says POLLERR), as
    opposed to an EPIPE of a socket or of a child's pipe, which is an error like any other."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no stdout with a descriptor
        return False


def _reader_gone() -> int:
    """The reader of the output left (``alpyka info | head -1``): end quietly, as a shell tool
    does (exit status 141, SIGPIPE's), with stdout pointed at /dev/null so that the interpreter's
    last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def _traceback_wanted() -> bool:
    """``ALPYKA_TRACEBACK`` (:func:`portable.env.env_flag`'s spellings, default off): show the
    traceback of an error the user can fix; a value alpyka cannot read shows it too (this runs
    while an error is reported: it must not raise another)."""
    try:
        return env_flag("ALPYKA_TRACEBACK", False)
    except EnvVarError:
        return True
