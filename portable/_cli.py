"""The ``alpyka`` command: ``info``, ``demo``, ``bench``, ``aot``, ``export``, ``serve``.

Errors print one line with the fix, not a traceback (``ALPYKA_TRACEBACK=1`` shows it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ._errors import AlpykaError


class CliError(AlpykaError):
    """An error the user can fix; printed as one line."""


def _cmd_info(args: argparse.Namespace) -> int:
    from ._info import main as info_main

    return info_main(["info", *args.rest])


def _cmd_demo(args: argparse.Namespace) -> int:
    from inference.demo.pipeline import main as demo_main  # torch is needed from here on

    return demo_main(args.rest)


def _cmd_bench(args: argparse.Namespace) -> int:
    runner = Path(__file__).resolve().parent.parent / "benchmarks" / "run_all.py"
    if not runner.exists():
        raise CliError("benchmarks/ ships with the source checkout; run `alpyka bench` from a clone of alpyka")
    return subprocess.call([sys.executable, str(runner), *args.rest])


def _cmd_aot(args: argparse.Namespace) -> int:
    from inference.aot import main as aot_main

    return aot_main(args.rest, prog="alpyka aot")


def _cmd_export(args: argparse.Namespace) -> int:
    from inference._export import main as export_main

    return export_main(args.rest, prog="alpyka export")


def _cmd_serve(args: argparse.Namespace) -> int:
    from inference.serve.__main__ import main as serve_main

    return serve_main(args.rest)


COMMANDS = {
    "info": (_cmd_info, "backends, devices, versions and why a backend is unavailable"),
    "demo": (_cmd_demo, "the end-to-end fragment-merging GNN pipeline (--help for flags)"),
    "bench": (_cmd_bench, "run the benchmark suite (--quick for a short run)"),
    "aot": (_cmd_aot, "compile a model ahead of time into a .pt2 package"),
    "export": (_cmd_export, "export a module to .pt2 (torch.export) or .onnx (MODULE: pkg.mod:attr or file.py:attr)"),
    "serve": (_cmd_serve, "host models in a Triton server through PyTriton"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alpyka", description="alpyka: portable kernels, SoA collections and inference",
        epilog="Run `alpyka COMMAND --help` for a command's own flags.",
    )
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND",
                        help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items()))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the command is parsed here; everything after it belongs to the command's own parser
    args = _parser().parse_args(argv[:1])
    args.rest = argv[1:]
    try:
        return COMMANDS[args.command][0](args)
    except KeyboardInterrupt:
        print("alpyka: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line with the fix; the traceback on request
        if os.environ.get("ALPYKA_TRACEBACK"):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name in ("torch", "tritonclient", "pytriton"):
            extra = {"torch": "torch", "tritonclient": "triton", "pytriton": "triton"}[exc.name]
            msg = f"{exc.name} is not installed; install it with: pip install -e '.[{extra}]' -c constraints.txt"
        else:
            msg = str(exc) or type(exc).__name__
            if args.command == "serve":  # serve's errors: the first line says what to fix
                msg = next((ln.strip() for ln in msg.splitlines() if ln.strip()), type(exc).__name__)
        print(f"alpyka {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
