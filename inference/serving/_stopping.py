"""How the server process ends Triton on a stop: at once when no client is connected, else once
Triton has answered the requests in flight and unloaded its models; no request is dropped.

What a stop waited for (one small model, 2 cores, load ~1): PyTriton's ``Triton.stop`` sends
``tritonserver`` SIGINT; Triton then stops taking requests, waits for those in flight, unloads its
models and asks once a second whether they are gone. Unloading a Python-backend model takes
1.1-2.2 s whatever it runs: Triton's Python backend sleeps 1 s (a health check) before it tells
the stub to finish, and PyTriton's stub looks at its stop flag once a second. With Triton's
one-second question on top, tritonserver took 3.0-3.2 s to exit, the whole stop 4.2-4.4 s.

- **No client connected** to the server's gRPC/HTTP ports (:func:`connected_clients`; this
  process's own connections aside): no request can be waiting for an answer, so nothing needs
  the graceful unload. ``tritonserver`` is ended at once (:func:`kill_on_stop`: PyTriton's stop
  SIGKILLs it instead of SIGINT) and its stubs with it (:func:`kill_stubs`); what Triton would
  have removed on a clean exit (its shared memory, the stubs' model folders) the server process
  removes anyway (:mod:`._leftovers`). A client that connects meanwhile gets an error
  (connection closed), never a hang.
- **A client connected**: :func:`unload_models` unloads the models through Triton's
  model-repository API (a restricted endpoint: the janitor carries the token). Triton refuses
  new requests (the model is unavailable), answers those it has taken, then finalises the
  stubs (a stub is finalised after its model's last request is released, and a second after
  the backend's health check); this process watches them exit (every :data:`POLL_S`): then
  nothing is in flight, and tritonserver is ended at once as above. A request still running
  after the exit timeout fails then, as it did when Triton's own stop gave up on it. Only where
  Triton cannot be asked does its own stop follow (SIGINT, ``--exit-timeout-secs``).

Then PyTriton's stop ends its request loops in this process, which looked at their stop flag once
a second (another 0.75-1 s of each stop): :func:`prompt_stop_polls` makes that every
:data:`STOP_FLAG_POLL_S`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._leftovers import group_members

#: how often a stopping server process looks whether the stubs have exited
POLL_S = 0.02
#: how often PyTriton's request loops in the server process look at their stop flag (1 s in PyTriton)
STOP_FLAG_POLL_S = 0.1
#: TCP states of a server-side socket whose client may still wait for an answer:
#: ESTABLISHED, SYN_RECV, CLOSE_WAIT (the client half-closed and waits)
_WAITING_STATES = frozenset({"01", "03", "08"})
_STUB = b"triton_python_backend_stub"


def _own_socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _tcp_sockets() -> list[tuple[int, int, str, str]] | None:
    """``(local port, remote port, state, inode)`` of this network namespace's TCP sockets."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        except OSError:
            return None
        for line in lines:
            f = line.split()
            if len(f) > 9:
                rows.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), f[3], f[9]))
    return rows


def connected_clients(ports: Iterable[int], own_pid: int) -> int | None:
    """How many clients, other than process ``own_pid``, may wait for an answer on ``ports``:
    the server's connections whose client end is still open in some process (a client that
    closed its socket waits for nothing). The server listens on 127.0.0.1 only, so both ends are
    in this network namespace's table. None when that cannot be read (count it as connected)."""
    ports = set(ports)
    rows = _tcp_sockets()
    if rows is None:
        return None
    own = _own_socket_inodes(own_pid)
    client_ends = {(local, remote): inode for local, remote, _, inode in rows if remote in ports}
    count = 0
    for local, remote, state, _ in rows:
        if local in ports and state in _WAITING_STATES:
            inode = client_ends.get((remote, local))  # absent: not told apart, so counted
            if inode is None or (inode != "0" and inode not in own):
                count += 1
    return count


def stub_pids(pgid: int) -> list[int]:
    """The live Python-backend stubs of process group ``pgid``."""
    found = []
    for pid in group_members(pgid) or []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[0].endswith(_STUB):
                    found.append(pid)
        except OSError:
            continue
    return found


def kill_stubs(pgid: int) -> None:
    """SIGKILL the stubs of process group ``pgid`` (once tritonserver is gone: they serve nothing)."""
    for pid in stub_pids(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def unload_models(janitor: Any, names: list[str], pgid: int, timeout: float) -> bool | None:
    """Unload the models ``names`` (see the module's docstring) and wait until every stub of
    process group ``pgid`` has exited: True then; False when ``timeout`` seconds passed first
    (a request that does not end); None when Triton could not be asked, or no stub is there to
    show the unload's end (a model not on the Python backend, a stub of another name): then
    Triton's own stop waits for the requests."""
    deadline = time.monotonic() + timeout
    if not stub_pids(pgid):
        return None
    try:
        for name in names:  # each call only starts the unload: they proceed side by side
            janitor.unload_model(name, client_timeout=timeout)
    except Exception:  # noqa: BLE001 - Triton gone or busy: the caller falls back to Triton's stop
        return None
    while stub_pids(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _is_tritonserver(pid: int) -> bool:
    """Whether ``pid`` is a live ``tritonserver`` of this process group."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0")[0]
        return os.getpgid(pid) == os.getpgid(0) and argv0.endswith(b"tritonserver")
    except OSError:
        return False


def kill_on_stop(triton: Any) -> bool:
    """Make PyTriton's ``triton.stop()`` SIGKILL ``tritonserver`` where it would SIGINT it (it
    unregisters its exit callback first, then calls its server's ``stop``: the kill comes after,
    so PyTriton does not stop twice). False where this PyTriton differs (its stop is then left as
    it is). Reads ``nvidia-pytriton`` 0.7's server object, as :mod:`._triton_exit` does."""
    server = getattr(triton, "_triton_server", None)
    running = getattr(server, "_tritonserver_running_cmd", None)
    pid = getattr(running, "pid", None)
    graceful = getattr(server, "stop", None)
    if not isinstance(pid, int) or graceful is None:
        return False

    def stop_at_once() -> None:
        if _is_tritonserver(pid):  # not a pid reused since it exited
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        graceful()  # waits for PyTriton to see the process gone (a SIGINT to it is too late)

    server.stop = stop_at_once
    return True


class _PromptStopPolls:
    """The ``asyncio`` module for PyTriton's request loops (``pytriton.proxy.communication``):
    their wait for the next message (``wait_for`` of a shielded future: the message is kept when
    the wait times out) returns after at most :data:`STOP_FLAG_POLL_S` to look at the stop flag,
    not after 1 s; other waits (a handshake's read: a coroutine) keep their timeouts."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def wait_for(aw: Any, timeout: float | None) -> Any:
        if isinstance(aw, asyncio.Future) and timeout is not None:
            timeout = min(timeout, STOP_FLAG_POLL_S)
        return asyncio.wait_for(aw, timeout)


def prompt_stop_polls() -> bool:
    """Install :class:`_PromptStopPolls` in PyTriton's request loops; False where PyTriton's
    module differs (its stop then waits up to 1 s longer)."""
    try:
        from pytriton.proxy import communication
    except ImportError:
        return False
    if getattr(communication, "asyncio", None) is not asyncio:
        return isinstance(getattr(communication, "asyncio", None), _PromptStopPolls)
    communication.asyncio = _PromptStopPolls()
    return True
