"""Exceptions raised by alpyka."""

from __future__ import annotations


class AlpykaError(Exception):
    """Base class of alpyka's own errors."""


class BackendUnavailable(AlpykaError):
    """The backend cannot be used here; the message says why."""


class ArgumentError(AlpykaError, ValueError):
    """An argument of a public call has a value it cannot take (the message names the argument,
    what it takes and how to get there)."""


class ArgumentTypeError(AlpykaError, TypeError):
    """An argument of a public call is of a type it does not take (the message names what it
    takes)."""


class NoSuchDevice(ArgumentError, IndexError):
    """``pk.device(backend, index)`` with an index beyond the backend's devices (an IndexError
    too, as a sequence's index is)."""


class WorkDivError(AlpykaError, ValueError):
    """A work division the device cannot run."""


class DeviceMismatch(AlpykaError, ValueError):
    """Memory of one device used with a queue or buffer of another."""


class KernelBuildError(AlpykaError, RuntimeError):
    """The device compiler rejected a generated kernel (a bug of the emitter or an unsupported
    feature of the device); the message shows where, in the C source and in the kernel."""


class EnvVarError(AlpykaError, ValueError):
    """An ``ALPYKA_*`` environment variable whose value alpyka cannot use (the message names it,
    its value and what it takes)."""


class AsyncError(AlpykaError):
    """An exception raised by asynchronous work, surfaced at a wait; ``__cause__`` is the original."""


class AlpykaWarning(UserWarning):
    """Base class of alpyka's own warnings."""
