"""The user's pipeline: ``@pipeline`` and :class:`Pipeline`, a declaration (inference._pipeline)
that runs locally exactly as its body and, through :meth:`Pipeline.remote`, on a Triton server.

    @pipeline(inputs=Fragments, outputs=Labels)
    def merge(q, frags, labels): ...            # enqueues kernels / Model.forward on q
    merge(q, frags_coll, labels_coll)            # local
    handle = serve(merge, device="cpu_threads")  # Triton config derived from the layouts
    merge.remote(handle.grpc_url)(q, frags_coll, labels_coll)   # the same call, on the server

It sits above both roles: the server (:mod:`inference.serving`) hosts a declaration, the client
(:class:`inference.remote.RemotePipeline`) calls one, and neither imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._pipeline import PipelineDeclaration, PipelineError, _wire
from .remote import RemotePipeline

__all__ = ["Pipeline", "pipeline"]


class Pipeline(PipelineDeclaration):
    """A chain of kernels and models over SoA collections, runnable locally or on a Triton server.

    ``pipe(q, *inputs, *outputs)`` checks the collections against the declared layouts and output
    rows, then runs the body, which enqueues its work on ``q`` (nothing waits). ``pipe.remote(url)``
    returns a :class:`RemotePipeline` called the same way; :func:`inference.serve` hosts it.
    """

    def __call__(self, q: Any, *collections: Any) -> Any:
        """Run locally: the body enqueues its work on ``q``. With ``debug=True`` the outputs are
        poison-filled first and checked after the body (an error at ``q.wait()`` names columns
        the body never wrote)."""
        ins, outs = self.check_call(q, collections)
        if self.debug:
            for c in outs:
                _wire.poison(q, c)
        result = self.fn(q, *ins, *outs)
        if self.debug:
            q.enqueue_host(lambda: _wire.check_filled(self, outs))
        return result

    def remote(self, url_or_urls: str | Sequence[str], *, name: str | None = None, **options: Any) -> RemotePipeline:
        """A :class:`RemotePipeline` for this pipeline on the server(s) at ``url_or_urls``
        (checked against these declarations); ``name``: its name there (default: this
        pipeline's); ``options`` as for ``RemotePipeline``."""
        return RemotePipeline(url_or_urls, name or self.name, declaration=self, **options)


def pipeline(
    fn: Callable[..., Any] | None = None,
    *,
    inputs: Any = None,
    outputs: Any = None,
    rows: Any = None,
    name: str | None = None,
    debug: bool = False,
) -> Any:
    """Declare ``fn(q, *inputs, *outputs)`` a pipeline over SoA collections.

    ``inputs``/``outputs``: a layout each (named after the body's parameters), a sequence of
    layouts, or ``{name: layout}`` in the order the body takes them. ``rows``: output rows, the
    first input's by default; an int (fixed size), a callable of the input rows
    (``rows=lambda n_frags: 2 * n_frags``), or ``{output: rule}``. ``name``: the name on a server
    (default: the function's). ``debug``: poison-fill outputs and check the body wrote them.
    """
    if inputs is None or outputs is None:
        raise PipelineError(
            "@pipeline needs inputs= and outputs= layouts, e.g. @pipeline(inputs=Fragments, outputs=Labels)"
        )

    def wrap(f: Callable[..., Any]) -> Pipeline:
        return Pipeline(f, inputs, outputs, rows=rows, name=name, debug=debug)

    return wrap(fn) if fn is not None else wrap
