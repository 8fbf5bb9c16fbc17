"""The ``alpyka`` command: info, demo, bench, aot, serve."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="alpyka", description="alpyka: portable kernels, SoA and inference")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="backends, devices, versions and why a backend is unavailable")
    args = parser.parse_args(argv)
    if args.command == "info":
        from ._info import info_text

        print(info_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
