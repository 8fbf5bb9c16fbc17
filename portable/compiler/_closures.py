"""Front-end, nested functions: a ``def`` inside a kernel or device function that reads the
enclosing function's locals (C++'s ``[&]`` lambda), called there or passed to device functions.

A nested def is a device function whose free names that the enclosing function binds (its
parameters, locals, arrays, ``acc``) are extra trailing arguments, captured where the function
is called or passed: the enclosing function is suspended while it runs, so the values read are
those a Python closure reads. Arrays are captured as arrays (writes go through), numbers by
value (assigning one inside makes it the nested function's own local, as in Python)."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ._values import DeviceFunctionVal


def bound_names(fdef: ast.FunctionDef) -> set[str]:
    """The names ``fdef`` binds in its own scope: assigned names, loop targets and nested defs
    (not those of the defs nested in it)."""
    out: set[str] = set()
    stack: list[ast.AST] = list(fdef.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def params_of(fdef: ast.FunctionDef) -> list[str]:
    a = fdef.args
    return [x.arg for x in a.args] + ([a.vararg.arg] if a.vararg else [])


def free_names(fdef: ast.FunctionDef) -> list[str]:
    """The names ``fdef`` (and the defs nested in it) read but does not bind, in first-use order."""
    own = bound_names(fdef) | set(params_of(fdef))
    out: list[str] = []
    stack: list[ast.AST] = list(reversed(fdef.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef):
            names = free_names(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names = [node.id]
        else:
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
            continue
        out += [n for n in names if n not in own and n not in out]
    return out


@dataclass(eq=False)
class LocalFunction:
    """A def nested in a kernel or device function: one per ``def`` node (the key of its
    specialisations), ``captured`` the enclosing function's names it reads."""

    parsed: Any  # ParsedFunction of the nested def (the enclosing file, lines and globals)
    captured: list[str]
    min_shared: dict = field(default_factory=dict)

    @property
    def __name__(self) -> str:
        return self.parsed.name


@dataclass(eq=False)
class BoundLocal:
    """A nested def with the values of its captured names where it is called or passed."""

    template: LocalFunction
    captures: list[Any]
    min_shared: dict = field(default_factory=dict)

    @property
    def __name__(self) -> str:
        return self.template.parsed.name

    def parsed(self) -> Any:
        return self.template.parsed


class ClosureBuilder:
    """Mixin of the function builder: ``def`` statements. Needs ``error``, ``scope``, ``lookup``,
    ``ctx``, ``p`` (the enclosing function's ParsedFunction) and ``assigned``."""

    #: the nested defs whose captures are being looked up (a def that reads itself: recursion)
    binding_locals: list[LocalFunction]

    def st_FunctionDef(self, s: ast.FunctionDef) -> list:
        if s.decorator_list:
            raise self.error(s, f"a def inside a kernel takes no decorator: {s.name!r} is a device function already")
        a = s.args
        if a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs or s.returns is not None:
            raise self.error(s, f"{s.name!r} must take plain positional parameters (and may end them with *args)")
        if s.name in self.scope:
            raise self.error(s, f"{s.name!r} is defined twice (or names something else already)")
        template = self.ctx.local_functions.get(id(s))
        if template is None:
            encl = self.p
            enclosing = set(encl.params) | ({encl.vararg} if encl.vararg else set()) | bound_names(encl.tree)
            captured = [n for n in free_names(s) if n in enclosing or n in self.scope]
            parsed = dataclasses.replace(  # a ParsedFunction of the enclosing one's file and globals
                encl,
                name=s.name,
                tree=s,
                params=[x.arg for x in a.args],
                vararg=a.vararg.arg if a.vararg else None,
            )
            template = self.ctx.local_functions[id(s)] = LocalFunction(parsed, captured)
        self.scope[s.name] = template
        return []

    def bind_local(self, template: LocalFunction, node: ast.AST) -> DeviceFunctionVal:
        """The nested def with the current values of what it captures."""
        binding = self.binding_locals
        if template in binding:  # g reads g (or h, which reads g): a call of itself
            raise self.error(node, f"{template.__name__!r} calls itself: recursion is not allowed in kernels")
        binding.append(template)
        try:
            return DeviceFunctionVal(BoundLocal(template, [self.lookup(n, node) for n in template.captured]))
        finally:
            binding.pop()
