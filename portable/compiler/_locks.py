"""The kernel cache's locks between processes, each waited for a bounded time: a process stopped
(SIGSTOP, a debugger) or killed while holding one costs the others at most that wait, after which
they go on without it (they compile the kernel themselves, or leave the cache alone) and say so
once, naming the lock file and the process holding it where the system tells."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from portable._errors import AlpykaWarning

#: the variable that sets how many seconds a process waits for another's lock
ENV_LOCK_WAIT = "ALPYKA_LOCK_WAIT"
#: the default: a big kernel compiles in tens of seconds, so a holder this long is stuck
LOCK_WAIT_S = 300.0

_warned: set[str] = set()  # the kinds of lock already reported stuck by this process
_warn_lock = threading.Lock()


def lock_wait() -> float:
    """Seconds to wait for a lock another process holds: ``ALPYKA_LOCK_WAIT`` (a number >= 0),
    else :data:`LOCK_WAIT_S`."""
    from portable.env import env_number

    return env_number(ENV_LOCK_WAIT, LOCK_WAIT_S, float, minimum=0)


def flock_within(fd: int, exclusive: bool, seconds: float) -> bool:
    """Take the file lock of ``fd`` (exclusive or shared) within ``seconds``: True once held,
    False when another process still holds it then. Polls every few ms at first, then every
    50 ms (a free lock is taken at once)."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + seconds
    pause = 0.002
    while True:
        try:
            fcntl.flock(fd, mode)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)


def absent_within(path: Path, seconds: float) -> bool:
    """Whether the lock file ``path``, one that exists while it is held (pyopencl's cache lock), is
    absent or goes within ``seconds`` (polled every 50 ms)."""
    deadline = time.monotonic() + seconds
    while os.path.lexists(path):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.05, left))
    return True


def lock_file_free(path: Path, longest: float, instead: str) -> bool:
    """Whether the lock file ``path`` (one that exists while held: pyopencl's cache lock) is free
    within ``min(lock_wait(), longest)`` seconds; else one warning naming its holder and what this
    process does ``instead``."""
    wait = min(lock_wait(), longest)
    if absent_within(path, wait):
        return True
    who = holder(path)
    if who == "an unknown process":  # no process this user can see has it open
        instead += (
            f"; a process killed while it held the lock leaves the file behind: if no process is "
            f"building kernels, remove {path} (alpyka does not: a holder /proc cannot see, in another "
            f"PID namespace or on another machine sharing the cache, would lose its lock)"
        )
    warn_stuck_once(str(path), path, who, wait, instead)
    return False


def holder(path: Path | str, fd: int | None = None) -> str:
    """Who holds the lock file ``path``, in words: ``process 1234 (python work.py), stopped``
    (Linux's /proc: the ``flock`` holder of the open ``fd``'s file; without ``fd``, a process
    with the file open), or ``an unknown process``."""
    pid = _flock_pid(fd) if fd is not None else _opener(Path(path))
    if pid is None:
        return "an unknown process"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return f"process {pid}"
    return f"process {pid} ({cmd})" + (", stopped" if state in ("T", "t") else "")


def _flock_pid(fd: int) -> int | None:
    """The pid /proc/locks names for a ``flock`` on ``fd``'s file (not a waiter's)."""
    try:
        st = os.fstat(fd)
        me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if "->" not in parts and len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == me:
                    return int(parts[4])
    except (OSError, ValueError):
        pass
    return None


def _opener(path: Path) -> int | None:
    """A process of this user (not this one) with ``path`` open, from /proc/<pid>/fd."""
    target = str(path.resolve())
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                            return int(pid)
    return None


def warn_stuck_once(kind: str, path: Path | str, who: str, waited: float, instead: str) -> None:
    """One warning per ``kind`` and process: ``path`` was held by ``who`` for ``waited`` seconds,
    so this process does ``instead``."""
    with _warn_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    warnings.warn(
        f"alpyka's kernel cache: the lock {path} is held by {who} for more than {waited:g} s "
        f"({ENV_LOCK_WAIT}): {instead}. A stopped process (SIGSTOP, a debugger) holds it until it "
        f"resumes or ends; set {ENV_LOCK_WAIT} to wait longer or shorter",
        AlpykaWarning,
        stacklevel=4,
    )


@contextlib.contextmanager
def build_lock(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock file ``path`` (made 0600 where missing) against other processes while one
    builds what they would build too (a compiled kernel for the cache): the others wait, then
    find it cached. A holder that keeps it longer than :func:`lock_wait` (stopped, in a debugger)
    is left holding it: the waiter builds too (the cache entry is written atomically and tagged
    either way), with one warning naming the holder. With ``wait=False`` the lock is only tried:
    held or not, the caller builds at once (no warning: the holder is busy, not stuck). Where the
    file cannot be opened (a cache that cannot be written) it locks nothing. Two threads of one
    process that take it wait for each other too. Yields whether the lock is held."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        wait_s = lock_wait() if wait else 0.0
        held = flock_within(fd, True, wait_s)
        if not held and wait:
            warn_stuck_once("build", path, holder(path, fd), wait_s, "compiling here instead of waiting for it")
        yield held
    finally:
        os.close(fd)  # releases the lock
