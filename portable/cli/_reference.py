"""``module:attribute`` references (``package.module:attr`` or ``path/to/file.py:attr``): the one
loader of what the ``alpyka`` command's subcommands and a pipeline server are told to import."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from typing import Any

from .._errors import AlpykaError
from ._messages import error_line

#: the attribute a file imported under a name of alpyka's own carries: its path (another process
#: cannot import that name; a pipeline's ``reference`` names the file instead)
FILE_ATTR = "__alpyka_file__"


class BadReference(AlpykaError, ImportError):
    """A ``module:attribute`` reference that is malformed, whose module does not import, or whose
    module has no such attribute (the message says which, and the fix)."""


def load_reference(ref: str, what: str = "object") -> Any:
    """The object ``ref`` names, imported as ``python -m`` would: a module name is looked up
    from the working directory too; a file (``.py``, or a name with a path separator) is
    imported under its own name with its folder on the path where that name is free. ``what``
    names the object in messages (``"pipeline"``, ``"command"``). Ctrl-C (KeyboardInterrupt)
    and SystemExit while the module imports pass through; any other failure is a
    :class:`BadReference`."""
    module_name, sep, attr = str(ref).rpartition(":")
    if not sep or not module_name or not attr:
        raise BadReference(
            f"{ref!r} is not a {what} reference; use package.module:attribute or path/to/file.py:attribute"
        )
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            module = _import_file(os.path.abspath(module_name))
        else:
            _on_path(os.getcwd())
            module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own error, whatever it is (not Ctrl-C or SystemExit)
        raise BadReference(
            f"the {what} module {module_name!r} does not import: {type(exc).__name__}: {error_line(exc)} "
            f"(check the name, and that `python -c 'import {module_name}'` works here)"
            if not module_name.endswith(".py")
            else f"the {what} module {module_name!r} does not import: {type(exc).__name__}: {error_line(exc)} "
            "(run the file with python to see its error)"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise BadReference(
                f"{what} module {module_name!r} has no attribute {attr!r}; name one it defines ({module_name}:NAME)"
            )
        obj = getattr(obj, part)
    return obj


def _import_file(path: str) -> Any:
    """The module of the file ``path``: imported under its own name with its folder on the path,
    as ``python -m`` would, where that name is free (or already this file); else (the name taken
    by another module, a file name that is no module name) under a name of its own, marked with
    :data:`FILE_ATTR`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no file {path}")
    folder, name = os.path.dirname(path), os.path.splitext(os.path.basename(path))[0]
    if name.isidentifier():
        known = sys.modules.get(name)
        if known is None or os.path.abspath(getattr(known, "__file__", "") or "") == path:
            _on_path(folder)
            try:
                module = importlib.import_module(name)
            except ImportError:
                module = None
            if module is not None and os.path.abspath(getattr(module, "__file__", "") or "") == path:
                return module
    digest = hashlib.sha256(path.encode()).hexdigest()[:10]
    unique = f"alpyka_file_{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{digest}"
    module = sys.modules.get(unique)
    if module is None:
        spec = importlib.util.spec_from_file_location(unique, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is not a Python module file")
        module = importlib.util.module_from_spec(spec)
        setattr(module, FILE_ATTR, path)
        sys.modules[unique] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[unique]
            raise
    return module


def _on_path(folder: str) -> None:
    """Put ``folder`` on ``sys.path`` (last resort: after what is there) unless it is there, as
    ``python -m`` puts the working directory (an ``alpyka`` console script does not)."""
    here = os.path.abspath(folder)
    if not any(os.path.abspath(p or os.curdir) == here for p in sys.path):
        sys.path.append(here)
