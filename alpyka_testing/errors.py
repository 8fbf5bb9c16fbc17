"""Assertions on alpyka's errors: raised as the error-root class, still the builtin a caller may
catch, with a message that matches (what was wrong and the fix)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import portable as pk


@contextlib.contextmanager
def raises_root(cls: type, builtin: type, match: str) -> Iterator[Any]:
    """``pytest.raises(cls, match=match)`` where ``cls`` derives from ``pk.AlpykaError`` and
    ``builtin``; the raised error is an instance of both. A ``KeyError`` reads as its message
    (``str()`` without the repr's quotes)."""
    assert issubclass(cls, pk.AlpykaError) and issubclass(cls, builtin), (cls, builtin)
    with pytest.raises(cls, match=match) as info:
        yield info
    assert isinstance(info.value, pk.AlpykaError) and isinstance(info.value, builtin)
    if isinstance(info.value, KeyError):
        assert str(info.value) == info.value.args[0], "a KeyError's message reads as written"


def raises_value(match: str) -> contextlib.AbstractContextManager[Any]:
    """:func:`raises_root` for ``pk.ArgumentError`` (a ``ValueError``)."""
    return raises_root(pk.ArgumentError, ValueError, match)


def raises_type(match: str) -> contextlib.AbstractContextManager[Any]:
    """:func:`raises_root` for ``pk.ArgumentTypeError`` (a ``TypeError``)."""
    return raises_root(pk.ArgumentTypeError, TypeError, match)


def raises_name(match: str) -> contextlib.AbstractContextManager[Any]:
    """:func:`raises_root` for ``pk.NameNotFound`` (a ``KeyError``)."""
    return raises_root(pk.NameNotFound, KeyError, match)
