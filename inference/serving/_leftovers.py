"""Names of the system resources alpyka's remote inference creates, and the sweep of stale ones.

Everything is named with a recognisable prefix and the id of the process that owns it, so that
what a killed process left behind can be told apart from what a live one uses:

- ``/dev/shm/alpyka-remote-<pid>-<n>-<token>``: shared-memory regions of a :class:`RemoteModel`
  client (``<pid>``: the client process);
- ``<tmp>/alpyka-serve-<pid>-<random>/``: the work directory of a server started by
  :func:`inference.serve` (``<pid>``: the process that called it); its ``server.pid`` names the
  server process, whose PyTriton shared memory is ``/dev/shm/pytrtion<server pid>-...``; its
  ``triton-folders.json`` names the model folders Triton made for its Python-backend stubs
  (``/tmp/folderXXXXXX``: Triton's own path, it ignores ``TMPDIR``), as the server process read
  them from its stubs' command lines;
- ``access.json`` in a server's work directory: its urls and access token, for clients of the
  same user on this host (:func:`find_token`).

Owners remove their own resources (``close``/``stop``, ``finally`` blocks, ``atexit``);
:func:`sweep` removes those whose owner is dead (a process killed with SIGKILL runs no cleanup).
It runs when a client opens shared memory and when a server starts. Only what is provably
alpyka's is touched: a name of the patterns above, owned by this user, not a symbolic link.
Nothing here takes a lock, so :func:`unlink_shm` may run from a garbage-collector finalizer.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

try:
    import _posixshmem  # POSIX shm_open/shm_unlink (what multiprocessing.shared_memory uses)
except ImportError:  # pragma: no cover - not POSIX
    _posixshmem = None  # type: ignore[assignment]

SHM_DIR = Path("/dev/shm")
CLIENT_SHM_PREFIX = "alpyka-remote-"
SERVER_DIR_PREFIX = "alpyka-serve-"
SERVER_PID_FILE = "server.pid"
ACCESS_FILE = "access.json"
TRITON_FOLDERS_FILE = "triton-folders.json"
#: where Triton makes the model folders of its Python-backend stubs (hard-coded in Triton)
TRITON_TMP = Path("/tmp")

_CLIENT_SHM = re.compile(r"^(?:alpyka-remote-(\d+)-\d+-\w+|alpyka_(\d+)_\d+)$")  # the second: older releases
_SERVER_DIR = re.compile(r"^alpyka-serve-(\d+)-\w+$")
_TRITON_FOLDER = re.compile(r"^folder[0-9A-Za-z]{6}$")
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


def owned_by_me(path: str | os.PathLike, directory: bool = False) -> bool:
    """True when ``path`` is a directory (else a regular file) of this user, not a symbolic link."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    kind = stat.S_ISDIR if directory else stat.S_ISREG
    return kind(st.st_mode) and st.st_uid == os.getuid()


def private(path: str | os.PathLike, directory: bool = False) -> bool:
    """:func:`owned_by_me`, and nobody else may read or write it (mode 0700/0600)."""
    return owned_by_me(path, directory) and not os.lstat(path).st_mode & 0o077


def is_triton_folder(path: str | os.PathLike) -> bool:
    """True for a model folder Triton makes for a stub: ``/tmp/folderXXXXXX``, this user's."""
    p = Path(path)
    return p.parent == TRITON_TMP and bool(_TRITON_FOLDER.match(p.name)) and owned_by_me(p, directory=True)


def stub_folders(pgid: int) -> list[str]:
    """The model folders of the Python-backend stubs in process group ``pgid``, read from their
    command lines (``triton_python_backend_stub <folder>/<version>/model.py ...``)."""
    found: list[str] = []
    for pid in group_members(pgid) or []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"triton_python_backend_stub"):
            folder = os.path.dirname(os.path.dirname(os.fsdecode(argv[1])))
            if is_triton_folder(folder) and folder not in found:
                found.append(folder)
    return found


def recorded_triton_folders(workdir: str | os.PathLike) -> list[str]:
    """The stub folders a server recorded in its work directory (``[]`` when none or unreadable)."""
    path = Path(workdir) / TRITON_FOLDERS_FILE
    if not owned_by_me(path):
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [f for f in data if isinstance(f, str)] if isinstance(data, list) else []


def record_triton_folders(workdir: str | os.PathLike, folders: Iterable[str]) -> None:
    """Add ``folders`` to the work directory's record (written whole, then renamed into place)."""
    known = recorded_triton_folders(workdir)
    new = [f for f in folders if f not in known]
    if not new:
        return
    path = Path(workdir) / TRITON_FOLDERS_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(known + new))
    tmp.replace(path)


def remove_triton_folders(folders: Iterable[str]) -> list[str]:
    """Remove those of ``folders`` that are Triton stub folders of this user
    (:func:`is_triton_folder`); returns what was removed."""
    removed = []
    for f in folders:
        if is_triton_folder(f):
            shutil.rmtree(f, ignore_errors=True)
            if not os.path.lexists(f):
                removed.append(f)
    return removed


def write_access(workdir: str | os.PathLike, urls: Iterable[str], token: str) -> None:
    """Write the server's ``access.json`` (its urls and access token), readable by this user only."""
    path = Path(workdir) / ACCESS_FILE
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"urls": list(urls), "token": token}, fh)
    tmp.replace(path)


def loopback_port(url: str) -> int | None:
    """The port of a url on this host (``127.0.0.1:P``, ``localhost:P``, ``grpc://[::1]:P``), else None."""
    host, _, port = url.split("://", 1)[-1].rstrip("/").rpartition(":")
    if host.strip("[]") not in ("127.0.0.1", "localhost", "::1") or not port.isdigit():
        return None
    return int(port)


def find_token(url: str, tmp_dir: str | os.PathLike | None = None) -> str | None:
    """The access token of the running server at ``url`` started by ``serve`` on this host by
    this user, read from its work directory's ``access.json`` (a directory and file of this
    user's that nobody else can read); None when there is none."""
    port = loopback_port(url)
    if port is None:
        return None
    tmp = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
    try:
        names = os.listdir(tmp)
    except OSError:
        return None
    for name in names:
        d = tmp / name
        if not _SERVER_DIR.match(name) or not private(d, directory=True) or not private(d / ACCESS_FILE):
            continue
        server = _read_pid(d / SERVER_PID_FILE)
        if not server or not pid_alive(server):
            continue  # a server that is gone: its port may serve someone else now
        try:
            data = json.loads((d / ACCESS_FILE).read_text())
        except (OSError, ValueError):
            continue
        token = data.get("token") if isinstance(data, dict) else None
        urls = data.get("urls") if isinstance(data, dict) else None
        if (
            isinstance(token, str)
            and token
            and isinstance(urls, list)
            and any(isinstance(u, str) and loopback_port(u) == port for u in urls)
        ):
            return token
    return None


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
        if m and not pid_alive(int(m.group(1) or m.group(2))) and owned_by_me(shm / name):
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
        if not owned_by_me(d, directory=True):
            continue  # another user's (or a link): not ours to remove
        server = _read_pid(d / SERVER_PID_FILE)
        if server and pid_alive(server):
            continue  # still serving (it stops by itself once it sees its parent gone)
        removed += remove_triton_folders(recorded_triton_folders(d))  # the whole group was killed
        if server:
            prefix = f"pytrtion{server}-"
            for seg in shm_names:
                if seg.startswith(prefix) and owned_by_me(shm / seg):
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
