"""Who may use which of a served Triton's endpoints, and how alpyka's clients get the access token.

Triton is started (through PyTriton's ``TritonSecurityConfig``) with ``--http-restricted-api`` and
``--grpc-restricted-protocol`` for :func:`restricted_endpoints`: a request to one of those is
refused unless it carries the run's token in header ``triton-access-token`` (gRPC: metadata key
``triton-grpc-protocol-triton-access-token``). The rest (inference, health, metadata, model
config, statistics) is open to any client of the loopback port. A web page cannot use the
restricted endpoints: a custom header makes the browser ask first (a CORS preflight) and
Triton's answer allows nothing; nor can it read the token. The token is not on ``tritonserver``'s
command line, which every local user can read (:mod:`._private_args`).

The token is random per server unless ``serve(token=...)`` or ``$ALPYKA_SERVE_TOKEN`` names one
(:func:`check_token`: at least 16 letters, digits or ``-._~``).
:func:`access_token` finds it for a client: a server this process started, else one this user
started on this host (``access.json`` in its work directory, mode 0600 in a 0700 directory),
else ``$ALPYKA_SERVE_TOKEN``.
"""

from __future__ import annotations

import os
import re

from portable import AlpykaError

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
#: the fewest characters a token may have (a random one has 43)
MIN_TOKEN_LENGTH = 16
#: what a token may be made of: letters, digits and ``-._~`` (no whitespace, nothing Triton's
#: ``<endpoints>:<header>=<token>`` option or an HTTP header would read differently)
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")
#: ``{loopback port: token}`` of the servers this process started and has not stopped
_tokens: dict[int, str] = {}


class TokenError(AlpykaError, ValueError):
    """An access token that serve refuses (the message says what a token must be)."""


def check_token(token: str, source: str = "token") -> str:
    """``token`` if it is at least :data:`MIN_TOKEN_LENGTH` letters, digits or ``-._~``; else
    :class:`TokenError` naming ``source`` (where the token came from) and the fix."""
    if len(token) >= MIN_TOKEN_LENGTH and _TOKEN_CHARS.fullmatch(token):
        return token
    bad = sorted({c for c in token if not _TOKEN_CHARS.fullmatch(c)})
    why = (
        f"it has {', '.join(repr(c) for c in bad[:5])}"
        if bad
        else f"it is {len(token)} character{'s' if len(token) != 1 else ''} long, fewer than {MIN_TOKEN_LENGTH}"
    )
    raise TokenError(
        f"the serve access token ({source}) is refused: {why}; use at least {MIN_TOKEN_LENGTH} letters, digits, "
        "'-', '_', '.' or '~' (e.g. the output of: python -c \"import secrets; print(secrets.token_urlsafe(32))\"), "
        f"or leave {TOKEN_ENV} unset for a random one"
    )


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
