"""What the C emitter produces: a kernel's source with how to call it (:class:`CSource`), and the
error for a construct C cannot express (:class:`CEmitError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from portable import AlpykaError


@dataclass
class CSource:
    """A kernel's generated source and how to call it."""

    text: str
    entry: str
    dialect: str
    #: ("param", ir.Param) | ("elements", d) | ("dyn_bytes", None) | ("dyn_local", None) | ("err", None)
    args: list[tuple[str, Any]]
    line_map: dict[int, int] = field(default_factory=dict)  # C line (1-based) -> kernel source line
    source_file: str = ""
    check_messages: list[str] = field(default_factory=list)  # range-check messages by id - 1
    kernel_name: str = ""
    #: ``@pk.kernel(fast_math=True)``: built with the compiler's fast math (see :mod:`backends._c_build`)
    fast_math: bool = False

    @property
    def needs_error_flag(self) -> bool:
        """True when the kernel takes ``alpyka_err`` (compiled with range checks)."""
        return any(what == "err" for what, _ in self.args)

    def python_line(self, c_line: int) -> int:
        """The kernel source line of C line ``c_line`` (the nearest mapped line above it), or 0."""
        for ln in range(c_line, 0, -1):
            if ln in self.line_map:
                return self.line_map[ln]
        return 0


class CEmitError(AlpykaError, NotImplementedError):
    """A construct the C emitter cannot express; ``line`` is the kernel's source line."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line
