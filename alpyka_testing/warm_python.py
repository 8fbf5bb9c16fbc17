"""Child Python processes for the tests that run scripts as a user runs them (examples, docs
pages, benchmark scripts), started from a warm interpreter instead of a cold one.

:func:`run` is ``subprocess.run([sys.executable, *argv], capture_output=True, text=True, ...)``
with the same result, exit status and timeout, but the child is a fork of a helper process (one
per test process, started on first use) that has already imported the slow third-party packages
of :data:`PRELOAD` (torch alone is about 3.5 s of CPU on a 2-core machine; most scripts import it).
Nothing of alpyka, numba or matplotlib is imported before the fork. The child then takes the
request's working directory, environment, ``sys.argv``, ``sys.path`` (the script's folder and the
request's ``PYTHONPATH`` in front) and standard streams, runs the script as ``__main__`` and exits
through the interpreter's own shutdown (atexit, non-daemon threads joined, streams flushed).

What a fork cannot give is a different interpreter start: a request runs cold (plain
``subprocess.run``) when its environment differs from the helper's in a variable read at start or
at a preloaded package's import (:func:`cold_start_reason`), when a ``PYTHONPATH`` folder has a
``sitecustomize``/``usercustomize``, or everywhere with ``ALPYKA_TEST_WARM=0``. Warm children of
one helper share its hash seed (numpy's global generator is reseeded in each).

A warm child's output goes through files in ``<tmp>/alpyka-warm-<pid>-*`` (``<pid>``: the test
process); a test process killed meanwhile leaves that folder, and each helper start removes those
of test processes that are gone (:func:`sweep_stale`).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: imported by the helper before any fork: packages that read nothing of the environment a test
#: changes, start no thread on import, and cost seconds each time a child imports them
PRELOAD = ("numpy", "torch", "torch._dynamo", "awkward", "uproot", "tritonclient.grpc", "tritonclient.http")
#: environment variables read when the interpreter starts or a preloaded package is imported
_START_PREFIXES = (
    "PYTHON",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NVIDIA",
    "LD_",
    "MALLOC_",
    "GRPC_",
    "AWKWARD",
    "UPROOT",
)
#: of those, the ones read when used, not at start (torch's inductor sets the first in this process)
_READ_AT_USE = frozenset({"PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR"})
_REPO = str(Path(__file__).resolve().parents[1])
_lock = threading.Lock()
_helper: subprocess.Popen | None = None
_helper_env: dict[str, str] = {}
#: why the helper cannot serve (it ended before forking), once it could not
_broken: str | None = None
#: this process's requests: ``"warm"``, or why one started cold
starts: collections.Counter[str] = collections.Counter()


def run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """``python *argv`` (a script path, ``-m module`` or ``-c code`` first), its output captured as
    text; ``subprocess.TimeoutExpired`` once ``timeout`` seconds have passed (the child killed)."""
    global _broken
    env = dict(os.environ if env is None else env)
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
    cold = (
        "ALPYKA_TEST_WARM=0"
        if os.environ.get("ALPYKA_TEST_WARM", "1") == "0"
        else _broken or cold_start_reason(env, _base_env())
    )
    if cold is None:
        try:
            return _run_warm(argv, env, cwd, timeout)
        except HelperGone as gone:  # it died before forking (a preload crashed): this run and the next start cold
            _broken = cold = str(gone)
    starts[cold] += 1
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _run_warm(argv: list[str], env: dict[str, str], cwd: str, timeout: float | None) -> subprocess.CompletedProcess:
    with _lock, tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        code = _run_forked({"argv": list(argv), "env": env, "cwd": cwd, "stdout": out, "stderr": err}, timeout)
        stdout, stderr = (Path(p).read_text(errors="replace") for p in (out, err))
    starts["warm"] += 1
    if code is None:
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess([sys.executable, *argv], code, stdout, stderr)


def cold_start_reason(env: dict[str, str], base: dict[str, str]) -> str | None:
    """Why a child with ``env`` must start cold where the helper started with ``base``: a start-time
    variable differs (``PYTHONPATH`` aside), or a ``PYTHONPATH`` folder customises the start."""
    keys = {k for k in (*env, *base) if k.startswith(_START_PREFIXES) and k not in _READ_AT_USE}
    differ = sorted(k for k in keys if env.get(k) != base.get(k))
    if differ:
        return f"{', '.join(differ)} differ from the warm interpreter's"
    for folder in env.get("PYTHONPATH", "").split(os.pathsep):
        for name in ("sitecustomize", "usercustomize"):
            if folder and os.path.exists(os.path.join(folder, f"{name}.py")):
                return f"{folder} has a {name}.py"
    return None


def _base_env() -> dict[str, str]:
    """The environment the helper starts (started) with: this process's at first use."""
    return _helper_env or dict(os.environ)


def _run_forked(request: dict, timeout: float | None) -> int | None:
    """The child's exit status (negative: the signal that ended it), or None on a timeout."""
    helper, pid = _started_helper(), None
    try:
        helper.stdin.write((json.dumps(request) + "\n").encode())
        helper.stdin.flush()
        try:
            pid = int(_reply(helper, None)["pid"])
        except RuntimeError as exc:
            raise HelperGone(str(exc)) from None
        reply = _reply(helper, timeout)
        if reply is None:  # timed out: end the child by its id, as subprocess.run does
            _kill(pid)
            _reply(helper, None)
            return None
        return int(reply["status"])
    except BaseException:  # Ctrl-C or a broken helper: no child left behind, no reply left unread
        if pid is not None:
            _kill(pid)
        _end(helper)
        raise


class HelperGone(RuntimeError):
    """The helper ended before it forked the child."""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile: nothing to kill
        pass


_pending = bytearray()


def _reply(helper: subprocess.Popen, timeout: float | None) -> dict | None:
    """The helper's next JSON line, or None when none came in ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    fd = helper.stdout.fileno()
    while b"\n" not in _pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"the warm Python helper (pid {helper.pid}) ended: {helper.wait()}")
        _pending.extend(chunk)
    end = _pending.index(b"\n")
    line = bytes(_pending[:end])
    del _pending[: end + 1]
    return json.loads(line)


#: the folders of the children's output: ``<tmp>/alpyka-warm-<pid of the test process>-<random>``
_TMP_PREFIX = "alpyka-warm-"


def sweep_stale(tmp_dir: str | os.PathLike | None = None) -> list[str]:
    """Remove the output folders of test processes that are gone (a worker killed while a child
    ran leaves its folder): only ``alpyka-warm-<pid>-*`` folders of this user, not links, whose
    process is dead. Returns what was removed."""
    import re
    import shutil
    import stat

    tmp = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
    try:
        names = os.listdir(tmp)
    except OSError:
        return []
    removed = []
    for name in names:
        m = re.fullmatch(re.escape(_TMP_PREFIX) + r"(\d+)-\w+", name)
        if not m or _alive(int(m.group(1))):
            continue
        try:
            st = os.lstat(tmp / name)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(tmp / name, ignore_errors=True)
            if not os.path.lexists(tmp / name):
                removed.append(str(tmp / name))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return pid > 0


def _started_helper() -> subprocess.Popen:
    global _helper, _helper_env
    if _helper is None or _helper.poll() is not None:
        sweep_stale()  # what killed test processes left
        _helper_env = dict(os.environ)
        env = dict(_helper_env, PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
        _helper = subprocess.Popen(
            [sys.executable, "-c", "from alpyka_testing.warm_python import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            cwd=_REPO,
        )
        _pending.clear()
        _helper_env["PYTHONPATH"] = env["PYTHONPATH"]
    return _helper


def stop() -> None:
    """Ends this process's helper (by its id) if one was started; the tests' session end calls it."""
    global _helper
    with _lock:
        helper, _helper = _helper, None
    if helper is not None:
        _end(helper)


def _end(helper: subprocess.Popen) -> None:
    """The helper asked to end (its input closed), killed after 10 s."""
    global _helper
    if _helper is helper:
        _helper = None
    if helper.poll() is None:
        helper.stdin.close()
        try:
            helper.wait(10)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


# ----------------------------------------------------------------------------- the helper


def serve() -> None:
    """The helper's loop: one JSON request a line on stdin; for each, the child's pid and then its
    exit status, a JSON line each on stdout. Ends at the end of stdin."""
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a package that fails to import is simply not preloaded
            pass
    gc.collect()
    gc.freeze()  # the preloaded heap out of the children's collections: not walked, not copied
    own = set(_pythonpath(dict(os.environ)))
    site = [p for p in sys.path[1:] if p not in own]  # without its first entry and its PYTHONPATH
    requests, replies = sys.stdin, sys.stdout
    for line in requests:
        request = json.loads(line)
        replies.flush()
        pid = os.fork()
        if pid == 0:
            _become(request, site)  # returns to run the script in this, the child, process
            return
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


def _become(request: dict, site: list[str]) -> None:
    """In the forked child: take the request's process state, then run its script as ``__main__``
    (an exception it raises ends the process as the interpreter would end it)."""
    import builtins
    import runpy
    import types

    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT),
    ):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # a fresh generator, as a new process has
    argv = request["argv"]
    mode, target, rest = (argv[0], argv[1], argv[2:]) if argv[0] in ("-m", "-c") else (None, argv[0], argv[1:])
    first = {"-c": "", "-m": os.getcwd()}.get(mode, os.path.dirname(os.path.realpath(target)))  # as CPython
    sys.path[:] = [first, *_pythonpath(request["env"]), *site]
    if mode == "-c":
        sys.argv = ["-c", *rest]
        main = sys.modules["__main__"] = types.ModuleType("__main__")  # the empty one a fresh -c has
        main.__builtins__ = builtins
        exec(compile(target, "<string>", "exec"), vars(main))
    elif mode == "-m":
        sys.argv = [target, *rest]  # runpy puts the module's file in argv[0]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *rest]
        runpy.run_path(target, run_name="__main__")


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
