"""A plugin module that calls ``sys.exit`` when it is imported (alpyka_faulty_plugins)."""

import sys

sys.exit("alpyka_faulty_plugins.exiting: no device here, exiting")


def load() -> None:  # pragma: no cover - never reached
    """The factory its entry point names."""
