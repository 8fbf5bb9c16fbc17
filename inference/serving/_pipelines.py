"""The server side of a pipeline: import it by reference, run each request on a server queue.

Used by the server process (:mod:`._child`) and by ``serve`` to check a reference. The pipeline's module is imported
once per server process, so the models it creates at import (or lazily, once) are loaded once;
each Triton model instance has its own queue on the server's device.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import portable as pk
from portable import cli

from .._pipeline import PIPELINE_ERROR_MARK as ERROR_MARK
from .._pipeline import PipelineDeclaration, PipelineError, _wire, as_pipeline
from ._device import backend_of


def load_reference(ref: str) -> PipelineDeclaration:
    """The pipeline named by ``module:attribute`` or ``path/to/file.py:attribute``, imported as
    ``python -m`` would (:func:`portable.cli.load_reference`; the server process, which gets this
    process's path, imports it the same way)."""
    return as_pipeline(cli.load_reference(ref, "pipeline"), f"serve {ref}")


class PipelineRunner:
    """Runs requests of one pipeline on the server's device: one queue per Triton instance thread
    (a blocking queue: see :meth:`queue`)."""

    def __init__(self, pipe: PipelineDeclaration, device: str, check_filled: bool = True) -> None:
        self.pipe = pipe
        backend, index = backend_of(device)
        devices = pk.devices(backend)
        if index >= len(devices):
            raise pk.NoSuchDevice(
                f"backend {backend!r} has {len(devices)} device(s); index {index} does not exist: "
                f"serve the pipeline on {backend}:0..{len(devices) - 1} (pk.devices({backend!r}) lists them)"
            )
        self.device = devices[index]
        self.check_filled = check_filled
        self._local = threading.local()

    def queue(self) -> pk.Queue:
        """This thread's queue: a blocking one (alpaka semantics: each task runs inline, in
        order), since the request waits for all of it anyway; it saves a worker-thread hop."""
        q = getattr(self._local, "queue", None)
        if q is None:
            q = self._local.queue = pk.Queue(self.device, blocking=True)
        return q

    def _reuse(self, key: tuple[str, str], layout: type, rows: int, q: pk.Queue) -> Any:
        """This thread's collection for ``key`` of ``rows`` rows: the last request's when the
        rows match (requests on one thread run one after another), else a new one."""
        cache = getattr(self._local, "collections", None)
        if cache is None:
            cache = self._local.collections = {}
        coll = cache.get(key)
        if coll is None or coll.size != rows:
            coll = cache[key] = pk.PortableCollection(layout, rows, q)
        return coll

    def run(
        self, arrays: Mapping[str, np.ndarray], parameters: Mapping[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        """One request: inputs into collections, the body on this thread's queue, outputs back.
        ``parameters``: the request's (``_wire.ZERO_ROWS`` names inputs that have no rows)."""
        pipe, q = self.pipe, self.queue()
        try:
            empty = set(str((parameters or {}).get(_wire.ZERO_ROWS, "") or "").split(",")) - {""}
            if empty:
                arrays = dict(arrays)
                for s in pipe.inputs:
                    if s.name in empty:
                        _wire.drop_rows(s, arrays)
            ins = [
                _wire.collection_from(s, arrays, q, self._reuse(("in", s.name), s.layout, _wire.rows_of(s, arrays), q))
                for s in pipe.inputs
            ]
            rows = pipe.output_rows([c.size for c in ins])
            outs = [self._reuse(("out", s.name), s.layout, n, q) for s, n in zip(pipe.outputs, rows)]
            for c in outs:
                if self.check_filled:
                    _wire.poison(q, c)
                else:
                    c.zero(q)
            pipe.fn(q, *ins, *outs)
            q.wait()
            result: dict[str, np.ndarray] = {}
            for s, c in zip(pipe.outputs, outs):
                result.update(_wire.pack(s, c, copy=True))  # the collection serves the next request
            if self.check_filled:
                _wire.raise_unfilled(pipe, [n for s in pipe.outputs for n in _wire.unfilled(s, result)])
            for s, c in zip(pipe.outputs, outs):
                if c.size == 0:
                    _wire.pad_rows(s, result)  # PyTriton cannot return empty tensors either
            return result
        except BaseException as exc:
            traceback.print_exc()
            try:
                q.wait()  # leave no work of this request on the queue (its error is reported below)
            except BaseException:  # noqa: BLE001
                pass
            msg = (str(exc).strip().splitlines() or [""])[0]
            raise PipelineError(f"{ERROR_MARK} {type(exc).__name__}: {msg}") from exc

    def warm_up(self, rows: int = 8) -> str:
        """Run the pipeline once on zeros (compiles its kernels, deploys its models); returns what
        happened, never raises (a pipeline may reject zeros)."""
        arrays = {}
        for s in self.pipe.inputs:
            for t in _wire.slot_decls(s, rows):
                arrays[t.name] = np.zeros(t.dims, dtype=t.dtype)
        t0 = time.perf_counter()
        try:
            self.run(arrays)
        except BaseException as exc:  # noqa: BLE001
            return f"warm-up of pipeline {self.pipe.name!r} on zeros failed ({exc}); first requests compile"
        return f"warm-up of pipeline {self.pipe.name!r}: {time.perf_counter() - t0:.2f} s"


def make_infer(runner: PipelineRunner) -> Callable[[list[Any]], list[dict[str, np.ndarray]]]:
    """The PyTriton inference callable (no batching: a list of requests, one call each)."""
    names = [t.name for s in runner.pipe.inputs for t in _wire.slot_decls(s)]

    def infer_requests(requests: list[Any]) -> list[dict[str, np.ndarray]]:
        return [runner.run({n: r[n] for n in names}, getattr(r, "parameters", None)) for r in requests]

    return infer_requests
