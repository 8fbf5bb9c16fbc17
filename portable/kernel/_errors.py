"""Errors of the kernel compiler and of kernel launches."""

from __future__ import annotations

from .._errors import AlpykaError


class KernelSyntaxError(AlpykaError, SyntaxError):
    """A construct the kernel language does not support (raised when the kernel is compiled).

    ``filename`` and ``lineno`` point at the offending line of the kernel's source.
    """

    def __init__(self, message: str, filename: str = "", lineno: int = 0) -> None:
        AlpykaError.__init__(self, message)
        self.msg = message
        self.filename = filename
        self.lineno = lineno

    def __str__(self) -> str:
        return self.msg


class KernelArgumentError(AlpykaError, TypeError):
    """Wrong number or kind of kernel arguments, or arguments of another device."""


class KernelIndexError(AlpykaError, IndexError):
    """An index out of range inside a kernel (checked under ``ALPYKA_DEBUG=1``)."""


class KernelValueError(AlpykaError, ValueError):
    """A value a kernel cannot run with, found at run time: a ``range()`` step of zero (Python's
    ``range`` raises ValueError). Checked on every backend, with or without ``ALPYKA_DEBUG``."""


class ValueCheck(str):
    """The message of a device-side check whose report is a :class:`KernelValueError` (the
    other messages of a kernel's error flag are index checks: :class:`KernelIndexError`)."""


def device_check_error(message: str) -> AlpykaError:
    """The exception a kernel's error flag reports on the host for the check of ``message``."""
    return KernelValueError(message) if isinstance(message, ValueCheck) else KernelIndexError(message)
