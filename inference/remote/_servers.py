"""The servers a RemoteModel may use: connection checks, model description, shared memory."""

from __future__ import annotations

import threading
from typing import Any

from ._errors import ModelNotFound, ModelNotReady, RemoteError, RemoteTimeout, ServerUnavailable
from ._shm import ShmPool, is_local_url
from ._statistics import _ClientCounters
from ._transport import ModelInfo, Transport


class Server:
    """One entry of the server list: a transport, and once connected the model's description."""

    def __init__(
        self, url: str, protocol: str, timeout: float | None, model: str, version: str = "", token: str | None = None
    ) -> None:
        self.url = url.split("://", 1)[-1].rstrip("/")
        self.model = model
        self.version = version
        self.transport = Transport(self.url, protocol, timeout, token)
        self.info: ModelInfo | None = None
        self._shm: ShmPool | None = None
        self._lock = threading.Lock()
        # balancing: requests in flight here, and until when it counts as down (monotonic s)
        self.outstanding = 0
        self.down_until = 0.0
        self._count_lock = threading.Lock()  # not _lock: connect() holds that during network calls
        self.validated = False  # the client's own check of this server's model passed
        self.counters = _ClientCounters()  # what the client sent here (per-server statistics)

    @property
    def is_local(self) -> bool:
        return is_local_url(self.url)

    def connect(self) -> ModelInfo:
        """One check: server live and ready, model ready; then read the model's metadata and
        config. Raises :class:`ServerUnavailable` (no answer: retry a bounded number of times),
        :class:`ModelNotReady` (it answers but is not ready yet: worth waiting for) or
        :class:`ModelNotFound` (the server lists its models and this one is not among them)."""
        with self._lock:
            if self.info is not None:
                return self.info
            t = self.transport
            if not t.is_ready():
                if t.last_error.startswith("the server reports"):  # it answers: starting up
                    err0 = ModelNotReady(f"server {self.url} is live but not ready ({t.last_error})")
                    err0.known = True  # type: ignore[attr-defined]
                    err0.retryable = True  # type: ignore[attr-defined]
                    raise err0
                err = ServerUnavailable(
                    f"server {self.url} is not live/ready: {t.last_error or 'no answer'} (timeout {t.timeout} s)"
                )
                err.retryable = True  # type: ignore[attr-defined]
                raise err
            try:
                ready = t.model_ready(self.model)
            except ModelNotFound:
                ready = False
            if not ready:
                raise self.not_ready_error()
            self.info = t.model_info(self.model)
            return self.info

    def not_ready_error(self, waited: float | None = None) -> RemoteError:
        """Why the model is not ready here: :class:`ModelNotFound` when the server does not have
        it (its repository index lists other models, or ``waited`` seconds passed and no list
        names it), else :class:`ModelNotReady` (loading, or a server that loads models without
        listing them, as PyTriton does)."""
        t = self.transport
        index = t.repository_index()
        loaded = t.loaded_models()
        have = sorted(set(index) | set(loaded))
        state = index.get(self.model, "")
        known = self.model in index or self.model in loaded
        if not known and (index or waited is not None):
            after = f" (waited {waited:g} s for it to load)" if waited is not None else ""
            err: RemoteError = ModelNotFound(
                f"server {self.url} has no ready model {self.model!r}{after}; it has "
                f"{have if have else 'no models (or does not list them)'}"
            )
            err.retryable = False  # type: ignore[attr-defined]
            return err
        what = f"state {state}" if state else ("loaded, not ready" if known else "not listed by the server yet")
        if waited is not None:
            err = ModelNotReady(
                f"model {self.model!r} on server {self.url} never became ready within "
                f"{waited:g} s ({what}); the server has {have if have else 'no models listed'}"
            )
        else:
            err = ModelNotReady(f"model {self.model!r} on server {self.url} is not ready ({what})")
        err.known = known  # type: ignore[attr-defined]
        err.retryable = True  # type: ignore[attr-defined]
        return err

    def begin(self) -> None:
        """A request to this server starts (least-outstanding balancing counts it)."""
        with self._count_lock:
            self.outstanding += 1

    def end(self) -> None:
        """A request to this server finished (answered or failed)."""
        with self._count_lock:
            self.outstanding -= 1

    def reset(self) -> None:
        """Forget the connection (after the server went away); the next use reconnects."""
        with self._lock:
            self.info = None
            self.validated = False
            pool, self._shm = self._shm, None
        if pool is not None:
            try:
                pool.close()
            except Exception:  # noqa: BLE001 - the server is gone
                pass

    def shm_pool(self) -> ShmPool:
        with self._lock:
            if self._shm is None:
                self._shm = ShmPool(self.transport.register_shm, self.transport.unregister_shm)
            return self._shm

    def close(self) -> None:
        self.reset()
        self.transport.close()

    def __repr__(self) -> str:
        state = "connected" if self.info is not None else "not connected"
        return f"<Server {self.url} ({self.transport.protocol}, {state})>"


def summarize(errors: list[tuple[str, BaseException]]) -> str:
    """One line per server: how many attempts failed and the last reason."""
    per: dict[str, list[BaseException]] = {}
    for url, e in errors:
        per.setdefault(url, []).append(e)
    return "; ".join(f"{url}: {len(es)} attempt(s), last: {es[-1]}" for url, es in per.items())


def final_error(errors: list[tuple[str, BaseException]], what: str) -> RemoteError:
    """The error raised once every attempt on every server failed."""
    kinds = {type(e) for _, e in errors}
    text = f"{what} failed after {len(errors)} attempt(s): {summarize(errors)}"
    if kinds == {RemoteTimeout}:
        return RemoteTimeout(text)
    if kinds == {ModelNotFound}:
        return ModelNotFound(text)
    if kinds == {ModelNotReady}:
        return ModelNotReady(text)
    last: Any = errors[-1][1] if errors else None
    if last is not None and not getattr(last, "retryable", True) and not isinstance(last, ModelNotFound):
        return last
    return ServerUnavailable(text)
