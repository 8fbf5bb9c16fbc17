"""How a RemoteModel's requests travel: chunks over the batch limit, attempts on the server list
with bounded retries, shared memory leases, client counters (mixed into :class:`RemoteModel`)."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _batching
from ._errors import BatchSplitWarning, ModelNotFound, RemoteError, RemoteTimeout, ServerUnavailable
from ._servers import Server, final_error
from ._transport import is_retryable

OutputSpecs = dict[str, tuple[tuple[int, ...], np.dtype]]
#: how long a server that went away is tried last by the balancing (seconds)
DOWN_S = 2.0


@dataclass(frozen=True)
class Backoff:
    """A retry policy's pauses: ``first * 2**attempt`` seconds, at most ``cap``; ``idle`` when
    ``first`` is 0 (no doubling asked for)."""

    cap: float
    idle: float = 0.0

    def delay(self, first: float, attempt: int) -> float:
        """The pause before retry ``attempt + 1`` (``attempt`` counts from 0)."""
        return min(first * (2**attempt), self.cap) if first > 0 else self.idle


#: between rounds of ``connect``'s readiness checks (it also waits for servers still loading)
CONNECT_BACKOFF = Backoff(cap=0.5, idle=0.05)
#: between attempts of one request on a server (``retries``)
REQUEST_BACKOFF = Backoff(cap=2.0)
Done = Callable[["dict[str, np.ndarray] | None", "BaseException | None"], None]


class RequestsMixin:
    """Request machinery; the host class provides the attributes set in ``RemoteModel.__init__``."""

    _servers: list[Server]
    _current: int
    _plan_lock: threading.Lock
    _split_warned = False  # a BatchSplitWarning was given (once per client)
    retries: int
    retry_delay: float
    shared_memory: str | None
    model_name: str

    # ------------------------------------------------------------------------ requests
    def _chunks(self, inputs: dict[str, np.ndarray], specs: OutputSpecs):
        limit = self._limit()
        n = _batching.batch_size(inputs) if limit else 0
        if limit and n > limit and not self._split_warned:
            self._split_warned = True
            warnings.warn(
                f"RemoteModel {self.model_name!r}: a forward of {n} rows went out as {-(-n // limit)} requests "
                f"(batch limit {limit}: the smaller of the server's max_batch_size and the client's); rows are "
                "cheap and requests are not: serve the model with a larger --max-batch-size (the default takes "
                "as many rows as fit in 32 MiB). Said once per client.",
                BatchSplitWarning,
                stacklevel=4,
            )
        for start, stop in _batching.chunks(n, limit):
            if limit and (start, stop) != (0, n):
                yield (
                    {k: a[start:stop] for k, a in inputs.items()},
                    {k: ((stop - start, *s[1:]), d) for k, (s, d) in specs.items()},
                )
            else:
                yield inputs, specs

    @staticmethod
    def _join(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}

    def _no_rows(self, inputs: dict[str, np.ndarray], specs: OutputSpecs) -> dict[str, np.ndarray] | None:
        """The outputs of a request with no rows in and none out (an event with no candidates),
        made here: Triton refuses empty tensors, and there is nothing to compute. None otherwise
        (rows to send, outputs expected out of no inputs)."""
        if not inputs or any(a.ndim == 0 or a.shape[0] != 0 for a in inputs.values()):
            return None
        if any(not shape or shape[0] != 0 for shape, _ in specs.values()):
            return None  # rows expected out of none in (a pipeline's own rule): the server decides
        return {k: np.empty(shape, dtype) for k, (shape, dtype) in specs.items()}

    def _run_sync(self, inputs: dict[str, np.ndarray], specs: OutputSpecs, sizes: list[int]) -> dict[str, np.ndarray]:
        empty = self._no_rows(inputs, specs)
        if empty is not None:
            return empty
        return self._join([self._request_sync(i, s) for i, s in self._chunks(inputs, specs)])

    def _launch(self, inputs: dict[str, np.ndarray], specs: OutputSpecs, done: Done) -> None:
        """All chunks in flight at once; ``done`` once every chunk answered (or one failed)."""
        empty = self._no_rows(inputs, specs)
        if empty is not None:
            done(empty, None)
            return
        chunks = list(self._chunks(inputs, specs))
        results: list[Any] = [None] * len(chunks)
        state = {"left": len(chunks), "failed": False}
        lock = threading.Lock()

        def one_done(i: int, out: Any, err: BaseException | None) -> None:
            with lock:
                if state["failed"]:
                    return
                if err is not None:
                    state["failed"] = True
                else:
                    results[i] = out
                    state["left"] -= 1
                finished = err is not None or state["left"] == 0
            if finished:
                if err is not None:
                    done(None, err)
                else:
                    try:
                        joined = self._join(results)
                    except BaseException as exc:  # noqa: BLE001
                        done(None, exc)
                        return
                    done(joined, None)

        for i, (ci, cs) in enumerate(chunks):
            self._request_async(ci, cs, lambda out, err, i=i: one_done(i, out, err))

    def _attempt_plan(self) -> list[tuple[int, int]]:
        """``(server, attempt)`` pairs in the order to try; the first server is counted as busy
        at once (its ``begin``), so requests that choose at the same moment from several threads
        see each other and spread, instead of all taking the server that was idle. The first
        attempt's ``_send`` is given ``reserved=True``."""
        with self._plan_lock:
            plan = [(idx, a) for idx in self._balanced_order() for a in range(self.retries + 1)]
            if plan:
                self._servers[plan[0][0]].begin()
        return plan

    def _balanced_order(self) -> list[int]:
        """Servers to try, best first: those not marked down, fewest requests in flight (least
        outstanding requests), then the one in use now (so sequential requests stay on one
        server), then list order from it. A server that went away counts as down for
        ``DOWN_S`` seconds: tried last, not skipped (it may be the only one)."""
        order = self._order()
        if len(order) == 1:
            return order
        now = time.monotonic()
        rank = {idx: k for k, idx in enumerate(order)}
        return sorted(order, key=lambda i: (self._servers[i].down_until > now, self._servers[i].outstanding, rank[i]))

    def _use_shm(self, srv: Server) -> bool:
        if self.shared_memory is None or srv.url in self._shm_off:
            return False
        return self.shared_memory == "system" or srv.is_local

    def _send(
        self,
        srv: Server,
        inputs: dict[str, np.ndarray],
        specs: OutputSpecs,
        callback: Done | None,
        reserved: bool = False,
    ) -> Any:
        """One attempt on one server (sync when ``callback`` is None); ``reserved``: the plan
        already counted it as in flight (:meth:`_attempt_plan`)."""
        lease = None
        try:
            info = srv.connect()
            if not srv.validated:
                self._validate_server(srv, info)
                srv.validated = True
            if self._use_shm(srv):
                try:
                    lease = srv.shm_pool().lease(inputs, specs)
                except RemoteError as e:
                    if self.shared_memory == "system" or is_retryable(e):
                        raise
                    self._shm_off[srv.url] = str(e)  # auto: fall back to bytes in the request
        except BaseException:
            if reserved:
                srv.end()
            raise
        sent = 0 if lease is not None else sum(a.nbytes for a in inputs.values())
        t0 = time.perf_counter()
        model = self.model_name

        def account(out: dict[str, np.ndarray]) -> None:
            got = 0 if lease is not None else sum(a.nbytes for a in out.values())
            delta = dict(
                requests=1,
                bytes_sent=sent,
                bytes_received=got,
                latency_s=time.perf_counter() - t0,
                shm_requests=1 if lease is not None else 0,
            )
            self._counters.add(**delta)
            srv.counters.add(**delta)

        if not reserved:
            srv.begin()
        if callback is None:
            try:
                out = srv.transport.infer(model, inputs, specs, shm=lease)
            except BaseException:
                srv.end()
                if lease is not None:
                    lease.release(failed=True)
                raise
            srv.end()
            if lease is not None:
                lease.release()
            account(out)
            return out

        def finished(out: Any, err: BaseException | None) -> None:
            srv.end()
            if lease is not None:
                lease.release(failed=err is not None)
            if err is None:
                account(out)
            callback(out, err)

        try:
            srv.transport.async_infer(model, inputs, specs, finished, shm=lease)
        except BaseException:
            srv.end()
            if lease is not None:
                lease.release(failed=True)
            raise
        return None

    def _validate_server(self, srv: Server, info: Any) -> None:
        """Hook: check a server's model description before its first request (RemoteModel:
        the optional ``validate`` callable)."""

    def _note_failure(self, srv: Server, err: BaseException) -> None:
        timeouts = 1 if isinstance(err, RemoteTimeout) else 0
        self._counters.add(timeouts=timeouts)
        srv.counters.add(timeouts=timeouts, failures=1)
        if isinstance(err, ServerUnavailable):
            srv.down_until = time.monotonic() + DOWN_S
            srv.reset()

    def _request_sync(self, inputs: dict[str, np.ndarray], specs: OutputSpecs) -> dict[str, np.ndarray]:
        errors: list[tuple[str, BaseException]] = []
        skip: set[int] = set()
        for k, (idx, attempt) in enumerate(self._attempt_plan()):
            if idx in skip:
                continue
            srv = self._servers[idx]
            if attempt:
                self._counters.add(retries=1)
                self._backoff(attempt - 1)
            try:
                out = self._send(srv, inputs, specs, None, reserved=k == 0)
            except RemoteError as e:
                errors.append((srv.url, e))
                self._note_failure(srv, e)
                if isinstance(e, ModelNotFound):
                    skip.add(idx)
                elif not is_retryable(e):
                    self._counters.add(failures=1)
                    raise
                continue
            self._switch_to(idx, errors)
            return out
        self._counters.add(failures=1)
        raise final_error(errors, f"request to model {self.model_name!r}")

    def _request_async(self, inputs: dict[str, np.ndarray], specs: OutputSpecs, done: Done) -> None:
        plan = iter(self._attempt_plan())
        first = [True]  # the first attempt's server is reserved by the plan
        errors: list[tuple[str, BaseException]] = []
        skip: set[int] = set()

        def attempt() -> None:
            for idx, n in plan:
                if idx in skip:
                    continue
                srv = self._servers[idx]
                if n:
                    self._counters.add(retries=1)
                    if errors:
                        self._backoff(n - 1)

                def finished(out: Any, err: BaseException | None, idx: int = idx, srv: Server = srv) -> None:
                    if err is None:
                        self._switch_to(idx, errors)
                        done(out, None)
                    elif failed(idx, srv, err):
                        self._executor().submit(attempt)  # retry off the gRPC callback thread

                reserved, first[0] = first[0], False
                try:
                    self._send(srv, inputs, specs, finished, reserved=reserved)
                    return
                except RemoteError as e:
                    if not failed(idx, srv, e):
                        return
                except BaseException as exc:  # noqa: BLE001 - never leave the future pending
                    self._counters.add(failures=1)
                    done(None, exc)
                    return
            self._counters.add(failures=1)
            done(None, final_error(errors, f"request to model {self.model_name!r}"))

        def failed(idx: int, srv: Server, err: BaseException) -> bool:
            """Record ``err``; True when another attempt may follow."""
            errors.append((srv.url, err))
            self._note_failure(srv, err)
            if isinstance(err, ModelNotFound):
                skip.add(idx)
                return True
            if not is_retryable(err):
                self._counters.add(failures=1)
                done(None, err)
                return False
            return True

        attempt()

    def _switch_to(self, idx: int, errors: list[tuple[str, BaseException]]) -> None:
        """A request succeeded on server ``idx``: a failover when it failed on another server
        first (balancing over healthy servers is not one)."""
        url = self._servers[idx].url
        if any(u != url for u, _ in errors):
            self._counters.add(failovers=1)
        self._current = idx
