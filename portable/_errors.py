"""Exceptions raised by alpyka."""

from __future__ import annotations


class AlpykaError(Exception):
    """Base class of alpyka's own errors."""


class BackendUnavailable(AlpykaError):
    """The backend cannot be used here; the message says why."""


class WorkDivError(AlpykaError, ValueError):
    """A work division the device cannot run."""


class DeviceMismatch(AlpykaError, ValueError):
    """Memory of one device used with a queue or buffer of another."""


class AsyncError(AlpykaError):
    """An exception raised by asynchronous work, surfaced at a wait; ``__cause__`` is the original."""
