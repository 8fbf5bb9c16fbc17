"""Whether the real Triton (PyTriton's bundled tritonserver) can run here, for skip marks; the
`serve` command started and stopped as a user does; the processes of a server's group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def pytriton_reason() -> str | None:
    """None when PyTriton can run here, else why not."""
    try:
        import pytriton.triton  # noqa: F401
    except Exception as exc:
        return f"PyTriton cannot run here: {exc}"
    if not sys.platform.startswith("linux"):
        return "PyTriton's bundled tritonserver runs on Linux only"
    from inference.serving._private_args import c_compiler

    if c_compiler() is None:  # serve builds the library that keeps the token off Triton's command line
        return "no C compiler (cc, gcc, clang or $CC), which serve needs"
    return None


def settled(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 30.0) -> T:
    """``read()`` until ``done`` holds of it or ``timeout`` passes; the last value read. Triton
    counts a request once it released it, which can come after its response reached the client:
    under load, statistics read right after the last response lag (0 of 1, 56 of 64 seen)."""
    deadline = time.monotonic() + timeout
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = read()
    return value


def group_pids(leader: int) -> list[int]:
    """The processes of the process group ``leader`` leads (a server's: its process, tritonserver,
    the stubs), zombies not yet reaped included, read from /proc."""
    pids = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if os.getpgid(int(e)) == leader:
                    pids.append(int(e))
            except OSError:
                pass
    return pids


def torch_loaded(pid: int) -> bool:
    """Whether process ``pid`` has torch's library mapped (Linux: ``/proc/PID/maps``)."""
    with open(f"/proc/{pid}/maps") as fh:
        return any("libtorch_cpu" in line for line in fh)


def server_child(caller: int) -> int | None:
    """The pid of the server process ``caller`` started, or None yet."""
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{e}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == caller and b"inference.serving._child" in argv:
            return int(e)
    return None


@contextlib.contextmanager
def serve_cli(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    check_exit: bool = True,
    startup_s: float = 120,
    python_flags: tuple[str, ...] = (),
) -> Iterator[tuple[subprocess.Popen, list[str], str]]:
    """``python -m inference.serving ARGS`` as a user starts it: yields the process, its output up
    to the ``serving on`` line and its gRPC url; then stops it by its pid (SIGTERM, SIGKILL after
    30 s) and, with ``check_exit``, asserts it exited cleanly (0). ``python_flags``: e.g. ``("-P",)``
    to start it as the ``alpyka`` console script does, without the working directory on the path."""
    proc = subprocess.Popen(
        [sys.executable, *python_flags, "-m", "inference.serving", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env if env is not None else {**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("serving on"):
                break
        assert lines and lines[-1].startswith("serving on"), "".join(lines)
        yield proc, lines, lines[-1].split("gRPC ")[1].split(",")[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                raise
        proc.stdout.close()
    if check_exit:
        assert proc.returncode == 0, f"the server exited with {proc.returncode}"
