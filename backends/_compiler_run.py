"""Running a C/C++ compiler so that a Ctrl-C (or a timeout) during the compile leaves nothing behind.

``subprocess.run`` answers a ``KeyboardInterrupt`` by SIGKILLing the process it started: the
compiler's driver (g++, clang). Its own child (``cc1plus``) then runs on alone for seconds, and
the driver never deletes its temporary files: every Ctrl-C during a build of the GPU emulator's
kernels left a ``cc*.s`` of several MB in ``$TMPDIR``. Here the compiler runs in a process group
of its own; on any exception while it runs the whole group gets SIGTERM (the drivers delete
their temporary files on it), a moment to end, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence

#: how long a compiler's group gets after SIGTERM before SIGKILL (the driver only deletes files)
STOP_GRACE_S = 2.0


def run_compiler(
    cmd: Sequence[str], *, timeout: float, cwd: str | os.PathLike[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)``, but an
    exception while it runs (Ctrl-C's ``KeyboardInterrupt``, ``TimeoutExpired``) stops the
    compiler's whole process group, cleanly, before it propagates."""
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: its children are stopped with it
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to ``proc``'s process group, up to :data:`STOP_GRACE_S` for the group's leader to
    end (a second Ctrl-C cuts that short), then SIGKILL to whatever of the group is left."""
    try:
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # the group already ended
        pass
