"""A kernel's or device function's Python source: cut from its file, parsed, and checked for
what no backend takes (parameters other than plain positional ones, non-ASCII names)."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Any

from ._errors import KernelSyntaxError


@dataclass
class ParsedFunction:
    """The parsed source of a kernel or device function."""

    name: str
    tree: ast.FunctionDef
    filename: str
    line_offset: int
    globals: dict
    closure: dict
    params: list[str]
    #: the name of a device function's ``*args`` parameter (None: it has none)
    vararg: str | None = None


def _source_block(fn: Any) -> str | None:
    """The source of ``def fn`` (with its decorators) cut from its file by indentation: much
    cheaper than ``inspect.getsource``, whose tokenizer costs tens of ms on a process's first
    kernel. None when the cut does not parse as that one function (the caller falls back)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename, getattr(fn, "__globals__", None))
    start = code.co_firstlineno - 1
    if not 0 <= start < len(lines):
        return None
    head = lines[start]
    indent = len(head) - len(head.lstrip())
    end = start + 1
    in_head = not head.lstrip().startswith("def ")  # still in the decorators
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            ind = len(line) - len(line.lstrip())
            if ind <= indent:
                if not in_head:
                    break
                if stripped.startswith("def "):
                    in_head = False
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # trailing blank lines and comments belong to what follows
    src = textwrap.dedent("".join(lines[start:end]))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or getattr(tree.body[0], "name", None) != fn.__name__:
        return None
    return src


def parse_function(fn: Any, what: str) -> ParsedFunction:
    """The parsed source of ``fn``, a ``what`` ("kernel" or "device function"); a
    :class:`KernelSyntaxError` at its line where no backend could take it."""
    src = _source_block(fn)
    if src is None:
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as exc:
            raise KernelSyntaxError(
                f"cannot read the source of {what} {fn.__name__!r} ({exc}); kernels must be defined in a file"
            ) from None
        filename = inspect.getsourcefile(fn) or "<unknown>"
    else:
        filename = fn.__code__.co_filename
    first = fn.__code__.co_firstlineno
    tree = ast.parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise KernelSyntaxError(f"{filename}:{first}: {what} {fn.__name__!r} must be a def function")
    a = fdef.args
    if (a.vararg and what == "kernel") or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        extra = "" if what == "kernel" else " (a device function may end them with *args)"
        raise KernelSyntaxError(
            f"{filename}:{first}: {what} {fn.__name__!r} must take plain positional "
            f"parameters (no defaults, *args, **kwargs or keyword-only){extra}",
            filename,
            first,
        )
    _check_ascii_names(fdef, filename, first - 1, what)
    closure = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
    return ParsedFunction(
        fn.__name__,
        fdef,
        filename,
        first - 1,
        fn.__globals__,
        closure,
        [x.arg for x in a.args],
        a.vararg.arg if a.vararg else None,
    )


def _check_ascii_names(fdef: ast.FunctionDef, filename: str, offset: int, what: str) -> None:
    """KernelSyntaxError at the line of the first non-ASCII name (a local, a parameter, the
    function's own): the generated C, OpenCL C, CUDA and HIP name variables after them, and NVRTC
    refuses non-ASCII identifiers ("unrecognized token"), so no backend takes them."""
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.FunctionDef):
            name = node.name
        else:
            continue
        if not name.isascii():
            line = offset + getattr(node, "lineno", 1)
            raise KernelSyntaxError(
                f"{filename}:{line}: {what} {fdef.name!r}: the name {name!r} is not ASCII; the code generated "
                f"for the device names its variables after the kernel's, and the CUDA compiler (NVRTC) takes "
                f"ASCII identifiers only: rename it",
                filename,
                line,
            )
