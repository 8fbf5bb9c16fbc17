"""alpyka's error root and the argument errors every package raises; defined here, in the lowest
layer (soa), so that soa's own checks raise them too; users import them from ``portable``."""

from __future__ import annotations


class AlpykaError(Exception):
    """Base class of alpyka's own errors."""


class ArgumentError(AlpykaError, ValueError):
    """An argument of a public call has a value it cannot take (the message names the argument,
    what it takes and how to get there)."""


class ArgumentTypeError(AlpykaError, TypeError):
    """An argument of a public call is of a type it does not take (the message names what it
    takes)."""


class NameNotFound(AlpykaError, KeyError):
    """A name (a field, column, block or tensor) that is not among the known ones; the message
    lists those. A ``KeyError`` too, whose ``str()`` is the message itself (not its repr)."""

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class StateError(AlpykaError, RuntimeError):
    """A call its object's present state cannot take: a model with no queue, device memory read
    through Python, a wait from inside the queue's own task, a closed pool (the message says what
    to do first)."""


class FileNotFound(AlpykaError, FileNotFoundError):
    """A file a call was given that is not there (a model file, a ROOT file); the message names
    the path and what to give. A ``FileNotFoundError`` (an ``OSError``) too."""


class Timeout(AlpykaError, TimeoutError):
    """A call given a time limit that passed before its work was done (``pk.distributed.run``'s
    ``timeout=``); the message says what was done, what is pending and how to give it longer. A
    ``TimeoutError`` (an ``OSError``) too, as ``concurrent.futures`` and Dask's own timeouts are."""


class OutOfMemory(MemoryError, AlpykaError):
    """Memory a call asks for that the device cannot give: an allocation that failed (nothing
    free), a buffer or collection larger than the device allows (``pk.BufferTooLarge``,
    ``pk.CollectionTooLarge``); the message names the size asked for. A ``MemoryError`` too, as cupy's and torch's
    ``OutOfMemoryError`` are.

    MemoryError comes first among the bases: it has a constructor of its own, which Python calls
    safely only on a class whose first built-in base is MemoryError, and tblib (which Dask installs
    in every process) unpickles an error through its class's ``__new__``; with AlpykaError first,
    an OutOfMemory raised in a Dask worker could not be unpickled."""
