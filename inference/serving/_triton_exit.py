"""``tritonserver`` ending while the server process starts it: whether it has, and the one line
that says so (its exit code, its log's last error and the fix).

PyTriton waits up to 120 s for Triton to answer, even when ``tritonserver`` has already exited (a
port taken, a library missing, an option it refuses): the server process asks :func:`exit_code`
between its readiness polls and from a watching thread (``_child.ending_on_triton_exit``), and
ends the start at once with :func:`early_exit_line`. PyTriton
offers no public way to ask: this reads its ``Triton``'s server object (``nvidia-pytriton`` 0.7)
and says "unknown" where it differs.
"""

from __future__ import annotations

from typing import Any

#: what a line of the log says -> what to do about it (the first match wins)
FIXES = (
    (
        ("already in use", "Address already in use"),
        "a port is taken by another process: give serve other ports (0 or None picks free ones)",
    ),
    (
        ("error while loading shared libraries", "cannot open shared object", "undefined symbol"),
        "a library tritonserver needs is missing: reinstall nvidia-pytriton (the triton extra) in this "
        "environment, or add the library's folder to LD_LIBRARY_PATH",
    ),
)

#: what :func:`exit_code` returns once ``tritonserver`` has ended without a known exit code
UNKNOWN = "unknown"


def exit_code(triton: Any) -> int | str | None:
    """The exit code of the ``tritonserver`` that PyTriton's ``triton`` started, once it has ended
    (:data:`UNKNOWN` when PyTriton does not say); None while it runs, or before it starts."""
    server = getattr(triton, "_triton_server", None)
    running = getattr(server, "_tritonserver_running_cmd", None)
    if server is None or running is None:
        return None
    try:
        if server.is_alive():
            return None
        alive, code = running.process.is_alive()
    except Exception:  # noqa: BLE001 - another PyTriton or sh: it has ended, its code unknown
        return UNKNOWN
    return UNKNOWN if alive or code is None else int(code)


def server_log(triton: Any) -> str:
    """What ``tritonserver`` wrote (PyTriton keeps it), or ""."""
    try:
        return str(triton._triton_server.logs())  # noqa: SLF001 - PyTriton has no public accessor
    except Exception:  # noqa: BLE001 - another PyTriton: the parent shows the log's end anyway
        return ""


def last_error(log: str) -> str:
    """The last error line of a Triton log (``E<date> ...``, or one that says error), stripped."""
    errors = [ln.strip() for ln in log.splitlines() if (ln[:1] == "E" and ln[1:5].isdigit()) or "rror" in ln]
    return errors[-1] if errors else ""


def fix_for(log: str) -> str:
    """What to do, from what the log says (:data:`FIXES`); else where to look."""
    for marks, fix in FIXES:
        if any(mark in log for mark in marks):
            return fix
    return "its log (below) says why"


def early_exit_line(code: int | str, log: str) -> str:
    """One line: tritonserver exited with ``code`` while starting, its last error, and the fix."""
    error = last_error(log)
    said = f": {error}" if error else ""
    return f"tritonserver exited with code {code} while starting{said}; {fix_for(log)}"
