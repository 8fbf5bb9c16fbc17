"""``python -m portable [COMMAND ...]``: the ``alpyka`` command (its ``info`` when no command is
given), for an environment where the ``alpyka`` script is not on PATH."""

import sys

from .cli._main import main

sys.exit(main(sys.argv[1:] or ["info"], prog="python -m portable"))
