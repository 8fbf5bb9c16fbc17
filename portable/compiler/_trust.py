"""Trust in what alpyka reads back from a cache directory: whether a directory is private to this
user along its whole path, and the per-user secret that tags the bytes alpyka wrote there.

Shared by the kernel cache (the generated modules and numba's index and data files), the GPU
emulator's compiled libraries, the OpenCL vendors directory and the HIP toolchain folder.

The attacker is another local user who can write into a shared or misconfigured cache directory.
A directory is *private* when it is a real directory (not a link) of this user that no one else
may write, and no directory above it lets anyone else replace it: each one belongs to this user or
root and is writable by no one else unless it is sticky (``/tmp``), and every link on the way
belongs to this user or root. A group write bit counts as someone else's unless the group is this
user's private group (primary, named as the user, no other member: what a umask of 002 assumes).

In a private directory only this user's own processes can change a file; the *tag* (an
HMAC-SHA256 under a 32-byte secret kept 0600 in the cache directory, over the file's name and
bytes) then says the bytes are the ones alpyka made there, not a file copied in, swapped with
another, truncated, or with bytes appended.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import os
import secrets
import stat
import threading
from pathlib import Path

KEY_FILE = "secret.key"
_KEY_BYTES = 32
_keys: dict[str, bytes] = {}
_keys_lock = threading.Lock()


def mine(st: os.stat_result) -> bool:
    """Whether ``st`` belongs to this user and no one else may write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def private_dir(path: Path | str) -> bool:
    """A real directory (not a link) of this user that no one else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and mine(st)


@functools.lru_cache(maxsize=8)
def _group_of_me_alone(gid: int) -> bool:
    """Whether ``gid`` is this user's private group (the convention of a umask of 002: the user's
    primary group, named as the user, with no other member), so its write bit lets no one else in."""
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _writable_by_others(st: os.stat_result) -> bool:
    """Whether someone other than this user (or root) may write: world-writable, or group-writable
    by a group that is not this user's private group."""
    return bool(st.st_mode & 0o002) or bool(st.st_mode & 0o020 and not _group_of_me_alone(st.st_gid))


def _above_problem(path: Path) -> str | None:
    """Why someone else could replace ``path`` through a directory above it (None: no one can)."""
    me = os.geteuid()
    for parent in path.parents:
        st = os.stat(parent)
        if st.st_uid not in (0, me):
            return f"{parent} above it belongs to another user (uid {st.st_uid})"
        if _writable_by_others(st) and not st.st_mode & stat.S_ISVTX:
            return f"{parent} above it is writable by others (mode {stat.S_IMODE(st.st_mode):o}, not sticky)"
    return None


def path_problem(path: Path | str) -> str | None:
    """None when ``path`` is a private directory along its whole path (see the module's note);
    else why not, in words."""
    p = Path(os.path.abspath(path))
    try:
        me = os.geteuid()
        for link in (p, *p.parents):
            st = os.lstat(link)
            if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, me):
                return f"{link} is a link of another user (uid {st.st_uid})"
        real = Path(os.path.realpath(p))
        st = os.lstat(real)
    except OSError as exc:
        return f"{exc.strerror or exc}: {exc.filename or p}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a directory"
    if st.st_uid != me:
        return f"{real} belongs to another user (uid {st.st_uid})"
    if _writable_by_others(st):
        return f"{real} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    try:
        return _above_problem(real)
    except OSError as exc:
        return f"{exc.strerror or exc}: {exc.filename}"


def make_private_dirs(path: Path) -> None:
    """Make ``path`` and any missing directory above it, each mode 0700 (OSError when one cannot
    be made; an existing one is left as it is: :func:`path_problem` judges it)."""
    missing = []
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)


def read_private_file(path: Path | str, limit: int | None = None) -> bytes | None:
    """The bytes of a regular file of this user that no one else may write (not followed through a
    link); None when it is missing or not such a file. ``limit``: read at most that many bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and mine(st)):
            return None
        return fh.read() if limit is None else fh.read(limit)


def user_key(root: Path) -> bytes:
    """The secret of the private cache directory ``root``: 32 random bytes in ``root/secret.key``
    (0600, this user's), made once; a key file that is not exactly that (another owner, readable
    by others, another size, a link) is replaced, which invalidates every tag made with it.
    OSError when it cannot be written."""
    where = str(os.path.abspath(root))
    with _keys_lock:
        key = _keys.get(where)
        if key is not None:
            return key
        path = os.path.join(where, KEY_FILE)
        key = _read_key(path)
        if key is None:
            key = _write_key(path)
        _keys[where] = key
        return key


def _read_key(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        ok = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077
        data = fh.read(_KEY_BYTES + 1)
    return data if ok and len(data) == _KEY_BYTES else None


def _write_key(path: str) -> bytes:
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(_KEY_BYTES))
        try:
            os.link(tmp, path)  # the first process's key wins; a concurrent one reads it
        except FileExistsError:
            if _read_key(path) is None:
                os.replace(tmp, path)  # a bad key file: replaced
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    key = _read_key(path)
    if key is None:
        raise OSError(f"the cache's secret {path} cannot be made private to this user")
    return key


def tag(key: bytes, name: str, data: bytes) -> bytes:
    """The tag of ``data`` stored under the file name ``name`` (32 bytes)."""
    mac = hmac.new(key, name.encode(), hashlib.sha256)
    mac.update(b"\0")
    mac.update(data)
    return mac.digest()


def tagged(key: bytes, name: str, data: bytes, want: bytes | str | None) -> bool:
    """Whether ``want`` (bytes, or their hex) is the tag of ``data`` under ``name``."""
    if want is None:
        return False
    if isinstance(want, str):
        try:
            want = bytes.fromhex(want)
        except ValueError:
            return False
    return hmac.compare_digest(tag(key, name, data), want)
