"""Running a C/C++ compiler so that a Ctrl-C (or a timeout) during the compile leaves nothing behind.

``subprocess.run`` answers a ``KeyboardInterrupt`` by SIGKILLing the process it started: the
compiler's driver (g++, clang). Its own child (``cc1plus``, ``as``) then runs on alone for
seconds, and the driver never deletes its temporary files: a Ctrl-C sent to the program alone
(``kill -INT``, an IDE's stop button) during a build of the GPU emulator's kernels left a
``cc*.s`` of several MB in ``$TMPDIR``. Here, on any exception while it runs, the driver is
stopped (SIGSTOP: it starts no further child), it and its children get SIGTERM (the driver
deletes its temporary files on it) and a moment to end, then SIGKILL. The compiler stays in the
caller's process group, so what reaches the group (a terminal's Ctrl-C, a ``killpg`` of a
server's group, a hang-up) reaches the compiler too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

#: how long the driver gets after SIGTERM before SIGKILL (it only deletes files)
STOP_GRACE_S = 2.0


def run_compiler(
    cmd: Sequence[str], *, timeout: float, cwd: str | os.PathLike[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)``, but an
    exception while it runs (Ctrl-C's ``KeyboardInterrupt``, ``TimeoutExpired``) stops the
    compiler's driver and its children, cleanly, before it propagates."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop_compiler(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_compiler(proc: subprocess.Popen[str]) -> None:
    """Stop ``proc`` (a compiler's driver) and its children: SIGSTOP to the driver, SIGTERM to
    its children and to it (then SIGCONT: it deletes its temporary files and ends), up to
    :data:`STOP_GRACE_S` for it to end (a second Ctrl-C cuts that short), then SIGKILL to any of
    them left."""
    kids: list[int] = []
    try:
        if proc.poll() is not None:  # it ended (and is reaped: its pid may be another's now)
            return
        _signal(proc.pid, signal.SIGSTOP)  # (no new child between the look and the kill)
        kids = children(proc.pid)
        for pid in (*kids, proc.pid):
            _signal(pid, signal.SIGTERM)
        _signal(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for pid in kids:
            _signal(pid, signal.SIGKILL)
        if proc.poll() is None:
            _signal(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``; none found elsewhere)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):  # a kernel without the children file: scan every process
            return _children_by_scan(pid)
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):  # it already ended
        pass
