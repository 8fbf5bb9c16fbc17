"""One connection to one KServe v2 server (gRPC or HTTP) through tritonclient.

The transport turns tritonclient's calls and exceptions into alpyka's: every call carries the
client's timeout, every failure becomes a :class:`RemoteError` subclass that says whether a retry
can help (``retryable``). Nothing here retries; :mod:`._client` decides.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from portable import ArgumentError

from .._pipeline import PIPELINE_ERROR_MARK
from .._tensor_desc import TensorDesc
from ..serving._access import access_headers, access_token
from ._errors import InferenceFailed, ModelNotFound, RemoteError, RemoteTimeout, ServerUnavailable
from ._shm import ShmLease
from ._tensors import numpy_dtype, triton_dtype

Callback = Callable[["dict[str, np.ndarray] | None", "BaseException | None"], None]


class RequestInputs(dict):
    """A request's input tensors by name, and the KServe request ``parameters`` that travel with
    them (alpyka's pipelines say which collections have no rows there: see _pipeline._wire)."""

    parameters: dict[str, Any] | None = None


def _parameters(inputs: Any) -> dict[str, Any]:
    params = getattr(inputs, "parameters", None)
    return {"parameters": dict(params)} if params else {}


@dataclass
class ModelInfo:
    """What the server says about one model: its tensors, batching and dynamic batching."""

    name: str
    inputs: list[TensorDesc]
    outputs: list[TensorDesc]
    max_batch_size: int
    dynamic_batching: dict[str, Any] = field(default_factory=dict)
    platform: str = ""

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    def input(self, name: str) -> TensorDesc | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorDesc | None:
        return next((t for t in self.outputs if t.name == name), None)


#: gRPC status codes (``StatusCode.X``) and HTTP statuses by what they mean for a request:
#: the server is not reachable now (another server, or later, may answer) ...
_UNAVAILABLE = {"UNAVAILABLE", "CANCELLED", "RESOURCE_EXHAUSTED", "ABORTED", "429", "502", "503"}
#: ... the request ran out of time ...
_TIMEOUT = {"DEADLINE_EXCEEDED", "408", "504"}
#: ... the model is not there ...
_NOT_FOUND = {"NOT_FOUND", "404"}
#: ... the server failed on a valid request (another server may not) ...
_SERVER_FAULT = {"INTERNAL", "UNKNOWN", "DATA_LOSS", "500"}
#: ... the server refuses the client (a restricted endpoint without the access token) ...
_REFUSED = {"PERMISSION_DENIED", "UNAUTHENTICATED", "401", "403"}
# everything else (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, 400, ...):
# the request itself is wrong; no server will take it


def status_code(exc: BaseException) -> str | None:
    """The gRPC status code name (``"INVALID_ARGUMENT"``) or HTTP status (``"400"``) a tritonclient
    exception carries, or None (an exception that did not come from a server's answer)."""
    status = getattr(exc, "status", None)
    text = status() if callable(status) else None
    if not text:
        return None
    text = str(text).strip()
    return text.rsplit(".", 1)[-1].upper() if text.startswith("StatusCode.") else text


def _is_pipeline_failure(exc: BaseException) -> bool:
    """A pipeline's own error: alpyka's pipeline server marks its message with a token of its own
    protocol (Triton and PyTriton wrap it in words of theirs)."""
    return PIPELINE_ERROR_MARK in str(exc)


def classify(exc: BaseException, url: str, timeout: float | None) -> RemoteError:
    """Map a tritonclient / socket exception to a :class:`RemoteError` (``retryable`` set), by
    the gRPC status code or HTTP status of the server's answer, else by the exception's type;
    never by the words of a message (Triton's carry ``[request id: <id_unknown>]``)."""
    if isinstance(exc, RemoteError):
        return exc
    code = status_code(exc)
    detail = str(exc).strip() or type(exc).__name__
    if code is None:
        if isinstance(exc, (TimeoutError, socket.timeout)) or type(exc).__name__ == "Timeout":
            code = "DEADLINE_EXCEEDED"
        elif isinstance(exc, ConnectionRefusedError):
            code = "REFUSED"
        elif isinstance(exc, (ConnectionError, OSError, http.client.HTTPException)):
            code = "UNAVAILABLE"  # HTTPException: geventhttpclient's HTTPConnectionClosed, a server gone mid-request
    if code == "UNAVAILABLE" and "connection refused" in detail.lower():
        code = "REFUSED"  # the same class; only the words differ (say what to check)
    if code in _TIMEOUT:
        err: RemoteError = RemoteTimeout(f"request to {url} timed out after {timeout} s")
        err.retryable = True  # type: ignore[attr-defined]
    elif code == "REFUSED":  # nothing listens there: the server is down (fails fast, no timeout)
        err = ServerUnavailable(f"server {url} is unreachable: connection refused (is the server running?): {detail}")
        err.retryable = True  # type: ignore[attr-defined]
    elif code in _UNAVAILABLE:
        err = ServerUnavailable(f"server {url} is unreachable ({code}): {detail}")
        err.retryable = True  # type: ignore[attr-defined]
    elif code in _NOT_FOUND:
        err = ModelNotFound(f"{url}: {detail}")
        err.retryable = False  # type: ignore[attr-defined]
    else:
        err = InferenceFailed(f"{url}: {detail}")
        # a server's own fault on a valid request may not recur on another server; a pipeline's
        # failure and a bad request are the same everywhere
        err.retryable = code in _SERVER_FAULT and not _is_pipeline_failure(exc)  # type: ignore[attr-defined]
    err.status = status_code(exc) or code  # type: ignore[attr-defined]
    err.__cause__ = exc
    return err


def is_retryable(err: BaseException) -> bool:
    return bool(getattr(err, "retryable", False))


class Transport:
    """A tritonclient client of one server ``url`` (``"host:port"``) for one protocol."""

    def __init__(
        self, url: str, protocol: str = "grpc", timeout: float | None = 10.0, token: str | None = None
    ) -> None:
        if protocol not in ("grpc", "http"):
            raise ArgumentError(f"protocol must be 'grpc' or 'http', got {protocol!r}")
        self.url = url.split("://", 1)[-1].rstrip("/")
        self.protocol = protocol
        self.timeout = timeout
        self._token = token  # the server's access token; None: found when first needed
        self.last_error = ""  # why the last is_ready() said no
        self._local = threading.local()  # HTTP clients are not thread-safe: one per thread
        self._clients: list[Any] = []
        self._lock = threading.Lock()
        if protocol == "grpc":  # tritonclient (optional: the triton extra) loads with the first server
            import tritonclient.grpc as grpcclient

            self._mod = grpcclient
            self._grpc = grpcclient.InferenceServerClient(self.url)
        else:
            import tritonclient.http as httpclient

            self._mod = httpclient

    # ----------------------------------------------------------------------------- plumbing
    def _client(self) -> Any:
        if self.protocol == "grpc":
            return self._grpc
        client = getattr(self._local, "client", None)
        if client is None:
            t = self.timeout if self.timeout is not None else 60.0
            client = self._mod.InferenceServerClient(self.url, connection_timeout=t, network_timeout=t)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        client = self._client()
        if self.protocol == "grpc":
            kwargs.setdefault("client_timeout", self.timeout)
        try:
            return getattr(client, method)(*args, **kwargs)
        except Exception as exc:
            raise classify(exc, self.url, self.timeout) from exc

    def _access(self) -> dict[str, Any]:
        """``headers=`` with the server's access token, for its restricted endpoints (shared
        memory, model repository): the token given, else :func:`inference.serving.access_token`."""
        if self._token is None:
            self._token = access_token(self.url) or ""
        headers = access_headers(self._token, self.protocol)
        return {"headers": headers} if headers else {}

    def close(self) -> None:
        if self.protocol == "grpc":
            self._grpc.close()
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass

    # ----------------------------------------------------------------------------- health
    def is_ready(self) -> bool:
        """Server live and ready (False, not an exception, when it does not answer; then
        ``last_error`` says why)."""
        try:
            self.last_error = ""
            if not self._call("is_server_live"):
                self.last_error = "the server reports it is not live"
                return False
            if not self._call("is_server_ready"):
                self.last_error = "the server reports it is not ready"
                return False
            return True
        except RemoteError as exc:
            self.last_error = str(exc)
            return False

    def model_ready(self, model: str) -> bool:
        return bool(self._call("is_model_ready", model))

    def repository_index(self) -> dict[str, str]:
        """``{name: state}`` from the server's repository index (``{}`` when it lists nothing or
        refuses). A server that loads models through the model-control API with their files in
        the request (PyTriton does) lists nothing here."""
        try:
            index = self._call("get_model_repository_index", **self._as_json(), **self._access())
        except RemoteError:
            return {}
        entries = index.get("models", []) if isinstance(index, dict) else (index or [])
        return {str(e.get("name", "?")): str(e.get("state", "") or "") for e in entries if isinstance(e, dict)}

    def loaded_models(self) -> list[str]:
        """Names of the models the server keeps statistics for (every loaded model; ``[]`` when
        it refuses)."""
        try:
            stats = self._call("get_inference_statistics", "", **self._as_json())
        except RemoteError:
            return []
        entries = stats.get("model_stats", []) if isinstance(stats, dict) else []
        return sorted({str(e.get("name", "?")) for e in entries if isinstance(e, dict)})

    def models(self) -> list[str]:
        """Names of the models the server has: its repository index and its loaded models."""
        return sorted(set(self.repository_index()) | set(self.loaded_models()))

    def _as_json(self) -> dict[str, Any]:
        return {"as_json": True} if self.protocol == "grpc" else {}

    def model_info(self, model: str) -> ModelInfo:
        meta = self._call("get_model_metadata", model, **self._as_json())
        cfg = self._call("get_model_config", model, **self._as_json())
        cfg = cfg.get("config", cfg)
        mbs = int(cfg.get("max_batch_size", 0) or 0)

        def specs(entries: Sequence[dict[str, Any]]) -> list[TensorDesc]:
            return [
                TensorDesc.from_server(e["name"], numpy_dtype(e["datatype"]), e.get("shape", []), mbs > 0)
                for e in entries
            ]

        return ModelInfo(
            model,
            specs(meta.get("inputs", [])),
            specs(meta.get("outputs", [])),
            mbs,
            dict(cfg.get("dynamic_batching", {}) or {}),
            str(meta.get("platform", "")),
        )

    def statistics(self, model: str) -> dict[str, Any]:
        stats = self._call("get_inference_statistics", model, **self._as_json())
        entries = stats.get("model_stats", [])
        return entries[0] if entries else {}

    # ----------------------------------------------------------------------------- shm
    def register_shm(self, name: str, key: str, byte_size: int) -> None:
        """Register a region; a server that refuses for want of its access token raises
        :class:`InferenceFailed` (not retryable) saying how to give the token."""
        try:
            self._call("register_system_shared_memory", name, key, byte_size, **self._access())
        except RemoteError as exc:
            if not self._refused(exc):
                raise
            err = InferenceFailed(
                f"server {self.url} refused to register shared memory ({exc.status}): it needs its access "
                f"token, {'which was wrong' if self._token else 'which was not found'}; pass RemoteModel(..., "
                f"token=server.token) or set ALPYKA_SERVE_TOKEN (a server that this user started with "
                f"serve/alpyka serve on this host is found by itself), or shared_memory=None"
            )
            err.retryable = False  # type: ignore[attr-defined]
            err.status = exc.status  # type: ignore[attr-defined]
            raise err from exc

    def _refused(self, exc: RemoteError) -> bool:
        """Whether ``exc`` is a restricted endpoint's refusal: HTTP 403; over gRPC Triton answers
        UNAVAILABLE, told apart from a server that is down by asking it whether it is live."""
        status = getattr(exc, "status", None)
        if status in _REFUSED:
            return True
        if status != "UNAVAILABLE" or isinstance(exc.__cause__, OSError):
            return False
        try:
            return bool(self._call("is_server_live"))
        except RemoteError:
            return False

    def unregister_shm(self, name: str) -> None:
        self._call("unregister_system_shared_memory", name, **self._access())

    # ----------------------------------------------------------------------------- infer
    def _request(
        self, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]], shm: ShmLease | None
    ) -> tuple[list[Any], list[Any]]:
        mod = self._mod
        ins, outs = [], []
        for name, arr in inputs.items():
            inp = mod.InferInput(name, list(arr.shape), triton_dtype(arr.dtype))
            if shm is not None:
                region, nbytes, offset = shm.put_input(name, arr)
                inp.set_shared_memory(region, nbytes, offset)
            elif self.protocol == "grpc":
                inp.set_data_from_numpy(np.ascontiguousarray(arr))
            else:
                inp.set_data_from_numpy(np.ascontiguousarray(arr), binary_data=True)
            ins.append(inp)
        for name in outputs:
            if self.protocol == "grpc":
                out = mod.InferRequestedOutput(name)
            else:
                out = mod.InferRequestedOutput(name, binary_data=True)
            if shm is not None:
                region, nbytes, offset = shm.output_slot(name)
                out.set_shared_memory(region, nbytes, offset)
            outs.append(out)
        return ins, outs

    @staticmethod
    def _results(
        result: Any, outputs: dict[str, tuple[tuple[int, ...], np.dtype]], shm: ShmLease | None
    ) -> dict[str, np.ndarray]:
        got: dict[str, np.ndarray] = {}
        for name in outputs:
            if shm is not None:
                desc = result.get_output(name)
                if desc is None:
                    raise InferenceFailed(f"the response has no output {name!r}")
                shape = tuple(int(d) for d in (desc.shape if hasattr(desc, "shape") else desc["shape"]))
                got[name] = shm.get_output(name, shape)
            else:
                arr = result.as_numpy(name)
                if arr is None:
                    raise InferenceFailed(f"the response has no output {name!r}")
                # gRPC hands out read-only views of the response bytes; torch wants writable
                got[name] = arr if arr.flags.writeable else arr.copy()
        return got

    def infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: dict[str, tuple[tuple[int, ...], np.dtype]],
        shm: ShmLease | None = None,
    ) -> dict[str, np.ndarray]:
        """One blocking request; ``outputs`` maps requested names to their expected shapes."""
        ins, outs = self._request(inputs, outputs, shm)
        result = self._call("infer", model, ins, outputs=outs, **_parameters(inputs))
        return self._results(result, outputs, shm)

    def async_infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: dict[str, tuple[tuple[int, ...], np.dtype]],
        callback: Callback,
        shm: ShmLease | None = None,
    ) -> None:
        """One non-blocking gRPC request; ``callback(results, error)`` runs on a gRPC thread."""
        if self.protocol != "grpc":
            raise RemoteError("async_infer is gRPC only (HTTP async runs on a worker thread)")
        ins, outs = self._request(inputs, outputs, shm)

        def done(result: Any, error: Any) -> None:
            if error is not None:
                callback(None, classify(error, self.url, self.timeout))
                return
            try:
                got = self._results(result, outputs, shm)
            except BaseException as exc:  # noqa: BLE001 - handed to the callback
                callback(None, classify(exc, self.url, self.timeout))
                return
            callback(got, None)

        try:
            self._grpc.async_infer(model, ins, done, outputs=outs, client_timeout=self.timeout, **_parameters(inputs))
        except Exception as exc:
            raise classify(exc, self.url, self.timeout) from exc
