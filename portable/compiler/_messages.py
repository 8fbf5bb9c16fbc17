"""``assert`` and ``print`` in kernels and device functions: the front-end's translation to
:class:`~portable.compiler.ir.Assert` and :class:`~portable.compiler.ir.Print`, and ``ALPYKA_ASSERTS``
(read once, when portable is imported: ``0`` compiles every assert out, as ``-DNDEBUG`` does)."""

from __future__ import annotations

import ast
from typing import Any

from ..env import SWITCHES, env_flag, reported_at_import
from . import ir
from ._errors import AssertCheck
from ._expressions import to_bool
from ._values import FieldAccess

ENV_ASSERTS = "ALPYKA_ASSERTS"


def _read_asserts() -> bool:
    """``ALPYKA_ASSERTS``: on unless ``0``/``off``/``false``/``no``; EnvVarError for another value."""
    return env_flag(ENV_ASSERTS, True, meaning=SWITCHES[ENV_ASSERTS])


_ASSERTS = reported_at_import(_read_asserts)  # a bad value: one line, not a traceback through the import


def asserts_enabled() -> bool:
    """Whether kernels are compiled with their asserts (``ALPYKA_ASSERTS``, read at import: one
    value per process, so the in-memory caches need no key for it; the disk caches are keyed by the
    generated source, which has the checks or not)."""
    return _ASSERTS


_PRINT_HINT = 'print() in kernels prints numbers and string constants, e.g. print("i =", i, x[i])'


class MessageBuilder:
    """The ``assert`` statement and ``print(...)`` calls of :class:`~portable.compiler._frontend.FunctionBuilder`."""

    def st_Assert(self: Any, s: ast.Assert) -> list[ir.Stmt]:
        cond = to_bool(self.scalar(s.test, "a condition"))
        if s.msg is None:
            text = f"assert {ast.unparse(s.test)}"
        elif isinstance(s.msg, ast.Constant) and isinstance(s.msg.value, str):
            text = s.msg.value
        else:
            raise self.error(
                s.msg,
                "the message of an assert in a kernel must be a string constant "
                '(assert i < n, "i out of range"); print the values before it: print("i =", i)',
            )
        if not asserts_enabled() or (isinstance(cond, ir.Const) and cond.value):
            return []  # compiled out (ALPYKA_ASSERTS=0), or true by construction
        where = "" if self.is_kernel else f" (device function {self.p.name!r})"
        message = (
            f"kernel {self.ctx.kernel_name!r}: assertion failed at {self.p.filename}:{self.line(s)}{where}: {text}"
        )
        return [ir.Assert(cond, AssertCheck(message), self.line(s))]

    def print_stmt(self: Any, s: ast.stmt, call: ast.Call) -> ir.Stmt:
        """``print(a, b, ...)`` as a statement: string constants and scalars."""
        if call.keywords:
            raise self.error(
                call, f"print() in kernels takes no keyword arguments (sep, end, file, flush); {_PRINT_HINT}"
            )
        items: list[Any] = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                raise self.error(arg, f"print(*...) is not allowed in kernels; {_PRINT_HINT}")
            v = self.value(arg)
            if isinstance(v, str):
                if "\x00" in v:  # C's printf ends a string at a NUL: the rest would vanish on every backend
                    raise self.error(
                        arg,
                        "print() in kernels cannot print a NUL character ('\\x00' or '\\0') in a string: "
                        "the device's printf would cut the string there; remove it or print a number",
                    )
                items.append(v)
                continue
            if isinstance(v, FieldAccess):
                v = self.as_scalar(v, arg)
            if not isinstance(v, ir.Expr):
                raise self.error(arg, f"print() cannot print {self.describe(v)}; {_PRINT_HINT}")
            items.append(v)
        return ir.Print(items, self.line(s))

    def unsupported(self: Any, node: ast.AST) -> str:
        msg = super().unsupported(node)  # type: ignore[misc]
        if isinstance(node, ast.JoinedStr):
            msg += '; an assert\'s message is a string constant, and print() prints values: print("i =", i)'
        return msg
