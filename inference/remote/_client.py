"""``RemoteModel``: a SoA forward pass served by a Triton (KServe v2) server, SONIC style."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from portable import ArgumentError, ArgumentTypeError
from portable.caches import LRUCache

from ..serving import serve
from . import _batching
from ._errors import MetadataMismatch, ModelNotReady, RemoteError
from ._future import RemoteFuture
from ._mapping import check_metadata, refuse_grouped_rows, signature
from ._requests import CONNECT_BACKOFF, REQUEST_BACKOFF, OutputSpecs, RequestsMixin
from ._servers import Server, final_error
from ._statistics import ClientStatistics, RemoteStatistics, ServerStatistics, _ClientCounters
from ._tensors import check_block
from ._transport import ModelInfo, RequestInputs, is_retryable

_MODES = ("sync", "async", "pseudo_async")
#: block mappings a client keeps (per model description and metadata signature)
_CHECKED_KEPT = 64


def split_urls(url: str | Sequence[str] | None) -> list[str]:
    """Server urls from one url, a comma-separated list or a sequence."""
    if not url:
        return []
    parts = url.split(",") if isinstance(url, str) else list(url)
    return [p.strip() for p in parts if p and p.strip()]


class RemoteModel(RequestsMixin):
    """A model on a Triton server with the interface of :class:`inference.Model`.

    ``RemoteModel("127.0.0.1:8001", "mlp")`` connects at once: the first server of
    ``[url, *servers]`` that is live and ready and has the model ready is used; its metadata and
    config are read and each :class:`ModelMetadata` is checked against them (block names, dtypes,
    shapes with -1, ``max_batch_size``) before the first request.

    - ``protocol``: ``"grpc"`` (default) or ``"http"`` (binary tensor extension).
    - ``timeout``: seconds for every call (readiness checks and each request); never a hang.
    - several servers (a list, a comma-separated string, or ``servers=``): each request goes to
      the server with the fewest requests in flight (least outstanding requests; ties stay on
      the server in use); one that went away is tried last for a while;
      :meth:`server_counters` says what went where.
    - ``retries``: extra attempts on the same server (with ``retry_delay`` doubling), then the
      next server of the list; a server that answers "no such model" is skipped at once, one
      that refuses the connection (down) fails fast.
    - ``ready_timeout``: at connection, how long to keep asking a server that answers but whose
      model is not ready yet (loading); default: ``timeout`` (60 s when that is None).
    - ``mode`` (SONIC): how :meth:`forward_async` carries the request. ``"async"``: gRPC's
      non-blocking call with a completion callback (HTTP: a worker thread); ``"pseudo_async"``:
      a blocking call on a worker thread; ``"sync"``: the call completes before it returns.
    - ``max_batch_size``: the client's own limit; batches over the (smaller) limit are split
      into several requests (rectangular batching); :meth:`forward_many` sends several events in
      one request (ragged batching).
    - ``shared_memory``: ``"auto"`` (system shared memory when the server is on this host),
      ``"system"`` (always) or ``None`` (bytes in the request).
    - ``token``: the servers' access token for shared-memory registration (Triton's restricted
      endpoints); default: found for a server this user started on this host with ``serve`` or
      ``alpyka serve``, else ``$ALPYKA_SERVE_TOKEN`` (:func:`inference.serving.access_token`).
    - ``fallback``: a model file (or module) to host on a local server started on free
      loopback ports when no listed server has the model; ``fallback_options`` go to
      :func:`inference.serve` (``inputs=``, ``outputs=``, ...). It is stopped by :meth:`close`
      and at interpreter exit.
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        model_name: str | None = None,
        *,
        servers: Sequence[str] = (),
        protocol: str = "grpc",
        timeout: float | None = 10.0,
        retries: int = 2,
        retry_delay: float = 0.05,
        mode: str = "async",
        max_batch_size: int | None = None,
        shared_memory: str | None = "auto",
        model_version: str = "",
        fallback: Any = None,
        fallback_options: Mapping[str, Any] | None = None,
        workers: int = 4,
        connect: bool = True,
        ready_timeout: float | None = None,
        validate: Callable[[ModelInfo], None] | None = None,
        token: str | None = None,
    ) -> None:
        if not model_name or not isinstance(model_name, str):
            raise ArgumentError("RemoteModel needs the model's name on the server: RemoteModel(url, 'name')")
        if mode not in _MODES:
            raise ArgumentError(f"mode must be one of {_MODES}, got {mode!r}")
        if shared_memory not in ("auto", "system", None, False):
            raise ArgumentError(f"shared_memory must be 'auto', 'system' or None, got {shared_memory!r}")
        if retries < 0:
            raise ArgumentError(f"retries must be >= 0 (0: no retry), got {retries}")
        if timeout is not None and timeout <= 0:
            raise ArgumentError(f"timeout must be positive seconds (or None: no limit), got {timeout}")
        if ready_timeout is not None and ready_timeout < 0:
            raise ArgumentError(f"ready_timeout must be >= 0 seconds (or None), got {ready_timeout}")
        urls = split_urls(url) + list(servers)
        if not urls and fallback is None:
            raise ArgumentError(
                "RemoteModel needs a server url, a servers=[...] list or a fallback model; give one of them"
            )
        self.model_name = model_name
        self.protocol = protocol
        self.timeout = timeout
        self.ready_timeout = ready_timeout
        self.retries = int(retries)
        self.retry_delay = float(retry_delay)
        self.mode = mode
        self.max_batch_size = max_batch_size
        self.shared_memory = shared_memory or None
        self.model_version = model_version
        self._servers = [Server(u, protocol, timeout, model_name, model_version, token) for u in urls]
        self._current = 0
        self._plan_lock = threading.Lock()  # a request's choice of server and its count, as one step
        self._fallback_model = fallback
        self._fallback_options = dict(fallback_options or {})
        self._fallback_server: Any = None
        self._queue: Any = None
        self._local = threading.local()
        # (id(model description), metadata signature) -> (the description, its block mapping): the
        # entry holds the description, so its id is not another's while kept
        self._checked = LRUCache(_CHECKED_KEPT)
        self._shm_off: dict[str, str] = {}  # url -> why shared memory is not used there
        self._counters = _ClientCounters()
        self._validate = validate
        self._workers = max(1, int(workers))
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        if connect:
            self.connect()

    # ------------------------------------------------------------------------ connection
    def connect(self) -> RemoteModel:
        """Find a server with the model ready, starting the fallback if none has it.

        The servers are polled in turn: one that does not answer (connection refused, timeout)
        gets ``retries`` more attempts with a doubling ``retry_delay``; one that answers but is
        not ready, or whose model is still loading, is asked again until ``ready_timeout``
        seconds have passed (a fleet of clients starting with their servers); one that does not
        have the model is dropped at once."""
        errors: list[tuple[str, BaseException]] = []
        active = self._order()
        failed: dict[int, int] = {}  # attempts that got no answer, per server
        waiting: dict[int, RemoteError] = {}  # servers that answer "not ready"
        start = time.monotonic()
        deadline = start + self._ready_timeout()
        round_ = 0
        while active:
            for idx in list(active):
                srv = self._servers[idx]
                try:
                    info = srv.connect()
                except ModelNotReady as e:
                    waiting[idx] = e
                    continue
                except RemoteError as e:
                    waiting.pop(idx, None)
                    errors.append((srv.url, e))
                    failed[idx] = failed.get(idx, 0) + 1
                    if not is_retryable(e) or failed[idx] > self.retries:
                        active.remove(idx)
                    continue
                self._current = idx
                self._validate_info(info)
                self._validate_server(srv, info)
                srv.validated = True
                return self
            now = time.monotonic()
            if now >= deadline:
                for idx in [i for i in active if i in waiting]:
                    active.remove(idx)
                    srv = self._servers[idx]
                    try:
                        errors.append((srv.url, srv.not_ready_error(waited=round(now - start, 1))))
                    except RemoteError as e:  # it stopped answering meanwhile
                        errors.append((srv.url, e))
            if not active:
                break
            pause = CONNECT_BACKOFF.delay(self.retry_delay, round_)
            if all(i in waiting for i in active):
                pause = min(max(pause, 0.05), max(deadline - now, 0.0))
            time.sleep(pause)
            round_ += 1
        if self._fallback_model is not None and self._fallback_server is None:
            self._start_fallback()
            return self.connect()
        raise final_error(errors, f"connecting to model {self.model_name!r}")

    def _ready_timeout(self) -> float:
        if self.ready_timeout is not None:
            return float(self.ready_timeout)
        return float(self.timeout) if self.timeout is not None else 60.0

    def _start_fallback(self) -> None:
        opts = {"device": "cpu", **({"http_port": 0} if self.protocol == "http" else {}), **self._fallback_options}
        self._fallback_server = serve({self.model_name: self._fallback_model}, **opts)
        url = self._fallback_server.grpc_url if self.protocol == "grpc" else self._fallback_server.http_url
        self._servers.append(Server(url, self.protocol, self.timeout, self.model_name, self.model_version))

    def _validate_server(self, srv: Server, info: ModelInfo) -> None:
        if self._validate is not None:
            self._validate(info)

    def _validate_info(self, info: ModelInfo) -> None:
        if info.batching and not all(t.batched for t in info.inputs + info.outputs):
            raise MetadataMismatch(
                f"model {self.model_name!r} batches (max_batch_size "
                f"{info.max_batch_size}) but not every tensor has a -1 batch axis"
            )

    @property
    def server(self) -> Server:
        return self._servers[self._current]

    @property
    def url(self) -> str:
        """The server in use now."""
        return self.server.url

    @property
    def urls(self) -> list[str]:
        """Every server of the list, in failover order."""
        return [srv.url for srv in self._servers]

    @property
    def model_info(self) -> ModelInfo:
        """Inputs, outputs, ``max_batch_size`` and dynamic batching as the server reports them."""
        info = self.server.info
        if info is None:  # not connected yet, or the server went away: find one (waits for readiness)
            self.connect()
            info = self.server.info
        return info if info is not None else self.server.connect()

    @property
    def fallback_server(self) -> Any:
        """The local server started as a fallback, or None."""
        return self._fallback_server

    def _order(self) -> list[int]:
        n = len(self._servers)
        return [(self._current + k) % n for k in range(n)]

    def _backoff(self, attempt: int) -> None:
        pause = REQUEST_BACKOFF.delay(self.retry_delay, attempt)
        if pause > 0:
            time.sleep(pause)

    # ------------------------------------------------------------------------ queue
    def to(self, queue: Any) -> RemoteModel:
        """Run :meth:`forward` and :meth:`forward_async` in ``queue``'s order (after the work that
        produces the inputs); the request itself runs on the host. As :meth:`Model.to`: binds
        the queue for the calling thread, and as the default of other threads."""
        if queue is not None and not hasattr(queue, "enqueue_host"):
            raise ArgumentTypeError(f"to() takes a pk.Queue (or None), got {type(queue).__name__}")
        self._local.queue = queue
        self._queue = queue
        return self

    @property
    def queue(self) -> Any:
        """The queue bound for this thread (else the default one)."""
        return getattr(self._local, "queue", None) or self._queue

    def _pick_queue(self, queue: Any) -> Any:
        if queue is not None and not hasattr(queue, "enqueue_host"):
            raise ArgumentTypeError(f"queue must be a pk.Queue (or None: the bound one), got {type(queue).__name__}")
        return queue if queue is not None else self.queue

    # ------------------------------------------------------------------------ checks
    def check(self, metadata: Any) -> dict[str, dict[str, str]]:
        """Check a ModelMetadata's blocks against the model on the server (clear errors) and
        return how they map to the server's tensors: ``{"inputs": {block: tensor}, "outputs":
        {block: tensor}}``.

        Blocks named after the model's tensors map by name (output blocks may be a subset).
        When no block name is a tensor name and the counts match, the blocks map to the
        tensors in order, as a local :class:`inference.Model` takes them. A partial name match
        is an error, never a silent mix of the two."""
        refuse_grouped_rows(metadata)
        info = self.model_info
        key = (id(info), signature(metadata))
        known = self._checked.get(key)
        if known is None or known[0] is not info:
            known = self._checked[key] = (info, check_metadata(metadata, info, self.model_name))
        return known[1]

    def _limit(self, metadata: Any = None) -> int:
        """Rows per request: the smallest of server, client and metadata limits (0: no split)."""
        info = self.model_info
        if not info.batching:
            return 0
        limits = [info.max_batch_size]
        if self.max_batch_size:
            limits.append(int(self.max_batch_size))
        return min(limits)

    # ------------------------------------------------------------------------ public forward
    def forward(self, metadata: Any, queue: Any = None) -> None:
        """Send the input blocks, write the outputs into the output collection.

        With a queue (``queue=`` or :meth:`to`), enqueued in queue order (the caller returns at
        once on a non-blocking queue; errors surface at the queue's next ``wait()``); without
        one, blocks.
        """
        self.forward_many([metadata], queue)

    def forward_many(self, metadatas: Sequence[Any], queue: Any = None) -> None:
        """Ragged batching: several events' blocks concatenated into one request (split over the
        batch limit), each event's outputs written into its own collection."""
        mds = self._as_list(metadatas)
        q = self._pick_queue(queue)
        if q is not None:
            q.enqueue_host(lambda: self._forward_now(mds))
        else:
            self._forward_now(mds)

    def forward_async(self, metadata: Any, queue: Any = None) -> RemoteFuture:
        """Start the request and return at once with a :class:`RemoteFuture` (wait on it, or
        ``q.wait_for(fut.event)`` to chain it into a queue). With a queue, the inputs are read
        in queue order."""
        return self.forward_many_async([metadata], queue)

    def forward_many_async(self, metadatas: Sequence[Any], queue: Any = None) -> RemoteFuture:
        """:meth:`forward_many` without waiting: one future for all the events."""
        mds = self._as_list(metadatas)
        fut = RemoteFuture()
        start = lambda: self._start(mds, fut)  # noqa: E731
        q = self._pick_queue(queue)
        if q is not None:
            q.enqueue_host(start)
        else:
            start()
        return fut

    def __call__(self, metadata: Any, queue: Any = None) -> None:
        self.forward(metadata, queue)

    # ------------------------------------------------------------------------ arrays API
    def infer(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One request from numpy arrays (batch first); returns the named outputs (all by default)."""
        arrays, specs = self._array_job(inputs, outputs)
        return self._run_sync(arrays, specs, [])

    def infer_async(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> RemoteFuture:
        """:meth:`infer` without waiting; ``future.result()`` returns the outputs."""
        arrays, specs = self._array_job(inputs, outputs)
        fut = RemoteFuture()
        self._launch(arrays, specs, lambda res, err: fut.finish(res, err))
        return fut

    def _array_job(
        self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None
    ) -> tuple[dict[str, np.ndarray], OutputSpecs]:
        info = self.model_info
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        unknown = [k for k in arrays if info.input(k) is None]
        if unknown:
            raise MetadataMismatch(
                f"input(s) {unknown} are not inputs of model {self.model_name!r}; "
                f"its inputs are {[t.name for t in info.inputs]}"
            )
        for k, a in arrays.items():
            check_block(info.input(k), k, a.dtype, a.shape, "input")  # type: ignore[arg-type]
        n = _batching.batch_size(arrays) if info.batching else 0
        names = list(outputs) if outputs is not None else [t.name for t in info.outputs]
        specs: OutputSpecs = {}
        for name in names:
            spec = info.output(name)
            if spec is None:
                raise MetadataMismatch(
                    f"{name!r} is not an output of model {self.model_name!r}; "
                    f"its outputs are {[t.name for t in info.outputs]}"
                )
            shape = tuple(n if i == 0 and info.batching else max(d, 0) for i, d in enumerate(spec.shape))
            specs[name] = (shape, spec.dtype)
        return arrays, specs

    def request(self, inputs: Mapping[str, np.ndarray], outputs: OutputSpecs) -> dict[str, np.ndarray]:
        """One blocking request from tensors named after the server's, with the expected output
        shapes and dtypes ``{name: (shape, dtype)}`` (exact shapes size shared-memory slots);
        balanced, retried and failed over like :meth:`forward`."""
        self._counters.add(events=1)
        return self._run_sync(_own(inputs), outputs, [])

    def request_async(
        self, inputs: Mapping[str, np.ndarray], outputs: OutputSpecs, done: Callable[[Any, BaseException | None], None]
    ) -> None:
        """:meth:`request` without waiting (in this client's ``mode``): ``done(outputs, error)``
        runs once, on a worker or gRPC thread."""
        self._counters.add(events=1)
        if self.mode == "async" and self.protocol == "grpc":
            self._launch(_own(inputs), outputs, done)
            return

        def work() -> None:
            try:
                out = self._run_sync(_own(inputs), outputs, [])
            except BaseException as exc:  # noqa: BLE001 - handed to done
                done(None, exc)
                return
            done(out, None)

        self._executor().submit(work)

    # ------------------------------------------------------------------------ job steps
    @staticmethod
    def _as_list(metadatas: Sequence[Any]) -> list[Any]:
        mds = list(metadatas)
        if not mds:
            raise ArgumentError("forward_many needs at least one ModelMetadata; pass a list of them, one per event")
        for md in mds:
            if not (hasattr(md, "inputs") and hasattr(md, "outputs")):
                raise ArgumentTypeError(
                    f"forward_many takes ModelMetadata(inputs, outputs) objects, got {type(md).__name__}"
                )
        return mds

    def _gather(self, mds: list[Any], copy: bool) -> tuple[dict[str, np.ndarray], OutputSpecs, list[int]]:
        """The request's inputs (events concatenated), expected outputs, rows per event; all
        named after the server's tensors."""
        maps = [self.check(md) for md in mds]
        per_event = [{m["inputs"][n]: md.inputs.numpy(n) for n in md.inputs.block_names} for md, m in zip(mds, maps)]
        if len(per_event) == 1:
            inputs, sizes = per_event[0], [_batching.batch_size(per_event[0])]
            if copy:
                inputs = {n: np.array(a, copy=True) for n, a in inputs.items()}
        else:
            if not self.model_info.batching:
                raise MetadataMismatch(
                    f"model {self.model_name!r} does not batch (max_batch_size 0): "
                    "send its events one by one, not with forward_many"
                )
            inputs, sizes = _batching.concatenate(per_event)
        total = sum(sizes)
        first, out_map = mds[0].outputs, maps[0]["outputs"]
        specs: OutputSpecs = {}
        for n in first.block_names:
            b = first.block(n)
            specs[out_map[n]] = ((total, *b.shape[1:]), np.dtype(b.dtype))
        for md, m in zip(mds[1:], maps[1:]):
            if md.outputs.block_names != first.block_names or m["outputs"] != out_map:
                raise ArgumentError(
                    f"forward_many: every event needs the same output blocks; got "
                    f"{md.outputs.block_names} and {first.block_names}: declare each event's outputs alike"
                )
        self._counters.add(events=len(mds))
        return inputs, specs, sizes

    def _deliver(self, mds: list[Any], outputs: dict[str, np.ndarray], sizes: list[int]) -> dict[str, np.ndarray]:
        """Write the outputs (named after the server's tensors) into their blocks: every event
        validated first, so a mismatch writes nothing."""
        out_map = self.check(mds[0])["outputs"]  # cached: the same for every event
        outputs = {block: outputs[tensor] for block, tensor in out_map.items()}
        parts = [outputs] if len(mds) == 1 else _batching.split(outputs, sizes)
        checked = [md.outputs.check_outputs(p, cast=getattr(md, "cast_outputs", False)) for md, p in zip(mds, parts)]
        for md, c in zip(mds, checked):
            md.outputs.write_checked(c, None)
        return outputs

    def _forward_now(self, mds: list[Any]) -> dict[str, np.ndarray]:
        inputs, specs, sizes = self._gather(mds, copy=False)
        out = self._run_sync(inputs, specs, sizes)
        return self._deliver(mds, out, sizes)  # by block name

    def _start(self, mds: list[Any], fut: RemoteFuture) -> None:
        """Begin an asynchronous job in the configured mode; errors go to ``fut``."""
        try:
            if self.mode == "sync":
                fut.finish(self._forward_now(mds), None)
                return
            if self.mode == "pseudo_async" or self.protocol != "grpc":
                inputs, specs, sizes = self._gather(mds, copy=True)

                def work() -> None:
                    try:
                        out = self._deliver(mds, self._run_sync(inputs, specs, sizes), sizes)
                    except BaseException as exc:  # noqa: BLE001 - handed to the future
                        fut.finish(None, exc)
                        return
                    fut.finish(out, None)

                self._executor().submit(work)
                return
            # a copy: a retry re-sends the inputs after the queue may have moved on
            inputs, specs, sizes = self._gather(mds, copy=True)

            def done(out: dict[str, np.ndarray] | None, err: BaseException | None) -> None:
                if err is None:
                    try:
                        out = self._deliver(mds, out, sizes)  # type: ignore[arg-type]
                    except BaseException as exc:  # noqa: BLE001
                        err = exc
                fut.finish(out if err is None else None, err)

            self._launch(inputs, specs, done)
        except BaseException as exc:  # noqa: BLE001 - a bad request fails its future
            fut.finish(None, exc)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="alpyka-remote")
            return self._pool

    # ------------------------------------------------------------------------ statistics
    def server_statistics(self) -> ServerStatistics:
        """The current server's counters for this model (Triton ``ModelStatistics``)."""
        return ServerStatistics.from_triton(self.server.transport.statistics(self.model_name))

    def server_counters(self) -> dict[str, ClientStatistics]:
        """Per server of the list: what this client sent there (requests, failures, bytes...)."""
        return {srv.url: srv.counters.snapshot() for srv in self._servers}

    def statistics(self) -> RemoteStatistics:
        """Client counters and the current server's counters for this model; the client's stay
        readable when the server is gone (``server`` is then None, ``server_error`` says why)."""
        client = self._counters.snapshot()
        try:
            return RemoteStatistics(self.url, self.model_name, client, self.server_statistics())
        except RemoteError as exc:
            return RemoteStatistics(self.url, self.model_name, client, None, f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release shared memory, close connections, stop the fallback server (if started)."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for srv in self._servers:
            srv.close()
        if self._fallback_server is not None:
            self._fallback_server.stop()

    def __enter__(self) -> RemoteModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<RemoteModel {self.model_name!r} @ {self.url} ({self.protocol}, {self.mode}, "
            f"{len(self._servers)} server(s))>"
        )


def _own(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A dict of the request's tensors the client may change, keeping the request's parameters
    (a :class:`~inference.remote._transport.RequestInputs`)."""
    out = RequestInputs(inputs)
    out.parameters = getattr(inputs, "parameters", None)
    return out
