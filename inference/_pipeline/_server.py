"""The server side of a pipeline: import it by reference, run each request on a server queue.

Used by the server process (:mod:`inference.serving._child`). The pipeline's module is imported
once per server process, so the models it creates at import (or lazily, once) are loaded once;
each Triton model instance has its own queue on the server's device.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import portable as pk

from . import _wire
from ._declare import PIPELINE_ERROR_MARK as ERROR_MARK
from ._declare import Pipeline, as_pipeline


class ReferenceError_(pk.AlpykaError, ImportError):
    """A ``module:attribute`` reference that does not import (one line that says what to fix)."""


def load_reference(ref: str) -> Pipeline:
    """The pipeline named by ``module:attribute`` or ``path/to/file.py:attribute``, imported as
    ``python -m`` would: a module name is looked up from the working directory too, and a file
    is imported under its own name with its folder on the path (so the server process, which
    gets this process's path, imports it the same way)."""
    module_name, sep, attr = ref.rpartition(":")
    if not sep or not module_name or not attr:
        raise ReferenceError_(f"{ref!r} is not a pipeline reference; use package.module:attribute")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            module = _import_file(os.path.abspath(module_name))
        else:
            _on_path(os.getcwd())
            module = importlib.import_module(module_name)
    except BaseException as exc:
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise ReferenceError_(
            f"the pipeline module {module_name!r} does not import: {type(exc).__name__}"
            + (f": {reason}" if reason else "")
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ReferenceError_(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return as_pipeline(obj, f"serve {ref}")


#: the attribute a pipeline file imported under a name of alpyka's own carries: its path, so that
#: ``Pipeline.reference`` names the file (another process cannot import that name)
FILE_ATTR = "__alpyka_pipeline_file__"


def _import_file(path: str) -> Any:
    """The module of the pipeline file ``path``: imported under its own name with its folder on the
    path, as ``python -m`` would, where that name is free (or already this file); else (the name
    taken by another module, a file name that is no module name) under a name of its own."""
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
    unique = f"alpyka_pipeline_{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{digest}"
    module = sys.modules.get(unique)
    if module is None:
        spec = importlib.util.spec_from_file_location(unique, path)
        assert spec is not None and spec.loader is not None
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


def backend_of(device: str) -> tuple[str, int]:
    """The alpyka backend and device index a server's ``device`` names ("cpu": the host's
    backend, ``pk.host()``'s)."""
    name, _, index = device.partition(":")
    if name == "cpu":
        name = pk.host().backend_name
    return name, int(index or 0)


class PipelineRunner:
    """Runs requests of one pipeline on the server's device: one queue per Triton instance thread
    (a blocking queue: see :meth:`queue`)."""

    def __init__(self, pipe: Pipeline, device: str, check_filled: bool = True) -> None:
        self.pipe = pipe
        backend, index = backend_of(device)
        devices = pk.devices(backend)
        if index >= len(devices):
            raise RuntimeError(f"backend {backend!r} has {len(devices)} device(s); index {index} does not exist")
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
            raise RuntimeError(f"{ERROR_MARK} {type(exc).__name__}: {msg}") from exc

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
