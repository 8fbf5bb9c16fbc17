"""Device functions the kernel language itself calls (``acc.rand_*``), registered from above.

They are written in the kernel language by the modules that own them (:mod:`portable.rand`),
which import the compiler; the compiler finds them here by name, so it imports none of them.
"""

from __future__ import annotations

from typing import Any

#: uint32 words of a random engine's state (the frontend declares it; portable.rand fills it)
RAND_STATE_WORDS = 16
#: the engine's word saying whether a block was computed ahead (portable.rand._refill): a kernel's
#: own store to an engine word (or its device functions', passed the engine) sets it to 1, so the
#: next refill computes from the words as stored
RAND_AHEAD_WORD = 11

_FUNCTIONS: dict[str, Any] = {}


def register(name: str, function: Any) -> None:
    """Make ``function`` (a ``@pk.device_function``) the library's ``name``."""
    _FUNCTIONS[name] = function


def is_library_function(function: Any) -> bool:
    """Whether ``function`` is one of the library's registered device functions: they set a
    random engine's words themselves (:mod:`portable.rand`), so an engine passed to one is an
    array of words there, not an engine a store of the user's changes."""
    return any(f is function for f in _FUNCTIONS.values())


def library_function(name: str) -> Any:
    """The registered device function ``name``; LookupError naming the module to import else."""
    try:
        return _FUNCTIONS[name]
    except KeyError:
        owner = name.split(".", 1)[0]
        raise LookupError(
            f"the kernel language's {name} is not registered: import portable.{owner} (import portable does)"
        ) from None
