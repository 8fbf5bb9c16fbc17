"""The visitor base of every walk over the kernel IR (the emitters, the IR dump).

A walk subclasses :class:`Visitor` and defines one ``visit_<NodeName>`` method per node kind of
:mod:`portable.compiler.ir` (``visit_BinOp``, ``visit_StridedLoop``...); ``visit(node, *args)``
calls the method of the node's class with ``node`` and ``args``. The method found for a node
class is cached per visitor class, so a dispatch costs one dict lookup. A node kind without a
method raises :class:`NotImplementedError` naming the walk (``visitor_name``) and the kind,
unless the subclass overrides :meth:`Visitor.missing`.

:func:`node_kinds` lists the expression and statement kinds of the IR and :func:`unhandled`
those a visitor class has no method for: tests/kernels/test_ir_visitors.py checks that every
walk handles every kind, so a new node cannot be added without teaching every emitter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from . import ir


class Visitor:
    """Dispatches ``visit(node, *args)`` to ``self.visit_<type(node).__name__>(node, *args)``."""

    #: the walk's name in error messages ("the C emitter", "the numba emitter"...)
    visitor_name: ClassVar[str] = "an IR visitor"
    _methods: ClassVar[dict[type, Callable[..., Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._methods = {}  # one cache per visitor class (subclasses may override methods)

    def visit(self, node: Any, *args: Any) -> Any:
        method = self._methods.get(type(node))
        if method is None:
            method = getattr(type(self), f"visit_{type(node).__name__}", None)
            if method is None:
                return self.missing(node, *args)
            self._methods[type(node)] = method
        return method(self, node, *args)

    def missing(self, node: Any, *args: Any) -> Any:
        """Called for a node without a ``visit_`` method; raises :class:`NotImplementedError`."""
        kind = type(node).__name__
        raise NotImplementedError(
            f"{self.visitor_name} does not handle the IR node kind {kind} (it has no visit_{kind} method)"
        )


def node_kinds() -> dict[str, list[type]]:
    """The node classes of :mod:`portable.compiler.ir`: ``{"expr": [...], "stmt": [...]}``."""
    out: dict[str, list[type]] = {"expr": [], "stmt": []}
    for obj in vars(ir).values():
        if not (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == ir.__name__):
            continue
        if issubclass(obj, ir.Expr):
            out["expr"].append(obj)
        elif issubclass(obj, ir.Stmt):
            out["stmt"].append(obj)
    return out


def unhandled(visitor: type[Visitor], kinds: str = "expr stmt") -> list[str]:
    """The names of the node kinds (of ``kinds``: "expr", "stmt" or both) without a ``visit_``
    method in ``visitor``."""
    all_kinds = node_kinds()
    return [c.__name__ for k in kinds.split() for c in all_kinds[k] if not hasattr(visitor, f"visit_{c.__name__}")]
