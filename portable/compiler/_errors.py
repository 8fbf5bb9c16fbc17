"""Errors of the kernel compiler and of kernel launches."""

from __future__ import annotations

from .._errors import AlpykaError, DeviceMismatch


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


class KernelDeviceMismatch(DeviceMismatch, KernelArgumentError):
    """A kernel argument in memory the queue's device cannot use (both error kinds), on every
    backend."""


#: the kinds of :class:`KernelCheckError`: what a GPU would leave wrong or undefined
CHECK_KINDS = ("barrier", "warp", "race", "uninitialized", "bounds", "deadlock", "stream")


class KernelCheckError(AlpykaError):
    """A launch that would be wrong or undefined on a GPU, found by a check (the GPU emulator's,
    ``ALPYKA_EMULATE=cuda``/``rocm`` with ``ALPYKA_EMULATE_CHECKS`` on, or ``ALPYKA_DEBUG``'s range
    checks). ``kind`` is one of :data:`CHECK_KINDS`; the message names the kernel and the line of
    its Python source. Reported at the next ``wait()`` as the ``__cause__`` of a ``pk.AsyncError``;
    the ``"stream"`` kind (two queues using a buffer with no event between, portable/_streamcheck.py)
    is raised by the enqueueing call itself."""

    kind = ""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            if kind not in CHECK_KINDS:
                raise ValueError(f"unknown kernel check kind {kind!r}: one of {', '.join(CHECK_KINDS)}")
            self.kind = kind

    def report(self) -> CheckReport:
        """This error as a message of a kernel's error flag (``device_check_error`` makes it again)."""
        return CheckReport(str(self), self.kind)


class KernelIndexError(KernelCheckError, IndexError):
    """An index out of range inside a kernel (checked under ``ALPYKA_DEBUG=1``, and by default
    on the emulated GPUs): the ``"bounds"`` kind of :class:`KernelCheckError`."""

    kind = "bounds"

    def __init__(self, message: str) -> None:
        super().__init__(message)


class KernelValueError(AlpykaError, ValueError):
    """A value a kernel cannot run with, found at run time: a ``range()`` step of zero (Python's
    ``range`` raises ValueError). Checked on every backend, with or without ``ALPYKA_DEBUG``."""


class ValueCheck(str):
    """The message of a device-side check whose report is a :class:`KernelValueError` (the
    other messages of a kernel's error flag are index checks: :class:`KernelIndexError`)."""


class CheckReport(str):
    """The message of a check the GPU emulator made (backends/emulator): its ``kind`` says which
    :class:`KernelCheckError` it reports."""

    kind = ""

    def __new__(cls, message: str, kind: str) -> CheckReport:
        out = super().__new__(cls, message)
        out.kind = kind
        return out


def device_check_error(message: str) -> AlpykaError:
    """The exception a kernel's error flag reports on the host for the check of ``message``."""
    if isinstance(message, AssertCheck):
        return KernelAssertionError(str(message))
    if isinstance(message, ValueCheck):
        return KernelValueError(message)
    if isinstance(message, CheckReport) and message.kind != "bounds":
        return KernelCheckError(str(message), message.kind)
    return KernelIndexError(str(message))


class KernelAssertionError(AlpykaError, AssertionError):
    """An ``assert cond, "message"`` of a kernel or device function failed at run time; the
    message names the kernel, the file and line, and the assert's message. Reported like every
    error found inside a kernel: the ``__cause__`` of the ``pk.AsyncError`` of the next
    ``wait()``. ``ALPYKA_ASSERTS=0`` compiles the asserts out (docs/kernels.md)."""


class AssertCheck(str):
    """The message of a failed ``assert`` in a kernel's error flag: reported as a
    :class:`KernelAssertionError`."""
