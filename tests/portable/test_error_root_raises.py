"""User input never meets a bare builtin in the packages that check it: ``soa``, ``inference``,
``portable.data``, ``portable.distributed`` and collections raise alpyka's own errors (which still
are the builtin: ``pk.ArgumentError`` a ``ValueError``, ``pk.ArgumentTypeError`` a ``TypeError``,
``pk.NameNotFound`` a ``KeyError``). A new ``raise ValueError(...)`` there fails here; a raise that
no user input reaches is listed in :data:`INTERNAL` with the reason."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import portable as pk
import soa._errors

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["soa", "inference", "portable/data", "portable/distributed", "portable/_collection.py"]
BARE = {"ValueError", "TypeError", "KeyError"}
#: ``file:builtin`` -> why no user input reaches it
INTERNAL = {
    "inference/_torch_queue.py:TypeError": "a backend whose queue gives torch no native stream: a backend's bug",
}


def _files() -> list[Path]:
    out = []
    for entry in SCANNED:
        path = ROOT / entry
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


def _bare_raises(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BARE:
                found.append((node.lineno, exc.id))
    return found


def test_no_bare_builtin_raised_on_user_input():
    offenders = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        offenders += [f"{rel}:{line} {name}" for line, name in _bare_raises(path) if f"{rel}:{name}" not in INTERNAL]
    assert not offenders, f"raise pk.ArgumentError/ArgumentTypeError/NameNotFound instead: {offenders}"


def test_the_internal_list_is_current():
    bare = {f"{p.relative_to(ROOT).as_posix()}:{name}" for p in _files() for _, name in _bare_raises(p)}
    assert set(INTERNAL) <= bare, f"no longer raised, drop from INTERNAL: {sorted(set(INTERNAL) - bare)}"


def test_the_root_classes_are_one_set_of_objects():
    """soa defines the root (the lowest layer raises it too); portable exports the same classes."""
    for name in ("AlpykaError", "ArgumentError", "ArgumentTypeError", "NameNotFound"):
        assert getattr(pk, name) is getattr(soa._errors, name)
    assert issubclass(pk.NameNotFound, pk.AlpykaError) and issubclass(pk.NameNotFound, KeyError)


@pytest.mark.parametrize("cls", [pk.NameNotFound, pk.ArgumentError, pk.ArgumentTypeError])
def test_messages_read_as_written_and_pickle(cls):
    """``str()`` is the message (a plain KeyError's is its repr: quotes, escaped newlines), and an
    error crosses a process boundary (Dask workers, the server) as itself."""
    msg = "no block 'x'\nits blocks are ['a']"
    err = cls(msg)
    assert str(err) == msg
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == msg
    assert str(cls("a", "b")) == str(("a", "b"))  # several arguments: the builtin's text
