"""A pipeline's declaration: a function that enqueues kernels and models on a queue, with declared
input and output SoA layouts and output rows. What both sides agree on: the server hosts a
declaration, the client checks the server against one; the user's :class:`inference.Pipeline`
(``@pipeline``, :mod:`inference._pipeline_api`) adds the local call and ``.remote``."""

from __future__ import annotations

import functools
import inspect
import keyword
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import soa
from portable import AlpykaError, ArgumentError, ArgumentTypeError, cli

#: marks a served pipeline's own failure in the error text Triton returns; the client reads it
#: back (and does not retry it elsewhere: the same inputs fail the same way on every server)
PIPELINE_ERROR_MARK = "alpyka-pipeline-error:"


class PipelineError(AlpykaError, RuntimeError):
    """A pipeline was declared or called wrongly (the message names the pipeline and the fix)."""


class OutputsNotFilled(PipelineError):
    """A pipeline left output columns untouched (found by the poison fill, see ``debug``)."""


@dataclass(frozen=True)
class Slot:
    """One declared collection: its name (the body's parameter or the mapping key), its layout,
    and for outputs its rows rule."""

    name: str
    layout: type
    rows: Any = None

    def describe(self) -> str:
        return f"{self.name}: {self.layout.__name__}"


def _slots(kind: str, decl: Any, params: list[str], fn_name: str) -> list[Slot]:
    """Normalise ``inputs=``/``outputs=``: a layout, a sequence of layouts (named after the body's
    parameters) or ``{name: layout}``."""
    if isinstance(decl, Mapping):
        items = list(decl.items())
    else:
        seq = list(decl) if isinstance(decl, (list, tuple)) else [decl]
        if len(seq) > len(params):
            raise PipelineError(
                f"pipeline {fn_name!r}: {len(seq)} {kind} layouts declared, but the body "
                f"has only {len(params)} parameter(s) after the queue for them"
            )
        items = list(zip(params[: len(seq)], seq))
    if not items:
        raise PipelineError(f"pipeline {fn_name!r}: declare at least one {kind[:-1]} layout")
    out = []
    for name, layout in items:
        if not (isinstance(layout, type) and issubclass(layout, soa.Layout)):
            raise PipelineError(
                f"pipeline {fn_name!r}: {kind[:-1]} {name!r} must be a soa.Layout subclass, got {layout!r}"
            )
        if not str(name).isidentifier() or keyword.iskeyword(name) or "__" in str(name):
            raise PipelineError(
                f"pipeline {fn_name!r}: collection name {name!r} must be an identifier "
                "without '__' (it prefixes the Triton tensor names)"
            )
        out.append(Slot(str(name), layout))
    return out


class PipelineDeclaration:
    """A chain of kernels and models over SoA collections, as declared: the body ``fn``, its
    input and output slots (name and layout) and the rows rule of each output. A server hosts
    one (:func:`inference.serve`); :class:`inference.Pipeline` is the one users make."""

    def __init__(
        self,
        fn: Callable[..., Any],
        inputs: Any,
        outputs: Any,
        *,
        rows: Any = None,
        name: str | None = None,
        debug: bool = False,
    ) -> None:
        if not callable(fn):
            raise PipelineError(f"@pipeline decorates a function, got {fn!r}")
        self.fn = fn
        self.name = name or fn.__name__
        try:
            params = list(inspect.signature(fn).parameters)[1:]
        except (TypeError, ValueError):
            params = []
        self.inputs = _slots("inputs", inputs, params, self.name)
        self.outputs = _slots("outputs", outputs, params[len(self.inputs) :], self.name)
        names = [s.name for s in self.inputs + self.outputs]
        if len(set(names)) != len(names):
            raise PipelineError(f"pipeline {self.name!r}: collection names must be unique, got {names}")
        per = dict(rows) if isinstance(rows, Mapping) else {s.name: rows for s in self.outputs}
        unknown = [k for k in per if k not in {s.name for s in self.outputs}]
        if unknown:
            raise PipelineError(
                f"pipeline {self.name!r}: rows= names {unknown}, which are not outputs "
                f"({[s.name for s in self.outputs]})"
            )
        for key, value in per.items():
            if value is not None and not callable(value) and not (isinstance(value, int) and value >= 0):
                raise PipelineError(
                    f"pipeline {self.name!r}: rows of output {key!r} must be None, an int >= 0 "
                    f"or a callable of the input rows, got {value!r}"
                )
        self.outputs = [Slot(s.name, s.layout, per.get(s.name)) for s in self.outputs]
        self.debug = bool(debug)
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------------ declarations
    @property
    def reference(self) -> str:
        """``module:qualname``: how a server process imports this pipeline (a script run as
        ``__main__`` is named by its file path)."""
        mod = getattr(self.fn, "__module__", None) or "__main__"
        own = getattr(sys.modules.get(mod), cli.FILE_ATTR, None)
        if own:  # a file imported under a name of alpyka's own: name the file
            return f"{own}:{self.fn.__qualname__}"
        if mod == "__main__":
            path = getattr(sys.modules.get("__main__"), "__file__", None)
            if not path:
                raise PipelineError(
                    f"pipeline {self.name!r} is defined in an interactive session; a server "
                    "imports pipelines: define it in a module or a script file"
                )
            mod = os.path.abspath(path)
        return f"{mod}:{self.fn.__qualname__}"

    def output_rows(self, input_rows: Sequence[int]) -> list[int]:
        """Rows of each output collection for inputs of ``input_rows`` rows."""
        out = []
        for s in self.outputs:
            if s.rows is None:
                n = input_rows[0]
            elif callable(s.rows):
                n = s.rows(*input_rows)
            else:
                n = s.rows
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise PipelineError(
                    f"pipeline {self.name!r}: rows of output {s.name!r} came out as {n!r} "
                    f"for input rows {list(input_rows)}; it must be an int >= 0"
                )
            out.append(int(n))
        return out

    def fixed_rows(self, slot: Slot) -> int | None:
        """The rows of an output when they do not depend on the inputs (a Triton dim), else None."""
        return slot.rows if isinstance(slot.rows, int) and not isinstance(slot.rows, bool) else None

    def check_call(self, q: Any, collections: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Split and check the collections of a call: count, layouts, output rows."""
        if not hasattr(q, "enqueue_host"):
            raise ArgumentTypeError(
                f"pipeline {self.name!r}: the first argument is the queue (pk.Queue), got {type(q).__name__}"
            )
        want = len(self.inputs) + len(self.outputs)
        if len(collections) != want:
            sig = ", ".join(s.name for s in self.inputs + self.outputs)
            raise ArgumentTypeError(
                f"pipeline {self.name!r} takes (q, {sig}): {want} collections, got {len(collections)}; "
                "pass the inputs, then the outputs"
            )
        ins, outs = list(collections[: len(self.inputs)]), list(collections[len(self.inputs) :])
        for s, c in zip(self.inputs + self.outputs, ins + outs):
            layout = getattr(c, "layout", None)
            if layout is not s.layout:
                got = getattr(layout, "__name__", type(c).__name__)
                raise ArgumentTypeError(
                    f"pipeline {self.name!r}: collection {s.name!r} must be a PortableCollection "
                    f"of {s.layout.__name__}, got {got}"
                )
        rows = self.output_rows([c.size for c in ins])
        for s, c, n in zip(self.outputs, outs, rows):
            if c.size != n:
                raise ArgumentError(
                    f"pipeline {self.name!r}: output {s.name!r} has {c.size} rows, the pipeline "
                    f"declares {n} for inputs of {[c.size for c in ins]} rows; make it of {n} rows"
                )
        return ins, outs

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.inputs)
        outs = ", ".join(s.describe() for s in self.outputs)
        return f"<pipeline {self.name!r} ({ins}) -> ({outs})>"


def as_pipeline(obj: Any, what: str = "serve") -> PipelineDeclaration:
    """``obj`` if it is a pipeline (a :class:`PipelineDeclaration`), else a clear error saying how
    to make one."""
    if isinstance(obj, PipelineDeclaration):
        return obj
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        raise ArgumentTypeError(
            f"{what}: {name!r} is a plain function, not a pipeline; decorate it with "
            f"@inference.pipeline(inputs=Layout, outputs=Layout) so that its collections "
            f"(and the Triton config) are known"
        )
    raise ArgumentTypeError(
        f"{what}: {name!r} ({type(obj).__name__}) is not a pipeline; "
        "use @inference.pipeline(inputs=..., outputs=...) on a function"
    )
