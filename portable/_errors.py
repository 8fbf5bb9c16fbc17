"""Exceptions raised by alpyka."""

from __future__ import annotations

# the root and the argument errors live in the lowest layer, soa, whose checks raise them too
from soa._errors import AlpykaError as AlpykaError
from soa._errors import ArgumentError as ArgumentError
from soa._errors import ArgumentTypeError as ArgumentTypeError
from soa._errors import FileNotFound as FileNotFound
from soa._errors import NameNotFound as NameNotFound
from soa._errors import OutOfMemory as OutOfMemory
from soa._errors import StateError as StateError
from soa._errors import Timeout as Timeout


class BackendUnavailable(AlpykaError):
    """The backend cannot be used here; the message says why."""


class NoSuchDevice(ArgumentError, IndexError):
    """``pk.device(backend, index)`` with an index beyond the backend's devices (an IndexError
    too, as a sequence's index is)."""


class WorkDivError(AlpykaError, ValueError):
    """A work division the device cannot run."""


class DeviceMismatch(AlpykaError, ValueError):
    """Memory of one device used with a queue or buffer of another."""


class BufferTooLarge(OutOfMemory, ValueError):
    """A buffer whose bytes the device cannot give one allocation (a ``pk.OutOfMemory``, so a
    MemoryError, and a ValueError); the message says the device's limit and where it comes from."""


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
