"""The one line an error the user can fix prints as (see :func:`portable.cli.run`)."""

from __future__ import annotations

#: optional packages a subcommand may need, and the extra of pyproject.toml that installs each
_EXTRAS = {"torch": "torch", "tritonclient": "triton", "pytriton": "triton"}


def error_line(exc: BaseException) -> str:
    """The one line :func:`run` prints for ``exc`` (without the ``prog: error:`` prefix)."""
    if isinstance(exc, ModuleNotFoundError) and exc.name in _EXTRAS:
        return (
            f"{exc.name} is not installed; install it with: pip install -e '.[{_EXTRAS[exc.name]}]' -c constraints.txt"
        )
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
