"""The ``alpyka`` command: its own ``info`` and ``bench``, and the subcommands that packages above
portable register under the entry-point group ``alpyka.commands`` (inference: ``demo``, ``aot``,
``export``, ``serve``; see pyproject.toml and :mod:`portable.cli`).

portable never imports those packages itself: a subcommand is imported only when it is run.
Errors print one line with the fix, the same for every subcommand (:func:`portable.cli.run`;
``ALPYKA_TRACEBACK=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .._command_start import command_started
from . import CliError, end_by_interrupt, load_reference, run

__all__ = ["CliError", "commands", "main"]

GROUP = "alpyka.commands"

#: alpyka's own subcommands from above portable, as pyproject.toml registers them: used when
#: the installed metadata does not list them (a source checkout run with PYTHONPATH, or an
#: install made before the group existed). Names of modules as strings, imported only when run.
SOURCE_COMMANDS = {
    "demo": "alpyka_demo.pipeline:command",
    "aot": "inference.aot:command",
    "export": "inference._export:command",
    "serve": "inference.serving.__main__:command",
}

#: one line each for ``alpyka --help`` (asking a command itself would import it, and torch)
HELP = {
    "info": "backends, devices, versions and why a backend is unavailable",
    "demo": "the end-to-end fragment-merging GNN pipeline (--help for flags)",
    "bench": "run the benchmark suite (--quick for a short run); needs a source checkout",
    "aot": "compile a model ahead of time into a .pt2 package",
    "export": "export a module to .pt2 (torch.export) or .onnx (MODULE: pkg.mod:attr or file.py:attr)",
    "serve": "host models in a Triton server through PyTriton",
}


def _cmd_info(argv: list[str], prog: str) -> int:
    from ._info import main as info_main

    return info_main(argv, prog, command_word=False)


def _benchmarks_runner() -> Path | None:
    """benchmarks/run_all.py of the source checkout this package runs from, or of the current
    directory (an installed alpyka run inside a clone): only in a checkout of alpyka (its
    pyproject.toml), never another package's ``benchmarks`` beside an installed one in
    site-packages."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):  # (portable/cli/_main.py)
        runner = root / "benchmarks" / "run_all.py"
        if runner.is_file() and _is_alpyka_checkout(root):
            return runner
    return None


def _is_alpyka_checkout(root: Path) -> bool:
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return (root / "portable" / "cli" / "_main.py").is_file() and 'name = "alpyka"' in text


#: what ``alpyka bench`` tells benchmarks/run_all.py its command is called (its --help's usage line)
PROG_VARIABLE = "ALPYKA_BENCH_PROG"


def _cmd_bench(argv: list[str], prog: str) -> int:
    runner = _benchmarks_runner()
    if runner is None:
        raise CliError(
            "the benchmarks are not part of the installed package: they ship with alpyka's source "
            "(benchmarks/); run `alpyka bench` inside a clone of the repository"
        )
    env = {**os.environ, PROG_VARIABLE: prog}  # (its usage line names the command typed, not run_all.py)
    return subprocess.call([sys.executable, str(runner), *argv], env=env)


_BUILTIN: dict[str, Callable[[list[str], str], int]] = {"info": _cmd_info, "bench": _cmd_bench}


def _load(target: str) -> Callable[[list[str], str], int]:
    return load_reference(target, "command")  # type: ignore[no-any-return]


def commands() -> dict[str, Callable[[], Callable[[list[str], str], int]]]:
    """``{name: loader}`` of every subcommand: portable's own, then those registered under
    ``alpyka.commands`` (alpyka's from :data:`SOURCE_COMMANDS` where the metadata lacks them)."""
    found: dict[str, Callable[[], Callable[[list[str], str], int]]] = {
        name: (lambda fn=fn: fn) for name, fn in _BUILTIN.items()
    }
    registered = {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}
    for name, target in SOURCE_COMMANDS.items():
        if name in registered:
            found[name] = registered.pop(name).load
        else:
            found[name] = lambda target=target: _load(target)
    for name in sorted(registered):  # other packages' commands
        found.setdefault(name, registered[name].load)
    return found


def _parser(names: list[str], prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="alpyka: portable kernels, SoA collections and inference",
        epilog=f"Run `{prog} COMMAND --help` for a command's own flags.",
    )
    parser.add_argument(
        "command",
        choices=names,
        metavar="COMMAND",
        help="; ".join(f"{n}: {HELP.get(n, 'run it with --help')}" for n in names),
    )
    return parser


def main(argv: list[str] | None = None, prog: str = "alpyka") -> int:
    """Run ``alpyka`` (or ``python -m portable``, named ``prog``) on ``argv``; the exit status."""
    command_started()  # a Ctrl-C raises KeyboardInterrupt again (portable/_command_start.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        found = commands()
        order = [n for n in HELP if n in found] + [n for n in found if n not in HELP]
        # the command is parsed here; everything after it belongs to the command's own parser
        name = _parser(order, prog).parse_args(argv[:1]).command

        def command(args: list[str], prog: str) -> int:
            return found[name]()(args, prog)  # imported here: its import errors print like its own

        return run(command, argv[1:], f"{prog} {name}")
    except KeyboardInterrupt:  # one line (unless the command said it), then killed by SIGINT
        end_by_interrupt(f"{prog}: interrupted")
        raise


if __name__ == "__main__":
    sys.exit(main())
