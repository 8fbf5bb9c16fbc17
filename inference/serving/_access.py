"""Who may use which of a served Triton's endpoints, and how alpyka's clients get the access token.

Triton is started (through PyTriton's ``TritonSecurityConfig``) with ``--http-restricted-api`` and
``--grpc-restricted-protocol`` for :func:`restricted_endpoints`: a request to one of those is
refused unless it carries the run's token in header ``triton-access-token`` (gRPC: metadata key
``triton-grpc-protocol-triton-access-token``). The rest (inference, health, metadata, model
config, statistics) is open to any client of the loopback port. A web page cannot use the
restricted endpoints: a custom header makes the browser ask first (a CORS preflight) and
Triton's answer allows nothing; nor can it read the token.

The token is random per server unless ``serve(token=...)`` or ``$ALPYKA_SERVE_TOKEN`` names one.
:func:`access_token` finds it for a client: a server this process started, else one this user
started on this host (``access.json`` in its work directory, mode 0600 in a 0700 directory),
else ``$ALPYKA_SERVE_TOKEN``.
"""

from __future__ import annotations

import os

from ._leftovers import find_token, loopback_port

#: endpoints PyTriton protects by default that alpyka's clients must reach without the token
OPEN_ENDPOINTS = ("statistics",)  # RemoteModel.server_statistics(), the client's model list
#: endpoints that need the token however PyTriton's defaults change
MUST_RESTRICT = ("model-repository", "shared-memory", "trace", "logging")
#: the header Triton is started with for the restricted endpoints (PyTriton's name)
ACCESS_HEADER = "triton-access-token"
#: the environment variable with an access token: serve uses it instead of a random one, and a
#: client uses it for a server whose token it cannot find otherwise
TOKEN_ENV = "ALPYKA_SERVE_TOKEN"
#: ``{loopback port: token}`` of the servers this process started and has not stopped
_tokens: dict[int, str] = {}


def restricted_endpoints() -> list[str]:
    """PyTriton's protected endpoints less :data:`OPEN_ENDPOINTS`, plus :data:`MUST_RESTRICT`."""
    try:
        from pytriton.triton import DEFAULT_PROTECTED_ENDPOINTS as defaults
    except ImportError:  # a PyTriton without defaults
        defaults = []
    chosen = [e for e in defaults if e not in OPEN_ENDPOINTS]
    return chosen + [e for e in MUST_RESTRICT if e not in chosen]


def access_headers(token: str | None, protocol: str) -> dict[str, str]:
    """The request header that carries ``token`` (``{}`` without one) for ``"http"`` or ``"grpc"``."""
    if not token:
        return {}
    return {ACCESS_HEADER if protocol == "http" else f"triton-grpc-protocol-{ACCESS_HEADER}": token}


def remember(ports: list[int], token: str) -> None:
    """The server on ``ports`` that this process started has ``token``."""
    _tokens.update({p: token for p in ports})


def forget(ports: list[int], token: str) -> None:
    """That server stopped."""
    for p in ports:
        if _tokens.get(p) == token:
            del _tokens[p]


def access_token(url: str) -> str | None:
    """The access token of the server at ``url`` (see the module's docstring), or None."""
    port = loopback_port(url)
    if port is not None:
        token = _tokens.get(port) or find_token(url)
        if token:
            return token
    return os.environ.get(TOKEN_ENV) or None
