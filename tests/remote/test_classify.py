"""Remote errors are classified by the gRPC status code or HTTP status of the server's answer
(else by the exception's type), never by the words of its message: Triton's bad-input errors
carry ``[request id: <id_unknown>]``, which once made them "UNKNOWN" and retried everywhere."""

from __future__ import annotations

import pytest

pytest.importorskip("tritonclient", reason="the triton extra: pip install 'alpyka[triton]'")
from tritonclient.utils import InferenceServerException

from inference._pipeline import PIPELINE_ERROR_MARK
from inference.remote._errors import InferenceFailed, ModelNotFound, RemoteTimeout, ServerUnavailable
from inference.remote._transport import classify, is_retryable, status_code

URL = "127.0.0.1:8001"
BAD_INPUT = (
    "[request id: <id_unknown>] unexpected shape for input 'x' for model 'm'. Expected [-1,3], "
    "got [4,2]. UNAVAILABLE and TIMEOUT are only words here"
)


@pytest.mark.parametrize(
    "status, message, kind, retryable",
    [
        ("StatusCode.INVALID_ARGUMENT", BAD_INPUT, InferenceFailed, False),
        ("400", BAD_INPUT, InferenceFailed, False),
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", ServerUnavailable, True),
        ("503", "service unavailable", ServerUnavailable, True),
        ("StatusCode.RESOURCE_EXHAUSTED", "too many requests", ServerUnavailable, True),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", RemoteTimeout, True),
        ("504", "gateway timeout", RemoteTimeout, True),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'm' is not found", ModelNotFound, False),
        ("404", "Request for unknown model", ModelNotFound, False),
        ("StatusCode.INTERNAL", "the backend crashed", InferenceFailed, True),
        ("500", "the backend crashed", InferenceFailed, True),
        ("StatusCode.INTERNAL", f"{PIPELINE_ERROR_MARK} ValueError: bad rows", InferenceFailed, False),
        ("StatusCode.UNIMPLEMENTED", "not implemented", InferenceFailed, False),
    ],
)
def test_a_servers_answer_is_classified_by_its_status(status, message, kind, retryable):
    exc = InferenceServerException(message, status=status)
    err = classify(exc, URL, 5.0)
    assert type(err) is kind, (status, err)
    assert is_retryable(err) is retryable
    assert err.__cause__ is exc
    assert err.status == status_code(exc)


@pytest.mark.parametrize(
    "exc, kind, words",
    [
        (ConnectionRefusedError(111, "Connection refused"), ServerUnavailable, "connection refused"),
        (ConnectionResetError(104, "reset by peer"), ServerUnavailable, "unreachable"),
        (TimeoutError("timed out"), RemoteTimeout, "timed out after 5.0 s"),
        (TimeoutError(), RemoteTimeout, "timed out after 5.0 s"),
        (__import__("http.client").client.RemoteDisconnected("closed"), ServerUnavailable, "unreachable"),
    ],
)
def test_an_exception_without_an_answer_is_classified_by_its_type(exc, kind, words):
    err = classify(exc, URL, 5.0)
    assert type(err) is kind and words in str(err) and is_retryable(err)


def test_an_http_server_that_closes_mid_request_is_unavailable():
    """geventhttpclient's HTTPConnectionClosed (an http.client.HTTPException, not an OSError)."""
    closed = pytest.importorskip("geventhttpclient.response").HTTPConnectionClosed("connection closed.")
    err = classify(closed, URL, 5.0)
    assert type(err) is ServerUnavailable and is_retryable(err)


def test_a_message_without_status_is_not_read_for_keywords():
    err = classify(InferenceServerException("UNAVAILABLE DEADLINE NOT_FOUND UNKNOWN"), URL, 5.0)
    assert type(err) is InferenceFailed and not is_retryable(err)
    err = classify(RuntimeError("connection reset: UNAVAILABLE"), URL, 5.0)
    assert type(err) is InferenceFailed and not is_retryable(err)


# Every status of docs/remote.md's table (and the rest of gRPC's codes, and common HTTP ones),
# each with the class and the retry the table gives it.
_UNAVAILABLE = (ServerUnavailable, True)
_TIMEOUT = (RemoteTimeout, True)
_NOT_FOUND = (ModelNotFound, False)
_SERVER_FAULT = (InferenceFailed, True)
_BAD_REQUEST = (InferenceFailed, False)
EVERY_STATUS = {
    "StatusCode.UNAVAILABLE": _UNAVAILABLE,
    "StatusCode.CANCELLED": _UNAVAILABLE,
    "StatusCode.RESOURCE_EXHAUSTED": _UNAVAILABLE,
    "StatusCode.ABORTED": _UNAVAILABLE,
    "429": _UNAVAILABLE,
    "502": _UNAVAILABLE,
    "503": _UNAVAILABLE,
    "StatusCode.DEADLINE_EXCEEDED": _TIMEOUT,
    "408": _TIMEOUT,
    "504": _TIMEOUT,
    "StatusCode.NOT_FOUND": _NOT_FOUND,
    "404": _NOT_FOUND,
    "StatusCode.INTERNAL": _SERVER_FAULT,
    "StatusCode.UNKNOWN": _SERVER_FAULT,
    "StatusCode.DATA_LOSS": _SERVER_FAULT,
    "500": _SERVER_FAULT,
    "StatusCode.INVALID_ARGUMENT": _BAD_REQUEST,
    "StatusCode.FAILED_PRECONDITION": _BAD_REQUEST,
    "StatusCode.UNIMPLEMENTED": _BAD_REQUEST,
    "400": _BAD_REQUEST,
    # beyond the table's examples: what no server will take either
    "StatusCode.OUT_OF_RANGE": _BAD_REQUEST,
    "StatusCode.ALREADY_EXISTS": _BAD_REQUEST,
    "StatusCode.PERMISSION_DENIED": _BAD_REQUEST,
    "StatusCode.UNAUTHENTICATED": _BAD_REQUEST,
    "401": _BAD_REQUEST,
    "403": _BAD_REQUEST,
    "409": _BAD_REQUEST,
    "501": _BAD_REQUEST,
}


def test_the_table_names_every_grpc_code():
    grpc = pytest.importorskip("grpc")
    names = {f"StatusCode.{c.name}" for c in grpc.StatusCode if c.name != "OK"}
    assert names <= set(EVERY_STATUS), sorted(names - set(EVERY_STATUS))


@pytest.mark.parametrize("status", sorted(EVERY_STATUS))
def test_every_status_has_its_class(status):
    kind, retryable = EVERY_STATUS[status]
    exc = InferenceServerException("words that name no status", status=status)
    err = classify(exc, URL, 5.0)
    assert type(err) is kind, (status, err)
    assert is_retryable(err) is retryable, status
    assert err.status == status.removeprefix("StatusCode.") and err.__cause__ is exc
    if kind is InferenceFailed and retryable:  # a pipeline's own failure fails the same everywhere
        marked = classify(InferenceServerException(f"{PIPELINE_ERROR_MARK} ValueError", status=status), URL, 5.0)
        assert type(marked) is InferenceFailed and not is_retryable(marked), status
