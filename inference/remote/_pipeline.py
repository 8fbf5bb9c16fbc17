"""``RemotePipeline``: a pipeline hosted by a Triton server, called like the local one.

The transport (servers, balancing, retries, failover, shared memory, statistics) is
:class:`RemoteModel`'s; this module (the client side of a pipeline) maps collections to the pipeline's tensors
and back, and checks the server's configuration against the declared (or given) layouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from portable import ArgumentTypeError

from .._pipeline import PIPELINE_ERROR_MARK, PipelineDeclaration, PipelineError, Slot, _wire
from .._tensor_desc import TensorDesc
from ._client import RemoteModel
from ._errors import InferenceFailed, MetadataMismatch
from ._future import RemoteFuture
from ._transport import RequestInputs


def _groups(tensors: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """The server's tensors grouped by collection (``<collection>__<field>``), in order."""
    groups: list[tuple[str, list[Any]]] = []
    for t in tensors:
        coll = t.name.split(_wire.SEP, 1)[0]
        if not groups or groups[-1][0] != coll:
            groups.append((coll, []))
        groups[-1][1].append(t)
    return groups


def _describe(tensors: Sequence[TensorDesc]) -> str:
    return ", ".join(f"{t.name} {t.dtype} {list(t.shape)}" for t in tensors)


def _kind(t: TensorDesc) -> tuple[Any, ...]:
    """What a collection's tensor must agree on between client and server: rows may differ."""
    return t.name, t.dtype, t.shape[1:], len(t.shape)


class RemotePipeline:
    """Pipeline ``name`` on the Triton server(s) at ``url_or_urls``: ``remote(q, *inputs,
    *outputs)`` runs it there, in ``q``'s order, and writes the outputs into the output
    collections once the whole response has arrived (a failed request writes nothing).

    - ``declaration``: the local :class:`Pipeline` (``pipe.remote(url)`` passes it): the
      server's configuration must be the one its layouts derive (else :class:`MetadataMismatch`
      naming the tensors). Without it, each call's collections are checked against the server.
    - several urls (a list or ``"a,b"``): least-outstanding-requests balancing, failover and
      retries elsewhere when a server goes away; an event's outputs are written exactly once.
    - ``mode`` for :meth:`call_async`: ``"async"`` (gRPC callback), ``"pseudo_async"`` (a blocking
      call on a worker thread) or ``"sync"``; ``timeout``, ``retries``, ``shared_memory``,
      ``protocol``: as :class:`inference.RemoteModel`.
    """

    def __init__(
        self,
        url_or_urls: str | Sequence[str],
        name: str,
        *,
        declaration: PipelineDeclaration | None = None,
        timeout: float | None = 10.0,
        retries: int = 1,
        mode: str = "async",
        **options: Any,
    ) -> None:
        self.name = name
        self.declaration = declaration
        self._inputs: list[tuple[str, list[Any]]] = []
        self._outputs: list[tuple[str, list[Any]]] = []
        self._model = RemoteModel(
            url_or_urls, name, timeout=timeout, retries=retries, mode=mode, validate=self._check_server, **options
        )

    # ------------------------------------------------------------------ configuration checks
    def _check_server(self, info: Any) -> None:
        """The server's configuration against the declaration (or kept to check calls against)."""
        if info.batching:
            raise MetadataMismatch(
                f"model {self.name!r} on the server batches (max_batch_size "
                f"{info.max_batch_size}): it is not an alpyka pipeline (served with 0)"
            )
        ins, outs = _groups(info.inputs), _groups(info.outputs)
        if self.declaration is not None:
            want = _wire.derive_config(self.declaration)
            for kind, got, expect in (
                ("inputs", info.inputs, want["inputs"]),
                ("outputs", info.outputs, want["outputs"]),
            ):
                if list(got) != expect:
                    missing = [e.name for e in expect if e not in got]
                    extra = [h.name for h in got if h not in expect]
                    raise MetadataMismatch(
                        f"pipeline {self.name!r}: the server's {kind} do not match the declared layouts "
                        f"({', '.join(s.describe() for s in getattr(self.declaration, kind))}): declared but not "
                        f"served as declared {missing}; served but not declared {extra}; the server has "
                        f"{_describe(got)}. Serve the same pipeline code on the server."
                    )
        self._inputs, self._outputs = ins, outs

    def _slots(self, collections: Sequence[Any]) -> tuple[list[Slot], list[Slot]]:
        """Slots of the call's collections, checked against the server's tensors."""
        if self.declaration is not None:
            return self.declaration.inputs, self.declaration.outputs
        if not self._inputs:
            self._model.model_info  # noqa: B018 - connects (and checks) if not yet
        n_in, n_out = len(self._inputs), len(self._outputs)
        if len(collections) != n_in + n_out:
            names = [g for g, _ in self._inputs + self._outputs]
            raise ArgumentTypeError(
                f"pipeline {self.name!r} on the server takes (q, {', '.join(names)}): "
                f"{n_in + n_out} collections, got {len(collections)}; pass the inputs, then the outputs"
            )
        slots = []
        for (coll_name, tensors), c in zip(self._inputs + self._outputs, collections):
            layout = getattr(c, "layout", None)
            if layout is None:
                raise ArgumentTypeError(
                    f"pipeline {self.name!r}: {coll_name!r} must be a PortableCollection, got {type(c).__name__}"
                )
            slot = Slot(coll_name, layout)
            mine = _wire.slot_decls(slot)
            # same tensors, dtypes, ranks and component dims (rows may be fixed on the server)
            if [_kind(t) for t in mine] != [_kind(t) for t in tensors]:
                raise MetadataMismatch(
                    f"pipeline {self.name!r}: collection {coll_name!r} ({layout.__name__}) does not match the "
                    f"server: the client sends {_describe(mine)}; the server expects {_describe(tensors)}"
                )
            slots.append(slot)
        return slots[:n_in], slots[n_in:]

    # ------------------------------------------------------------------ calls
    def _prepare(self, q: Any, collections: Sequence[Any]) -> tuple[list[Slot], list[Slot], list[Any], list[Any]]:
        if self.declaration is not None:
            self.declaration.check_call(q, collections)
        elif not hasattr(q, "enqueue_host"):
            raise ArgumentTypeError(
                f"pipeline {self.name!r}: the first argument is the queue (pk.Queue), got {type(q).__name__}"
            )
        in_slots, out_slots = self._slots(collections)
        n = len(in_slots)
        return in_slots, out_slots, list(collections[:n]), list(collections[n:])

    def _request(
        self, in_slots: list[Slot], out_slots: list[Slot], ins: list[Any], outs: list[Any], copy: bool
    ) -> tuple[dict[str, np.ndarray], dict[str, tuple[tuple[int, ...], np.dtype]]]:
        arrays = RequestInputs()
        empty = []
        for s, c in zip(in_slots, ins):
            arrays.update(_wire.pack(s, c, copy=copy))
            if c.size == 0 and any(f.kind != "scalar" for f in s.layout.fields):
                _wire.pad_rows(s, arrays)  # PyTriton cannot pass empty tensors: see _wire.ZERO_ROWS
                empty.append(s.name)
        if empty:
            arrays.parameters = {_wire.ZERO_ROWS: ",".join(empty)}
        specs = {}
        for s, c in zip(out_slots, outs):
            for t in _wire.slot_decls(s, max(c.size, 1)):
                specs[t.name] = (t.dims, t.dtype)
        return arrays, specs

    def _write(self, out_slots: list[Slot], outs: list[Any], result: dict[str, np.ndarray]) -> None:
        """Check every output tensor first, then write them all (a bad response writes nothing)."""
        result = dict(result)
        for s, c in zip(out_slots, outs):
            if c.size == 0:
                _wire.drop_rows(s, result)  # an output of no rows comes back as one row
        try:
            for s, c in zip(out_slots, outs):
                _wire.check_arrays(s, result, c.size, f"pipeline {self.name!r} response")
        except ValueError as exc:
            raise InferenceFailed(str(exc)) from None
        for s, c in zip(out_slots, outs):
            _wire.fill(s, c, result)

    def _error(self, exc: BaseException) -> BaseException:
        """A remote error as the caller's error naming the pipeline (and the server's message)."""
        text = str(exc)
        if PIPELINE_ERROR_MARK in text:
            line = text[text.index(PIPELINE_ERROR_MARK) + len(PIPELINE_ERROR_MARK) :].strip().splitlines()[0]
            url = text.split(": ", 1)[0]
            err = PipelineError(f"pipeline {self.name!r} failed on server {url}: {line.strip()}")
            err.__cause__ = exc
            return err
        if isinstance(exc, PipelineError) or f"pipeline {self.name!r}" in text:
            return exc
        try:
            err = type(exc)(f"pipeline {self.name!r}: {text}")
        except Exception:  # noqa: BLE001 - an exception type with another signature
            return exc
        err.__cause__ = exc
        return err

    def __call__(self, q: Any, *collections: Any) -> None:
        """Run the pipeline on the server in ``q``'s order (a host task of ``q``: the caller
        returns at once on a non-blocking queue; errors surface at ``q.wait()``)."""
        in_slots, out_slots, ins, outs = self._prepare(q, collections)

        def task() -> None:
            arrays, specs = self._request(in_slots, out_slots, ins, outs, copy=False)
            try:
                result = self._model.request(arrays, specs)
            except Exception as exc:  # noqa: BLE001 - re-raised naming the pipeline
                raise self._error(exc) from None
            self._write(out_slots, outs, result)

        q.enqueue_host(task)

    def call_async(self, q: Any, *collections: Any) -> Any:
        """Start the request in ``q``'s order (inputs copied then) and return a
        :class:`inference.remote.RemoteFuture` at once: ``fut.wait()``, or ``q.wait_for(fut.event)``
        so that later work sees the outputs."""
        in_slots, out_slots, ins, outs = self._prepare(q, collections)
        fut = RemoteFuture()

        def start() -> None:
            try:  # a copy: the queue moves on, and a retry re-sends the inputs
                arrays, specs = self._request(in_slots, out_slots, ins, outs, copy=True)
            except BaseException as exc:  # noqa: BLE001
                fut.finish(None, exc)
                return

            def done(result: Any, err: BaseException | None) -> None:
                if err is None:
                    try:
                        self._write(out_slots, outs, result)
                    except BaseException as exc:  # noqa: BLE001
                        err = exc
                fut.finish(result if err is None else None, None if err is None else self._error(err))

            try:
                self._model.request_async(arrays, specs, done)
            except BaseException as exc:  # noqa: BLE001
                fut.finish(None, self._error(exc))

        q.enqueue_host(start)
        return fut

    # ------------------------------------------------------------------ statistics, lifetime
    @property
    def url(self) -> str:
        return self._model.url

    @property
    def model(self) -> Any:
        """The underlying :class:`inference.RemoteModel` (transport, servers, statistics)."""
        return self._model

    def statistics(self) -> Any:
        """Client counters and the current server's Triton counters for this pipeline."""
        return self._model.statistics()

    def server_counters(self) -> dict[str, Any]:
        """Per server: what this client sent there."""
        return self._model.server_counters()

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> RemotePipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RemotePipeline {self.name!r} @ {self._model.url} ({len(self._model.urls)} server(s))>"
