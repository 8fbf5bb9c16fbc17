"""How the server process lives and ends with its caller, and takes Triton with it.

:func:`stop_events` watches the process that started the server (``serve``'s caller): once it
is gone the server stops gracefully if it serves, and at once while it is still starting
(:func:`_abandon_startup`). :func:`start_group_watchdog` starts a small process that SIGKILLs the
server's process group (Triton, its stubs) once the server process is gone, however it ended;
:func:`become_subreaper` makes the server process reap what Triton leaves orphaned. See
:mod:`._child`, whose ``main`` uses them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ._leftovers import remove_server_shm

# Polls its parent (this process); once the parent is gone, SIGKILLs the rest of the process
# group (Triton, its stubs) and removes the model folders Triton made for its stubs (Triton
# removes them itself only when it shuts down normally).
_WATCHDOG = """
import os, shutil, signal, sys, time
parent = int(sys.argv[1])
while os.getppid() == parent:
    time.sleep(0.1)
me, group, folders = os.getpid(), os.getpgid(0), set()
try:
    entries = os.listdir("/proc")
except OSError:  # no /proc: the whole group at once, this process included
    os.killpg(group, signal.SIGKILL)
for _ in range(3):
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == me:
            continue
        try:
            if os.getpgid(int(e)) != group:
                continue
            with open("/proc/%s/cmdline" % e, "rb") as fh:
                argv = fh.read().split(b"\\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"triton_python_backend_stub"):
            folder = os.path.dirname(os.path.dirname(os.fsdecode(argv[1])))
            if os.path.basename(folder).startswith("folder"):
                folders.add(folder)
        try:
            os.kill(int(e), signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
for folder in folders:
    shutil.rmtree(folder, ignore_errors=True)
"""


def _watch_parent(
    parent: int, stop: threading.Event, orphaned: threading.Event, serving: threading.Event, abandon: Callable[[], None]
) -> None:
    """Once the parent is gone: stop serving (a graceful stop), or, while still starting, abandon."""
    while os.getppid() == parent:
        time.sleep(0.5)
    orphaned.set()
    stop.set()
    if not serving.is_set():
        abandon()


def _abandon_startup(workdir: Path, own_workdir: bool) -> None:
    """The process that started this server died while it was starting (a model or pipeline that
    loads slowly, a Triton that does not come up): nobody waits for this server, and the main
    thread may be stuck anywhere (a model's import, a Triton readiness wait). End this process at
    once, from this thread: first PyTriton's shared memory and the work directory the parent can
    no longer remove, then ``os._exit``; the group watchdog then SIGKILLs Triton and its stubs and
    removes their model folders (see the module's docstring)."""
    print(
        "alpyka serve: the process that started this server ended while it was starting; ending too",
        file=sys.stderr,
        flush=True,
    )
    remove_server_shm(os.getpid())
    if own_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    os._exit(4)


def start_group_watchdog() -> subprocess.Popen | None:
    """The watchdog that SIGKILLs this process group once this process is gone (see the
    module's docstring). Only where this process leads its own group (as ``serve`` starts it)."""
    if os.getpgid(0) != os.getpid():
        return None  # not our own group: killing it would kill unrelated processes
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _WATCHDOG, str(os.getpid())], stdin=subprocess.DEVNULL, close_fds=True
    )


def become_subreaper() -> None:
    """Adopt orphaned descendants (Triton's stubs and their helpers once Triton is gone), so that
    they are reaped here rather than left as zombies under an init that does not reap (some
    containers)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - not Linux: orphans go to init as usual
        pass


def stop_events(cfg: dict, workdir: Path) -> tuple[threading.Event, threading.Event, threading.Event]:
    """``(stop, orphaned, serving)``: stop is set by SIGTERM/SIGINT or once the parent is gone
    (orphaned too); main sets serving once started: before that, the parent's death ends this
    process at once (:func:`_abandon_startup`)."""
    stop, orphaned, serving = threading.Event(), threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def abandon() -> None:
        _abandon_startup(workdir, bool(cfg.get("own_workdir")))

    threading.Thread(
        target=_watch_parent, args=(cfg["parent_pid"], stop, orphaned, serving, abandon), daemon=True
    ).start()
    return stop, orphaned, serving
