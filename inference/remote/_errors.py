"""Errors of the remote (Triton / KServe v2) inference client."""

from __future__ import annotations

from portable import AlpykaError, AlpykaWarning


class RemoteError(AlpykaError, RuntimeError):
    """Base class of every error raised by :class:`inference.RemoteModel`."""


class ServerUnavailable(RemoteError):
    """No server in the list answered (down, unreachable, or not ready) after the bounded retries."""


class RemoteTimeout(RemoteError):
    """A request (or a readiness check) took longer than the client's ``timeout``."""


class ModelNotFound(RemoteError):
    """The server runs, but does not have the model (the message names the model asked for and
    lists the models the server has)."""


class ModelNotReady(ServerUnavailable):
    """The server answers but it, or the model, is not ready (yet): loading. At connection a
    :class:`RemoteModel` keeps asking until ``ready_timeout``; then this error says so."""


class MetadataMismatch(RemoteError):
    """The model's inputs/outputs on the server do not match the SoA blocks (names the block)."""


class InferenceFailed(RemoteError):
    """The server accepted the request but the model failed, or the response was unusable."""


class BatchSplitWarning(AlpykaWarning):
    """One forward went out as several requests because of a batch limit (once per client)."""
