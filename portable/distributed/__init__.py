"""Scale-out on Dask: ``pk.distributed.run(process, chunks, setup=..., client=None, workers=N)``.

``setup(device) -> state`` runs once per Dask worker (a worker plugin: also on a worker that
restarts), ``process(state, chunk) -> result`` once per chunk; the results come back in chunk
order. ``client=None`` starts an embedded LocalCluster of ``workers`` processes (one thread
each, 127.0.0.1 only, no dashboard) and closes it at the end, on errors and on Ctrl-C too; a
``distributed.Client`` or a scheduler address uses that cluster instead.

Worker processes of the embedded cluster get a thread budget of ``cores // workers`` (at least 1):
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` (torch
follows alpyka's ``ALPYKA_TORCH_THREADS``, default 1), unless the environment sets them already.
They run without Dask's ``MALLOC_TRIM_THRESHOLD_=65536``: that setting turns off glibc's adaptive
mmap threshold, so every tensor above 128 KB is a fresh mmap and its pages fault in again, and
the demo's model step took ~2.5x the CPU time of the same step in process (measured; see
docs/data.md). What Dask's Nanny writes into this process's ``os.environ`` to spawn its workers is
put back when the cluster closes. Workers you start yourself: start them with
``MALLOC_TRIM_THRESHOLD_`` unset (the ``distributed.nanny.pre-spawn-environ`` config) for the
same effect.

A worker that dies mid-run: the scheduler runs its chunks again on the others (each chunk's
result arrives exactly once); a chunk that kills ``allowed_failures + 1`` workers is an error.
A chunk whose ``process`` raises: ``on_error="raise"`` (default) cancels the rest and raises a
:class:`ChunkError` naming the chunk; ``on_error="collect"`` returns every other result and a
:class:`ChunkError` in the failed chunk's place.

Dask is an optional extra (``pip install alpyka[data]``), imported when a run starts.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import marshal
import os
import sys
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._errors import AlpykaError, ArgumentError, ArgumentTypeError, Timeout
from ..data._awkward import require

__all__ = ["ChunkError", "run", "worker_environment"]


class ChunkError(AlpykaError, RuntimeError):
    """A chunk failed: ``index``, ``chunk`` and the original exception as ``__cause__``/``cause``."""

    def __init__(self, index: int, chunk: Any, cause: BaseException, what: str = "failed") -> None:
        text = repr(chunk)
        text = text if len(text) <= 120 else text[:117] + "..."
        kind = type(cause).__name__
        if kind == "KilledWorker":
            msg = f"chunk {index} ({text}) killed its worker on every attempt: {cause}"
        else:
            msg = f"chunk {index} ({text}) {what}: {kind}: {cause}"
        super().__init__(msg)
        self.index, self.chunk, self.cause = index, chunk, cause
        self.__cause__ = cause


def _by_value(*functions: Callable | None) -> None:
    """Functions of scripts and test files (modules the workers may not import) travel by value."""
    import cloudpickle

    for fn in functions:
        mod = sys.modules.get(getattr(fn, "__module__", "") or "")
        if mod is None or mod.__name__ == "__main__" or "." in mod.__name__:
            continue  # __main__ goes by value anyway; package modules are importable on workers
        path = getattr(mod, "__file__", "") or ""
        if "site-packages" in path or "dist-packages" in path or not path.endswith(".py"):
            continue
        try:
            cloudpickle.register_pickle_by_value(mod)
        except ValueError:  # not in sys.modules under its name: it stays by reference, as before
            pass


@contextlib.contextmanager
def _connect(client: Any, workers: int, allowed_failures: int) -> Iterator[Any]:
    """A Client: the one given, one for a scheduler address, or one onto an embedded
    LocalCluster; what this opens it closes (on errors and KeyboardInterrupt too)."""
    distributed = require("distributed")
    if isinstance(client, distributed.Client):
        yield client
        return
    if isinstance(client, str):
        with distributed.Client(client, timeout="20s") as c:
            yield c
        return
    if client is not None:
        raise ArgumentTypeError(
            f"client must be None, a distributed.Client or a scheduler address ('tcp://host:8786'), got {client!r}"
        )
    import dask

    spawn_env = worker_environment(workers)  # refuses a count that is not a positive integer
    saved = {k: os.environ.get(k) for k in (*spawn_env, "PYTHONHASHSEED")}
    _quiet_closed_comms()
    try:
        with dask.config.set(
            {
                "distributed.scheduler.allowed-failures": int(allowed_failures),
                "distributed.nanny.pre-spawn-environ": spawn_env,
            }
        ):
            cluster = distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                # no dashboard; the scheduler's HTTP endpoints on loopback only
                scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                silence_logs=logging.CRITICAL,
            )
    finally:
        # the workers are spawned (or failed to): put back now what the Nanny wrote into this
        # process's environment (a second cluster started meanwhile would take it as the user's);
        # a worker restarted later writes it again, put back at the end
        _restore_environ(saved)
    try:
        with distributed.Client(cluster) as c:
            yield c
    finally:
        cluster.close()
        _restore_environ(saved)


class _ClosedCommsAtTeardown(logging.Filter):
    """Drops asyncio's "Future exception was never retrieved" for a Dask connection that closed:
    after Ctrl-C the terminal interrupts the embedded cluster's workers too, and the scheduler's
    last broadcasts to them fail while it shuts down (a 30-line traceback, nothing lost).
    It runs where asyncio reports, from a future's ``__del__`` too: no import, no lock."""

    def __init__(self, closed: tuple[type, ...]) -> None:
        super().__init__()
        self.closed = closed

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not isinstance(exc, self.closed) or "never retrieved" not in record.getMessage()


def _quiet_closed_comms() -> None:
    """Install :class:`_ClosedCommsAtTeardown` on asyncio's logger (once)."""
    from distributed.comm.core import CommClosedError
    from tornado.iostream import StreamClosedError

    log = logging.getLogger("asyncio")
    if not any(isinstance(f, _ClosedCommsAtTeardown) for f in log.filters):
        log.addFilter(_ClosedCommsAtTeardown((CommClosedError, StreamClosedError)))


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_environment(workers: int) -> dict[str, str | None]:
    """The ``distributed.nanny.pre-spawn-environ`` of the embedded cluster's ``workers`` processes:
    each thread pool sized to ``cores // workers`` (at least 1) and ``MALLOC_TRIM_THRESHOLD_``
    unset (None: Dask leaves it out). Variables already in the environment win (Dask's rule)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ArgumentError(f"workers must be a positive integer (1, 2, ...), got {workers!r}")
    budget = str(max(1, _cores() // workers))
    return {
        "MALLOC_TRIM_THRESHOLD_": None,
        "OMP_NUM_THREADS": budget,
        "MKL_NUM_THREADS": budget,
        "OPENBLAS_NUM_THREADS": budget,
        "NUMBA_NUM_THREADS": budget,
    }


def _restore_environ(saved: dict[str, str | None]) -> None:
    """Put back what Dask's Nanny wrote into this process's environment to spawn its workers."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run(
    process: Callable[[Any, Any], Any],
    chunks: Iterable[Any],
    *,
    setup: Callable[[Any], Any] | None = None,
    client: Any = None,
    workers: int = 2,
    backend: str | None = None,
    on_error: str = "raise",
    resources: dict[str, float] | None = None,
    allowed_failures: int = 3,
    timeout: float | None = None,
) -> list[Any]:
    """``[process(state, chunk) for chunk in chunks]``, computed on Dask workers, in chunk order.

    ``setup(device)`` builds a worker's state (queues, models) once per worker on
    ``pk.devices(backend)`` (default backend when None; see ``pick_device`` for GPUs); without
    ``setup`` the state is the device. Later runs with the same setup and backend on the same
    cluster (``client=``) reuse each worker's state: setup runs again only on new workers.
    ``resources`` (e.g. ``{"GPU": 1}``) restricts chunks to
    workers that declare them. ``allowed_failures`` (embedded cluster only) is how many worker
    deaths a chunk may cause before it fails. ``timeout`` (seconds) bounds the whole run: a
    hang raises ``pk.Timeout`` (a TimeoutError) naming the chunks done and pending. Chunks and results must be
    picklable: a process function or chunk that is not raises TypeError naming it; a result that
    is not is that chunk's :class:`ChunkError` (the other results are kept with ``on_error="collect"``).
    """
    if on_error not in ("raise", "collect"):
        raise ArgumentError(f"on_error must be 'raise' or 'collect', got {on_error!r}")
    chunks = list(chunks)
    distributed = require("distributed")
    from . import _worker as _dask_worker

    _by_value(process, setup)
    results: list[Any] = [None] * len(chunks)
    if not chunks:
        return results
    _check_picklable(process, "the process function")
    if setup is not None:
        _check_picklable(setup, "the setup function")
    name = _setup_name(setup, backend)
    with _connect(client, workers, allowed_failures) as c:
        c.register_plugin(_dask_worker.DeviceSetup(name, setup, backend), name=name)
        _forget_old_setups(c, name)
        futures = []
        done: set[int] = set()
        run_id = uuid.uuid4().hex[:12]
        try:
            index = {}
            for i, chunk in enumerate(chunks):
                try:
                    fut = c.submit(
                        _dask_worker.run_chunk,
                        name,
                        process,
                        chunk,
                        key=f"{name}-{run_id}-chunk-{i}",
                        pure=False,
                        resources=resources,
                    )
                except Exception:  # Dask's own words for a chunk it cannot send
                    _check_picklable(chunk, f"chunk {i}")
                    raise
                index[fut.key] = i
                futures.append(fut)
            try:
                for fut in distributed.as_completed(futures, timeout=timeout):
                    i = index[fut.key]
                    done.add(i)
                    results[i] = _outcome(fut, i, chunks[i], on_error)
            except TimeoutError:
                pending = [i for i in range(len(chunks)) if i not in done]
                shown = ", ".join(map(str, pending[:20])) + (" ..." if len(pending) > 20 else "")
                raise Timeout(
                    f"pk.distributed.run: timeout={timeout} s passed with {len(done)} of "
                    f"{len(chunks)} chunks done; pending chunks: {shown}; give a longer timeout= "
                    "(None waits without a limit) or more workers"
                ) from None
        finally:
            with contextlib.suppress(Exception):
                c.cancel(futures)
    return results


def _setup_name(setup: Callable[[Any], Any] | None, backend: str | None) -> str:
    """The worker plugin's name: the same for the same setup (by its pickled bytes) and backend,
    so a later run on the same cluster reuses each worker's state instead of running setup again."""
    import hashlib

    import cloudpickle

    h = hashlib.sha256(cloudpickle.dumps((setup, backend)))
    code = getattr(setup, "__code__", None)
    if code is not None:  # a module function pickles by reference: its code tells an edited one apart
        h.update(marshal.dumps(code))
    return f"alpyka-setup-{h.hexdigest()[:16]}"


_registered: weakref.WeakKeyDictionary[Any, collections.OrderedDict[str, None]] = weakref.WeakKeyDictionary()


def _forget_old_setups(client: Any, name: str) -> None:
    """Keep the :data:`~portable.distributed._worker.KEEP` setups most recently used on a cluster
    registered (a worker that joins runs every registered setup), unregister older ones."""
    from . import _worker as _dask_worker

    try:
        names = _registered.setdefault(client, collections.OrderedDict())
    except TypeError:  # a client that cannot be weakly referenced: nothing is tracked
        return
    names[name] = None
    names.move_to_end(name)
    while len(names) > _dask_worker.KEEP:
        old, _ = names.popitem(last=False)
        with contextlib.suppress(Exception):
            client.unregister_worker_plugin(old)


def _outcome(fut: Any, i: int, chunk: Any, on_error: str) -> Any:
    """The result of chunk ``i``, or its ChunkError (raised with ``on_error="raise"``): the
    chunk's own exception, or the failure to bring its result back (a result that cannot be
    pickled, a worker lost while sending it)."""
    if fut.status == "error":
        err = ChunkError(i, chunk, fut.exception())
    else:
        try:
            return fut.result()
        except Exception as exc:  # noqa: BLE001 - the result could not reach this process
            err = ChunkError(i, chunk, exc, what="its result could not be sent back")
    if on_error == "raise":
        raise err
    return err


def _check_picklable(obj: Any, what: str) -> None:
    """TypeError naming ``what`` when Dask could not send ``obj`` to its workers."""
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as exc:
        text = repr(obj)
        text = text if len(text) <= 120 else text[:117] + "..."
        raise ArgumentTypeError(
            f"pk.distributed.run: {what} ({text}) cannot be pickled to reach the Dask workers: "
            f"{type(exc).__name__}: {exc}; define it at a module's top level, holding only picklable values"
        ) from exc
