"""Ctrl-C sent to a child process once it says it is launching, and what followed when (the Ctrl-C
tests of tests/backends/: test_ctrl_c.py, test_opencl_wait_choice.py)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Interrupted:
    """A child's run: ``rc`` (None: it did not end within the wait and was killed), when the
    SIGINT was sent and when the child ended (``time.monotonic()``), its stdout lines with the
    time each arrived, and its stderr."""

    rc: int | None
    sent: float
    ended: float | None
    lines: list[tuple[float, str]] = field(default_factory=list)
    err: str = ""

    def said(self, line: str) -> float | None:
        """When the child printed ``line`` (None: never)."""
        return next((t for t, ln in self.lines if ln == line), None)


def interrupt_child(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    ready: str = "launching",
    running_s: float = 1.5,
    exit_wait_s: float = 38.0,
    start_limit_s: float = 180.0,
) -> Interrupted:
    """Run ``argv``; once it printed ``ready`` (within ``start_limit_s``: imports and compilation
    on a busy machine) and then ran ``running_s`` more, send it SIGINT and wait up to
    ``exit_wait_s`` for its end (then kill it). Fails with the child's stderr where it never got
    ready."""
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env))
    lines: list[tuple[float, str]] = []
    err: list[str] = []

    def read_out() -> None:
        with p.stdout:  # closed at its end: no ResourceWarning for the pipe
            lines.extend((time.monotonic(), ln.strip()) for ln in p.stdout)

    def read_err() -> None:
        with p.stderr:
            err.extend(p.stderr)

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    rc = ended = None
    try:
        deadline = time.monotonic() + start_limit_s
        while not any(ln == ready for _, ln in list(lines)):
            if p.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {ready!r} line: {''.join(err)[-3000:]}")
            time.sleep(0.05)
        time.sleep(running_s)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        try:
            rc = p.wait(exit_wait_s)
            ended = time.monotonic()
        except subprocess.TimeoutExpired:
            pass
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for t in readers:
            t.join(10)  # the readers reach the end of the pipes
    return Interrupted(rc, sent, ended, list(lines), "".join(err))
