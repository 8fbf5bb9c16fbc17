"""Keeps the access token off ``tritonserver``'s command line, which every local user can read.

Triton takes its restricted-endpoint setting (``--http-restricted-api`` and
``--grpc-restricted-protocol``: ``<endpoints>:<header>=<token>``) only as command-line arguments,
and ``/proc/<pid>/cmdline`` is readable by every user of the host: anyone who read the token there
could load a model (Python code run as the serving user) through the model-repository API. So
PyTriton is given :data:`PLACEHOLDER` as the token; the command line carries that, and a small
library preloaded into ``tritonserver`` (``LD_PRELOAD``; built from :data:`SHIM_SOURCE` with the
host's C compiler into a directory only this user can enter) replaces the placeholder, before
``main`` runs, by the real token that it reads from ``tritonserver``'s environment — readable by
this user only (``/proc/<pid>/environ`` is mode 0400 and needs ptrace access). The library then
removes the token and itself from the environment, so that Triton's Python-backend stubs inherit
neither. Its ``fchmod`` keeps the owner's bits only (Boost widens Triton's shared memory to 0644).
PyTriton's own clients (loading the models, waiting for the server) get the real token through
:func:`patch_pytriton_headers`.

It fails closed: with the placeholder but no token in its environment the library ends
``tritonserver`` before ``main``; a ``tritonserver`` that did not run the library finds no model
repository (its path carries :data:`GATE`, which only the library removes) and exits before it
listens, so the public placeholder is never a usable token; the mechanism is tried on this host
before a server starts (:func:`build_preload`); and the server process checks the command line
Triton really runs with before it says it is ready (:func:`command_line_problems`: the token
absent, every endpoint of ``MUST_RESTRICT`` restricted over HTTP and gRPC, every listener on
127.0.0.1, the repository gated, the library loaded).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from portable import AlpykaError

from ._access import ACCESS_HEADER, MUST_RESTRICT

#: what PyTriton is told the token is; it is all that ``tritonserver``'s command line shows
PLACEHOLDER = "alpyka-token-in-environment"
#: appended to Triton's model repository on its command line and removed by the library: a
#: ``tritonserver`` the library did not run in finds no repository and exits before it listens,
#: so the placeholder is never a token that anyone can use
GATE = ".needs-alpyka-preload"
#: the environment variable that carries the real token into ``tritonserver`` (only there)
SECRET_ENV = "ALPYKA_TRITON_ACCESS_TOKEN"
#: the caller's own ``LD_PRELOAD``, restored by the library for Triton's children
PRELOAD_REST_ENV = "ALPYKA_TRITON_PRELOAD_REST"
#: the file name of the built library
LIBRARY = "alpyka_private_args.so"
#: the command-line options that carry a restriction, and the address options
RESTRICT_OPTIONS = ("--http-restricted-api", "--grpc-restricted-protocol")
ADDRESS_OPTIONS = ("--http-address", "--grpc-address", "--metrics-address")

SHIM_SOURCE = r"""
/* alpyka: replaces the placeholder in tritonserver's arguments by the token from its environment
   and removes the gate from its model repository (inference/serving/_private_args.py), then
   removes the token and itself from the environment. It reads and edits the argument and
   environment arrays the loader passes (the ones main and the C library use), so it does not
   depend on the C library being initialised before it. The C library's functions are declared
   here and bound by the loader: building needs only the compiler (-nostdlib, no C headers). */
typedef __SIZE_TYPE__ size_t;
extern void *malloc(size_t size);
extern long write(int fd, const void *buf, size_t n);
extern void _exit(int status);
extern void *dlsym(void *handle, const char *name);
#define ALPYKA_RTLD_NEXT ((void *)-1L) /* glibc's and musl's RTLD_NEXT */
#define NULL ((void *)0)

static size_t alpyka_len(const char *s) {
    size_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    return n;
}

/* where `what` starts in `s`, or NULL */
static const char *alpyka_find(const char *s, const char *what) {
    size_t w = alpyka_len(what);
    for (; *s != '\0'; s++) {
        size_t k = 0;
        while (k < w && s[k] == what[k]) {
            k++;
        }
        if (k == w) {
            return s;
        }
    }
    return NULL;
}

/* a new string: `a`, `b`, `c` one after the other */
static char *alpyka_join(const char *a, size_t na, const char *b, const char *c) {
    size_t nb = alpyka_len(b), nc = alpyka_len(c);
    char *out = malloc(na + nb + nc + 1);
    if (out == NULL) {
        _exit(112);
    }
    for (size_t i = 0; i < na; i++) {
        out[i] = a[i];
    }
    for (size_t i = 0; i < nb; i++) {
        out[na + i] = b[i];
    }
    for (size_t i = 0; i <= nc; i++) {
        out[na + nb + i] = c[i];
    }
    return out;
}

/* arg with its first `what` replaced by `by` (a new string), or arg itself */
static char *alpyka_replace(char *arg, const char *what, const char *by) {
    const char *hit = alpyka_find(arg, what);
    if (hit == NULL) {
        return arg;
    }
    return alpyka_join(arg, (size_t)(hit - arg), by, hit + alpyka_len(what));
}

/* the index of `name`=... in envp, or -1 */
static long alpyka_env(char **envp, const char *name) {
    size_t n = alpyka_len(name);
    for (long i = 0; envp != NULL && envp[i] != NULL; i++) {
        if (alpyka_find(envp[i], name) == envp[i] && envp[i][n] == '=') {
            return i;
        }
    }
    return -1;
}

static void alpyka_drop(char **envp, const char *name) {
    long i;
    while ((i = alpyka_env(envp, name)) >= 0) {
        for (; envp[i] != NULL; i++) {
            envp[i] = envp[i + 1];
        }
    }
}

static void alpyka_private_args(int argc, char **argv, char **envp) {
    long s = alpyka_env(envp, "@SECRET_ENV@"), r = alpyka_env(envp, "@PRELOAD_REST_ENV@");
    const char *secret = s >= 0 ? envp[s] + alpyka_len("@SECRET_ENV@") + 1 : NULL;
    const char *rest = r >= 0 ? envp[r] + alpyka_len("@PRELOAD_REST_ENV@") + 1 : NULL;
    for (int i = 1; argv != NULL && i < argc; i++) {
        /* the gate first: the token may contain it, and must reach main whole */
        argv[i] = alpyka_replace(argv[i], "@GATE@", "");
        if (alpyka_find(argv[i], "@PLACEHOLDER@") != NULL) {
            if (secret == NULL || secret[0] == '\0') {
                static const char msg[] = "alpyka: no access token in the environment; not starting\n";
                if (write(2, msg, sizeof(msg) - 1) < 0) {
                }
                _exit(111);
            }
            argv[i] = alpyka_replace(argv[i], "@PLACEHOLDER@", secret);
        }
    }
    long p = alpyka_env(envp, "LD_PRELOAD");
    if (p >= 0 && rest != NULL && rest[0] != '\0') {
        envp[p] = alpyka_join("LD_PRELOAD=", alpyka_len("LD_PRELOAD="), rest, "");
    } else {
        alpyka_drop(envp, "LD_PRELOAD");
    }
    alpyka_drop(envp, "@PRELOAD_REST_ENV@");
    alpyka_drop(envp, "@SECRET_ENV@");
}

/* tritonserver's fchmod: Boost widens each Python-backend shared-memory segment it makes to
   0644 (whatever the umask), and another user who opens one then keeps reading the requests'
   tensors through it after any later chmod; nothing this server makes is for other users. */
int fchmod(int fd, unsigned int mode) {
    static int (*next)(int, unsigned int);
    if (next == NULL) {
        next = (int (*)(int, unsigned int))dlsym(ALPYKA_RTLD_NEXT, "fchmod");
        if (next == NULL) {
            static const char msg[] = "alpyka: fchmod not found; not starting\n";
            if (write(2, msg, sizeof(msg) - 1) < 0) {
            }
            _exit(113);
        }
    }
    return next(fd, mode & ~077U);
}

__attribute__((section(".init_array"), used)) static void (*alpyka_private_args_init)(int, char **, char **) =
    alpyka_private_args;
"""


class PrivateArgsError(AlpykaError, RuntimeError):
    """The token cannot be kept off ``tritonserver``'s command line here (the message says why)."""


def shim_source() -> str:
    """:data:`SHIM_SOURCE` with the placeholder and the variable names filled in."""
    return (
        SHIM_SOURCE.replace("@PLACEHOLDER@", PLACEHOLDER)
        .replace("@SECRET_ENV@", SECRET_ENV)
        .replace("@PRELOAD_REST_ENV@", PRELOAD_REST_ENV)
        .replace("@GATE@", GATE)
    )


def c_compiler() -> list[str] | None:
    """The C compiler to build the library with: ``$CC``, else cc, gcc or clang; None if none."""
    cc = os.environ.get("CC", "").split()
    if cc and shutil.which(cc[0]):
        return cc
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    return None


def _private_dir(directory: Path) -> None:
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PrivateArgsError(f"{directory} is not a directory private to this user (mode 0700)")


def private_workdir(workdir: str | os.PathLike) -> Path:
    """``workdir`` (made mode 0700 if missing) as an absolute path without links, if no other user
    can change it: a directory of this user that only this user may enter, each directory above it
    root's or this user's and writable by no one else unless sticky (as ``/tmp``). Anyone who could
    rename it or an entry in it could put their own library, ``tritonserver`` or ``config.json``
    there, run as this user and read the token. Else :class:`PrivateArgsError` naming the fix."""
    path = Path(workdir)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = Path(os.path.realpath(path))
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PrivateArgsError(
            f"the server's work directory {path} is not private to this user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}): another user could put code there that the server runs, or read "
            f"its files; use a directory of your own with mode 0700 (chmod 700 {path}), or leave workdir unset"
        )
    for above in path.parents:
        st = os.lstat(above)
        others_write = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
        if st.st_uid not in (0, os.geteuid()) or others_write:
            raise PrivateArgsError(
                f"the server's work directory {path} is inside {above} (owner uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}), which another user can change: they could swap the work "
                "directory for their own and run code as this user; use a work directory below directories "
                "only you or root can write, or leave workdir unset"
            )
    return path


def build_preload(directory: str | os.PathLike) -> Path:
    """Build the library into ``directory`` (which must be private to this user: mode 0700), try it
    on this host's loader, and return its path. Raises :class:`PrivateArgsError` naming the fix."""
    directory = Path(directory)
    _private_dir(directory)
    odd = sorted({c for c in str(directory) if c == ":" or c.isspace()})
    if not directory.is_absolute() or odd:
        # LD_PRELOAD splits at ':' and whitespace, and resolves a relative path where tritonserver
        # runs: the loader would preload other files (a planted /tmp/<prefix>) instead of the library
        raise PrivateArgsError(
            f"the server's work directory {directory.parent} cannot carry the preloaded library: "
            f"{'its path has ' + ', '.join(map(repr, odd)) if odd else 'its path is relative'}, and LD_PRELOAD "
            "splits a path at ':' and whitespace; use a work directory whose absolute path has neither"
        )
    cc = c_compiler()
    if cc is None:
        raise PrivateArgsError(
            "serving needs a C compiler (cc, gcc, clang or $CC) to keep the server's access token off "
            "tritonserver's command line, which every local user can read; install one (e.g. apt-get "
            "install gcc) or set CC"
        )
    src, lib = directory / "alpyka_private_args.c", directory / LIBRARY
    src.write_text(shim_source())
    cmd = [*cc, "-shared", "-fPIC", "-O2", "-nostdlib", "-o", str(lib), str(src)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PrivateArgsError(f"building {lib.name} with {cc[0]} failed: {exc}; check the C compiler ($CC)") from exc
    if r.returncode != 0 or not lib.is_file():
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise PrivateArgsError(f"building {lib.name} with {cc[0]} failed: {last}; check the C compiler ($CC)")
    _try_preload(lib)
    return lib


def _try_preload(lib: Path) -> None:
    """Run this interpreter with the library preloaded: the placeholder must reach ``main`` as the
    token, and neither the token nor the library may stay in the environment."""
    probe = "probe-" + os.urandom(8).hex()
    env = preload_environment(dict(os.environ), lib, probe)
    script = "import os,sys;print(sys.argv[1]);print(os.environ.get('LD_PRELOAD'));print(os.environ.get(sys.argv[2]))"
    try:
        r = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script, f"x:{PLACEHOLDER}", SECRET_ENV],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PrivateArgsError(f"trying {lib.name} failed: {exc}") from exc
    rest = os.environ.get("LD_PRELOAD") or None
    if r.returncode != 0 or r.stdout.split("\n")[:3] != [f"x:{probe}", str(rest), "None"]:
        raise PrivateArgsError(
            f"this host's loader does not run {lib.name} as expected (LD_PRELOAD ignored?), so the access "
            f"token cannot be kept off tritonserver's command line: {(r.stdout + r.stderr).strip()[:300]!r}"
        )


def preload_environment(env: dict[str, str], lib: str | os.PathLike, token: str) -> dict[str, str]:
    """``env`` with the library preloaded and the token for it (the caller's ``LD_PRELOAD`` kept)."""
    env = dict(env)
    rest = env.get("LD_PRELOAD", "")
    env[PRELOAD_REST_ENV] = rest
    env["LD_PRELOAD"] = str(lib) + (f":{rest}" if rest else "")
    env[SECRET_ENV] = token
    return env


def patch_pytriton_headers(token: str) -> None:
    """PyTriton's clients build their headers with ``pytriton.client.auth.create_auth_headers``
    (imported where used): make it send ``token`` where PyTriton holds :data:`PLACEHOLDER`. (A
    PyTriton that built them otherwise would send the placeholder, which Triton refuses: its models
    would fail to load and nothing would be served.)"""
    try:
        from pytriton.client import auth
    except ImportError as exc:
        raise PrivateArgsError(
            "this PyTriton has no pytriton.client.auth; use the one alpyka is tested with (nvidia-pytriton 0.7)"
        ) from exc
    original = getattr(auth.create_auth_headers, "alpyka_original", auth.create_auth_headers)

    def create_auth_headers(access_token: str | None, protocol: str) -> dict[str, str]:
        return original(token if access_token == PLACEHOLDER else access_token, protocol)

    create_auth_headers.alpyka_original = original  # type: ignore[attr-defined]
    auth.create_auth_headers = create_auth_headers


@contextlib.contextmanager
def _preloaded(lib: str, token: str) -> Iterator[None]:
    """This process's environment preloads ``lib`` with ``token`` meanwhile (PyTriton copies it
    for ``tritonserver`` when it starts it); restored after. PyTriton's debug message with that
    environment is held back meanwhile (it would write the token to the server's log)."""
    keys = ("LD_PRELOAD", PRELOAD_REST_ENV, SECRET_ENV)
    saved = {k: os.environ.get(k) for k in keys}
    env = preload_environment(dict(os.environ), lib, token)
    logger = logging.getLogger("pytriton.server.triton_server")
    level = logger.level
    logger.setLevel(max(level, logging.INFO))
    os.environ.update({k: env[k] for k in keys})
    try:
        yield
    finally:
        logger.setLevel(level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_triton(triton: Any, token: str, lib: str) -> None:
    """``triton.run()`` (PyTriton's ``Triton``, made with :data:`PLACEHOLDER` as its token) with
    ``tritonserver`` preloading ``lib``; then check the command line it runs with
    (:func:`running_problems`): :class:`PrivateArgsError` if anything is wrong. The process's
    umask becomes 077 first; Triton's Python-backend shared memory (the requests' tensors; Boost
    makes it mode 0644 whatever the umask) is kept 0600 by the library's ``fchmod``, and checked
    again once the models are loaded."""
    os.umask(0o077)  # what this server makes (Triton's shared memory too) only this user can read
    with _preloaded(lib, token):
        triton.run()
    close_backend_shm(os.getpid())
    problems = running_problems(os.getpid(), token, lib)
    if problems:
        raise PrivateArgsError(
            f"tritonserver does not run as alpyka requires ({'; '.join(problems)}): not serving; use the "
            "PyTriton version alpyka is tested with (nvidia-pytriton 0.7)"
        )


def gated_repository(workspace: str | os.PathLike) -> Path:
    """The model repository to give PyTriton for its ``workspace``: its own, gated (:data:`GATE`)."""
    return Path(workspace) / f"model-store{GATE}"


def close_backend_shm(server_pid: int) -> None:
    """Make this user's ``/dev/shm/pytrtion<server_pid>-*`` (PyTriton's prefix for the Python
    backend's segments of the server process ``server_pid``) readable by this user only."""
    shm = Path("/dev/shm")
    try:
        names = [n for n in os.listdir(shm) if n.startswith(f"pytrtion{server_pid}-")]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(shm / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o600)
        except OSError:
            pass
        finally:
            os.close(fd)


def _option_values(argv: Sequence[str], option: str) -> list[str]:
    """Every value ``argv`` gives ``option`` (``--opt value`` or ``--opt=value``)."""
    values = []
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(option + "="):
            values.append(arg[len(option) + 1 :])
    return values


def command_line_problems(
    argv: Sequence[str], token: str, maps: str | None = None, lib: str | None = None
) -> list[str]:
    """What is wrong with ``tritonserver``'s command line ``argv`` (``/proc/<pid>/cmdline``) for a
    server whose token is ``token``: the token visible; an endpoint of ``MUST_RESTRICT`` not
    restricted (to the placeholder, under the access header) over HTTP or gRPC; a listener not on
    127.0.0.1; with ``maps`` (``/proc/<pid>/maps``) the library ``lib`` not loaded. Empty: fine."""
    problems = []
    if any(token in arg for arg in argv):
        problems.append("the access token is on the command line")
    for option in RESTRICT_OPTIONS:
        values = _option_values(argv, option)
        if not values:
            problems.append(f"no {option}")
        restricted: set[str] = set()
        for value in values:
            apis, _, guard = value.partition(":")
            if guard != f"{ACCESS_HEADER}={PLACEHOLDER}":
                problems.append(f"{option} guards {apis} with something else than the token's header")
                continue
            restricted.update(a.strip() for a in apis.split(","))
        missing = [e for e in MUST_RESTRICT if e not in restricted]
        if values and missing:
            problems.append(f"{option} leaves {', '.join(missing)} open")
    for option in ADDRESS_OPTIONS:
        values = _option_values(argv, option)
        if not values or any(v != "127.0.0.1" for v in values):
            problems.append(f"{option} is {values or 'not given (0.0.0.0)'}, not 127.0.0.1")
    repository = _option_values(argv, "--model-repository")
    if len(repository) != 1 or not repository[0].endswith(GATE):
        problems.append(f"--model-repository is {repository}, not gated by {GATE}")
    if maps is not None and lib is not None and lib not in maps:
        problems.append(f"{Path(lib).name} is not loaded in tritonserver")
    return problems


def tritonserver_pid(parent: int) -> int | None:
    """The ``tritonserver`` that process ``parent`` started, or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) != parent:
                continue
            if os.path.basename(os.readlink(f"/proc/{entry}/exe")) == "tritonserver":
                return int(entry)
        except (OSError, IndexError, ValueError):
            continue
    return None


def running_problems(parent: int, token: str, lib: str) -> list[str]:
    """:func:`command_line_problems` of the ``tritonserver`` that ``parent`` runs, read from /proc."""
    pid = tritonserver_pid(parent)
    if pid is None:
        return ["no tritonserver process found"]
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        maps = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError as exc:
        return [f"tritonserver's command line cannot be read: {exc}"]
    return command_line_problems(argv, token, maps, lib)
