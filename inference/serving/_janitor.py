"""The server process's own gRPC client of its Triton (it carries the access token): the sweep of
shared memory that dead clients left registered, and the unload of the models on a stop
(:mod:`._stopping`)."""

from __future__ import annotations

from typing import Any

from ._access import access_headers
from ._leftovers import unregister_dead_clients


class Janitor:
    """A gRPC client of this server for its own housekeeping (it carries the access token)."""

    def __init__(self, client: Any, token: str | None) -> None:
        self._client, self._headers = client, access_headers(token, "grpc")

    def get_system_shared_memory_status(self, **kw: Any) -> Any:
        return self._client.get_system_shared_memory_status(headers=self._headers, **kw)

    def unregister_system_shared_memory(self, name: str, **kw: Any) -> Any:
        return self._client.unregister_system_shared_memory(name, headers=self._headers, **kw)

    def unload_model(self, name: str, **kw: Any) -> Any:
        return self._client.unload_model(name, headers=self._headers, **kw)

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing anyway
            pass


def janitor_client(grpc_port: int, token: str | None = None) -> Janitor | None:
    """A :class:`Janitor` of the server on ``127.0.0.1:grpc_port``, or None (no tritonclient)."""
    try:
        import tritonclient.grpc as grpcclient

        return Janitor(grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"), token)
    except Exception:  # noqa: BLE001 - no client: no sweeping, and Triton's own stop unloads
        return None


def sweep_dead_clients(janitor: Any) -> None:
    """Unregister the shared-memory regions of clients that died without unregistering."""
    gone = unregister_dead_clients(janitor)
    if gone:
        print(
            f"alpyka serve: unregistered {len(gone)} shared-memory region(s) of clients "
            f"that are gone: {', '.join(gone)}",
            flush=True,
        )
