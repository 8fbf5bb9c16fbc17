"""Names of the system resources alpyka's remote inference creates, and the sweep of stale ones.

Everything is named with a recognisable prefix and the id of the process that owns it, so that
what a killed process left behind can be told apart from what a live one uses:

- ``/dev/shm/alpyka-remote-<pid>-<n>-<token>``: shared-memory regions of a :class:`RemoteModel`
  client (``<pid>``: the client process);
- ``<tmp>/alpyka-serve-<pid>-<random>/``: the work directory of a server started by
  :func:`inference.serve` (``<pid>``: the process that called it); its ``server.pid`` names the
  server process, whose PyTriton shared memory is ``/dev/shm/pytrtion<server pid>-...``.

Owners remove their own resources (``close``/``stop``, ``finally`` blocks, ``atexit``);
:func:`sweep` removes those whose owner is dead (a process killed with SIGKILL runs no cleanup).
It runs when a client opens shared memory and when a server starts. Nothing here takes a lock,
so :func:`unlink_shm` may run from a garbage-collector finalizer.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any
import secrets
import shutil
import tempfile
from pathlib import Path

try:
    import _posixshmem  # POSIX shm_open/shm_unlink (what multiprocessing.shared_memory uses)
except ImportError:  # pragma: no cover - not POSIX
    _posixshmem = None  # type: ignore[assignment]

SHM_DIR = Path("/dev/shm")
CLIENT_SHM_PREFIX = "alpyka-remote-"
SERVER_DIR_PREFIX = "alpyka-serve-"
SERVER_PID_FILE = "server.pid"

_CLIENT_SHM = re.compile(r"^(?:alpyka-remote-(\d+)-\d+-\w+|alpyka_(\d+)_\d+)$")  # the second: older releases
_SERVER_DIR = re.compile(r"^alpyka-serve-(\d+)-\w+$")
_counter = itertools.count()


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists (a zombie counts as alive until it is reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def group_members(pgid: int, exclude: frozenset[int] | set[int] = frozenset()) -> list[int] | None:
    """Live (not zombie) processes of process group ``pgid``, read from /proc; None where there
    is no /proc (then ``os.killpg(pgid, 0)`` is the only test, and it counts zombies)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for e in entries:
        if not e.isdigit() or int(e) in exclude:
            continue
        try:
            with open(f"/proc/{e}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state ppid pgrp ...
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.append(int(e))
    return found


def group_alive(pgid: int) -> bool:
    """True while process group ``pgid`` has a live (not zombie) member."""
    members = group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def unregister_dead_clients(client: Any) -> list[str]:
    """Unregister from a Triton server (``client``: a ``tritonclient.grpc`` client of it) the system
    shared-memory regions of alpyka clients whose process is gone: a client killed, or ended
    without ``close()``, leaves its regions registered and mapped by the server. Returns their
    names; errors (the server stopping, a region another sweeper took) are ignored."""
    removed: list[str] = []
    try:
        status = client.get_system_shared_memory_status(as_json=True, client_timeout=5)
    except Exception:  # noqa: BLE001 - the server is busy or stopping: the next sweep tries again
        return removed
    for name in (status or {}).get("regions", {}):
        m = _CLIENT_SHM.match(name)
        if m and not pid_alive(int(m.group(1) or m.group(2))):
            try:
                client.unregister_system_shared_memory(name, client_timeout=5)
                removed.append(name)
            except Exception:  # noqa: BLE001
                pass
    return removed


def client_shm_key() -> str:
    """A new, unique POSIX shared-memory key for this process: ``/alpyka-remote-<pid>-<n>-<token>``."""
    return f"/{CLIENT_SHM_PREFIX}{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"


def server_workdir() -> Path:
    """A new server work directory named after this process."""
    return Path(tempfile.mkdtemp(prefix=f"{SERVER_DIR_PREFIX}{os.getpid()}-"))


def unlink_shm(key: str) -> None:
    """Remove a POSIX shared-memory segment by key; lock-free (no import, no lock: it may run
    in a garbage-collector finalizer), never raises."""
    try:
        if _posixshmem is not None:
            _posixshmem.shm_unlink("/" + key.lstrip("/"))
        else:
            os.unlink(os.path.join(str(SHM_DIR), key.lstrip("/")))
    except OSError:
        pass


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def sweep(shm_dir: str | os.PathLike | None = None, tmp_dir: str | os.PathLike | None = None) -> list[str]:
    """Remove alpyka's shared-memory segments and server work directories whose owner process
    is dead (and, for a server, whose server process is dead too: then also its PyTriton
    segments). Returns what was removed. Errors (a race with another sweeper) are ignored."""
    shm = Path(shm_dir) if shm_dir is not None else SHM_DIR
    tmp = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
    removed: list[str] = []
    try:
        shm_names = os.listdir(shm)
    except OSError:
        shm_names = []
    for name in shm_names:
        m = _CLIENT_SHM.match(name)
        if m and not pid_alive(int(m.group(1) or m.group(2))):
            try:
                os.unlink(shm / name)
                removed.append(str(shm / name))
            except OSError:
                pass
    try:
        tmp_names = os.listdir(tmp)
    except OSError:
        tmp_names = []
    for name in tmp_names:
        m = _SERVER_DIR.match(name)
        if not m or pid_alive(int(m.group(1))):
            continue
        d = tmp / name
        server = _read_pid(d / SERVER_PID_FILE)
        if server and pid_alive(server):
            continue  # still serving (it stops by itself once it sees its parent gone)
        if server:
            prefix = f"pytrtion{server}-"
            for seg in shm_names:
                if seg.startswith(prefix):
                    try:
                        os.unlink(shm / seg)
                        removed.append(str(shm / seg))
                    except OSError:
                        pass
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(str(d))
    return removed


def remove_server_shm(server_pid: int, shm_dir: str | os.PathLike | None = None) -> None:
    """Remove the PyTriton segments of server process ``server_pid`` (after it stopped)."""
    shm = Path(shm_dir) if shm_dir is not None else SHM_DIR
    prefix = f"pytrtion{server_pid}-"
    try:
        names = os.listdir(shm)
    except OSError:
        return
    for seg in names:
        if seg.startswith(prefix):
            try:
                os.unlink(shm / seg)
            except OSError:
                pass
