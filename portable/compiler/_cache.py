"""The on-disk cache of generated kernel modules: real files (numba's ``cache=True`` needs them)
under ``ALPYKA_CACHE_DIR`` (default ``~/.cache/alpyka``), named by a hash of what they contain.

Nothing on disk is trusted (docs/runtime.md, "The kernel cache"):

- The directory is used only when it is private to this user along its whole path
  (:mod:`._trust`); else one warning and every kernel is compiled in memory.
- A cached module's file is used only when its bytes are the source alpyka generated in this
  process (else it is rewritten, with one warning), and it is never imported (a planted
  ``__pycache__/*.pyc`` is never read): alpyka runs the verified source compiled by itself, kept
  as ``<module>.code`` with a tag (below) over its path, the source's digest and the bytes, with
  ``__file__`` pointing at the ``.py`` for numba's cache.
- numba's index and data files (pickles) are read by numba only after their tags (HMAC under the
  cache's per-user secret, recorded when numba wrote them, beside them in ``<stem>.tags``) say
  they are the bytes written there; else they are removed and the kernel compiled again (one
  warning). Between the check and numba's read only this user's processes can change them (the
  directory and the files are private), and one file lock per directory keeps a writer's files
  and tags together.
- Files are written atomically (a temporary file in the same directory, then ``os.replace``; the
  temporary file is removed on any failure), mode 0600, directories 0700. A cache that cannot be
  written (read-only, full, not a directory) costs one warning naming ``ALPYKA_CACHE_DIR``: the
  kernel is then compiled in memory, without numba's disk cache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import linecache
import marshal
import os
import secrets
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from portable._errors import AlpykaWarning

from . import _trust
from ._locks import build_lock, flock_within, holder, lock_wait, warn_stuck_once

ENV_CACHE_DIR = "ALPYKA_CACHE_DIR"
_lock = threading.Lock()
_warn_lock = threading.Lock()
_warned: set[str] = set()  # the kinds of cache problem already reported by this process


def cache_dir() -> Path:
    """The directory of generated sources (and numba's cache files beside them)."""
    root = os.environ.get(ENV_CACHE_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "alpyka")
    return Path(root)


def _version() -> str:
    mod = sys.modules.get("portable")
    return getattr(mod, "__version__", "0")


def module_name(source: str, tag: str) -> str:
    """``alpyka_<tag>_<hash>``: the hash covers the generated source, the emitter tag and alpyka's
    version (the source embeds the kernel, its signature and every constant it captured)."""
    h = hashlib.sha256(f"{tag}\0{_version()}\0{source}".encode()).hexdigest()[:24]
    return f"alpyka_{tag}_{h}"


# ---------------------------------------------------------------------- warnings
def _warn_once(kind: str, message: str) -> None:
    with _warn_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    warnings.warn(message, AlpykaWarning, stacklevel=3)


def warn_cache_once(kind: str, message: str) -> None:
    """Give the cache warning ``message`` once per process per ``kind`` of problem."""
    _warn_once(kind, message)


def warn_cache_unwritable(where: Path | str, exc: BaseException, variable: str = ENV_CACHE_DIR) -> None:
    """Say once per process that a cache cannot be written, why, and the variable that moves it."""
    why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
    _warn_once(
        f"unwritable {variable}",
        f"the kernel cache {where} cannot be written ({why}): kernels are "
        f"compiled in memory for this process (the GPU emulator's in a private temporary directory; "
        f"each new one is compiled again in the next); set {variable} to a writable directory",
    )


def warn_cache_not_private(where: Path | str, problem: str, variable: str = ENV_CACHE_DIR) -> None:
    """Say once per process that a cache directory is not private to this user, so nothing in it
    is read or run."""
    _warn_once(
        f"not private {variable}",
        f"the kernel cache {where} is not private to this user ({problem}): nothing in it is "
        f"loaded or run, kernels are compiled in memory for this process (the GPU emulator's in a "
        f"private temporary directory); set {variable} to a directory of this user that no one "
        f"else can write (alpyka makes a missing one 0700)",
    )


def private_cache() -> Path | None:
    """:func:`cache_dir`, made 0700 where missing, when it is private to this user along its whole
    path (``_trust.path_problem``); None after one warning else (unwritable or not private)."""
    root = cache_dir()
    try:
        _trust.make_private_dirs(root)
    except OSError as exc:
        warn_cache_unwritable(root, exc)
        return None
    problem = _trust.path_problem(root)
    if problem is not None:
        warn_cache_not_private(root, problem)
        return None
    return root


def cache_key(root: Path) -> bytes | None:
    """The per-user secret of the private cache ``root``; None after one warning when it cannot
    be made (the cache is then not used)."""
    try:
        return _trust.user_key(root)
    except OSError as exc:
        warn_cache_unwritable(root, exc)
        return None


# ---------------------------------------------------------------------- files
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``
    (a reader never sees half a file), mode 0600. On any failure the temporary file is removed
    and the error raised; ``path`` is then as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a file of this user, writable by no one else, holding exactly ``data``
    (False when it cannot be read)."""
    return _trust.read_private_file(path, len(data) + 1) == data


def _stored(path: Path, data: bytes) -> bool:
    """Make ``path`` hold ``data``: True when it does (verified or rewritten), False when the
    cache cannot be written (warned once)."""
    if _holds(path, data):
        return True
    bad = os.path.lexists(path)
    try:
        write_atomic(path, data)
    except OSError as exc:
        warn_cache_unwritable(path.parent, exc)
        return False
    if bad:
        _warn_once(
            "mismatch",
            f"alpyka's kernel cache: {path} was not the kernel it is named after "
            f"(changed, truncated, appended to or not this user's own file); rewritten",
        )
    return True


# ---------------------------------------------------------------------- modules
def load_generated_module(source: str, tag: str) -> ModuleType:
    """Write ``source`` to the private cache directory (once, verified at each process's first
    use) and run it as a registered module compiled from ``source`` itself; in memory, without
    numba's disk cache, when the cache is not private or cannot be written."""
    name = module_name(source, tag)
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    with _lock:
        mod = sys.modules.get(name)
        if mod is not None:
            return mod
        root = private_cache()
        mod = None
        if root is not None and _ready(root) and _stored(root / f"{name}.py", source.encode()):
            try:
                mod = _import(name, source, root / f"{name}.py")
            except RuntimeError as exc:
                if "no locator available" not in str(exc):
                    raise
                warn_cache_unwritable(root / "__pycache__", exc)  # numba's own cache directory
        if mod is None:
            mod = _import(name, source, None)
        guard_numba_caches(mod)
        return mod


def _ready(root: Path) -> bool:
    """Make the cache's secret and numba's directory beside the modules (``__pycache__``, 0700
    where missing: numba would make it with the umask's mode); False after one warning when
    they cannot be made."""
    try:
        _trust.user_key(root)
        _trust.make_private_dirs(root / "__pycache__")
    except OSError as exc:
        warn_cache_unwritable(root, exc)
        return False
    return True


def _import(name: str, source: str, path: Path | None) -> ModuleType:
    """Run ``source`` as the module ``name``. With ``path`` (the verified file holding ``source``)
    the module's ``__file__`` is that file, for numba's cache and tracebacks, but the code run is
    ``source`` compiled by alpyka (:func:`_code`): Python's import, which would take a
    ``__pycache__/*.pyc`` whose header matches the file, is never used. Without ``path`` there is
    no ``__file__`` (the generated header then turns numba's disk cache off)."""
    filename = str(path) if path is not None else f"<alpyka in memory: {name}>"
    spec = importlib.machinery.ModuleSpec(name, None, origin=filename)
    spec.has_location = path is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache locator imports the module by name
    try:
        if path is None:
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            code = compile(source, filename, "exec")
        else:
            code = _code(source, path)
        exec(code, mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def _code(source: str, path: Path) -> CodeType:
    """``source`` compiled as the file ``path``: from ``<module>.code`` beside it (the marshalled
    code, tagged over its path, this Python's bytecode magic, the source's digest and the bytes)
    when the tag matches, else compiled and that file (re)written; compiling a module costs a few
    ms, reading it back a tenth of one."""
    cpath = path.with_suffix(".code")
    key = _trust.user_key(path.parent)
    head = importlib.util.MAGIC_NUMBER + hashlib.sha256(source.encode()).digest()
    raw = _trust.read_private_file(cpath)
    if raw is not None and _trust.tagged(key, str(cpath), head + raw[32:], raw[:32]):
        with contextlib.suppress(ValueError, EOFError, TypeError):
            code = marshal.loads(raw[32:])
            if isinstance(code, CodeType):
                return code
    code = compile(source, str(path), "exec")
    data = marshal.dumps(code)
    with contextlib.suppress(OSError):  # the next process compiles it again
        write_atomic(cpath, _trust.tag(key, str(cpath), head + data) + data)
    return code


# ---------------------------------------------------------------------- numba's files
def guard_numba_caches(mod: ModuleType) -> None:
    """Make the disk cache of each numba function of ``mod`` fail safe: numba reads its index and
    data files only when their tags say alpyka's process wrote them (else they are removed and the
    function compiled again and cached anew), a cache numba cannot write leaves the function
    compiled in memory, and one in a directory that is not private (``NUMBA_CACHE_DIR``) is not
    used at all (one warning)."""
    problems: dict[str, str | None] = {}
    key: bytes | None = None
    for obj in list(vars(mod).values()):
        cache = getattr(obj, "_cache", None)
        if cache is None or not hasattr(getattr(cache, "_cache_file", None), "_index_path"):
            continue  # not a numba function with a disk cache
        where = str(cache.cache_path)
        if where not in problems:
            problems[where] = _trust.path_problem(where)
        if problems[where] is None and key is None:
            root = private_cache()
            key = cache_key(root) if root is not None else None
        if problems[where] is not None or key is None:
            if problems[where] is not None:
                moved = os.environ.get("NUMBA_CACHE_DIR") or _numba_cache_dir()
                warn_cache_not_private(where, problems[where] or "", "NUMBA_CACHE_DIR" if moved else ENV_CACHE_DIR)
            cache.disable()
            continue
        cache.load_overload = functools.partial(_load_overload, cache, key, cache.load_overload)
        cache.save_overload = functools.partial(_save_overload, cache, key, cache.save_overload)
        obj.compile = functools.partial(_compile_once, _index(cache), obj.compile)


def _numba_cache_dir() -> str:
    from numba.core import config

    return str(getattr(config, "CACHE_DIR", "") or "")


def _index(cache: Any) -> Path:
    # numba's cache keeps its files' paths in its internals only (no public accessor)
    return Path(cache._cache_file._index_path)  # noqa: SLF001 - numba's cache: no public accessor


def _files(index: Path) -> list[Path]:
    """numba's files of one function: its index and the data files present."""
    stem = index.name[: -len(".nbi")]
    return [index, *sorted(index.parent.glob(f"{stem}.*.nbc"))]


def _tags_path(index: Path) -> Path:
    return index.with_name(index.name[: -len(".nbi")] + ".tags")


#: numba cache directories' locks another process kept past :func:`lock_wait` (set operations
#: only: atomic under the GIL)
_stuck: set[Path] = set()
#: the longest wait for a numba cache directory's lock (held for milliseconds by a writer): it is
#: waited for inside numba's compile, under numba's compiler lock, which every other thread of the
#: process needs to compile or load any numba function meanwhile
DIRECTORY_LOCK_LONGEST_S = 10.0


@contextlib.contextmanager
def _locked(index: Path, exclusive: bool):
    """One lock per numba cache directory, across processes: a writer's files and their tags are
    seen together. Yields whether it is held: False where another process kept it past
    ``min(lock_wait(), DIRECTORY_LOCK_LONGEST_S)`` (one warning; the caller then neither reads nor
    writes numba's files, the kernel is compiled and not cached)."""
    path = index.parent / "alpyka.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        # a lock already found stuck is only tried, not waited for again: one wait per process,
        # not two per kernel (load and save)
        wait = 0.0 if path in _stuck else min(lock_wait(), DIRECTORY_LOCK_LONGEST_S)
        held = flock_within(fd, exclusive, wait)
        if held:
            _stuck.discard(path)
        else:
            _stuck.add(path)
            warn_stuck_once("numba-files", path, holder(path, fd), wait, "numba's cache left alone, compiling")
        yield held
    finally:
        os.close(fd)  # releases the lock


_held = threading.local()  # .paths: the functions' indexes whose build lock this thread holds


def _held_here() -> set[Path]:
    paths = getattr(_held, "paths", None)
    if paths is None:
        paths = _held.paths = set()
    return paths


@contextlib.contextmanager
def _build_slot(index: Path) -> Iterator[None]:
    """Hold the build lock of one cached numba function (``<stem>.lock`` beside its index) on
    this thread, across threads and processes. It is waited for (at most :func:`lock_wait`) only
    where this thread does not hold numba's compiler lock: a thread waiting here never keeps the
    process's other threads from compiling, and one that holds numba's lock (a nested compile of
    a function the one being compiled calls) only tries it, so it never waits for a thread that
    waits for numba's lock. Taken once per thread (a recursive compile takes no second lock)."""
    from numba.core.compiler_lock import global_compiler_lock

    mine = _held_here()
    if index in mine:
        yield
        return
    with build_lock(index.with_name(index.name[: -len(".nbi")] + ".lock"), wait=not global_compiler_lock.is_locked()):
        mine.add(index)
        try:
            yield
        finally:
            mine.discard(index)


def _compile_once(index: Path, compile_: Any, sig: Any) -> Any:
    """numba's ``compile`` of one cached function, one process at a time across processes: a
    process that finds another compiling it waits (before numba's compiler lock:
    :func:`_build_slot`), then loads what that one saved instead of compiling it again (the
    processes of a test run, or of a user's pool, that start with the same kernels)."""
    with _build_slot(index):
        return compile_(sig)


@contextlib.contextmanager
def compile_slot(fn: Any) -> Iterator[None]:
    """Hold the build lock of the numba function ``fn`` of a generated module (one that
    :func:`guard_numba_caches` gave a disk cache; else nothing) on this thread: a caller that
    takes numba's compiler lock itself around a call that compiles ``fn`` takes this first, so
    the compile still waits for another process compiling it."""
    compile_ = getattr(fn, "compile", None)
    if isinstance(compile_, functools.partial) and compile_.func is _compile_once:
        with _build_slot(compile_.args[0]):
            yield
    else:
        yield


def _verified(index: Path, key: bytes) -> bool:
    """Whether every file numba may read for this function is this user's private file with the
    tag recorded when alpyka's process wrote it (True when there is no index: numba reads nothing)."""
    if not os.path.lexists(index):
        return True
    raw = _trust.read_private_file(_tags_path(index))
    try:
        tags = json.loads(raw) if raw is not None else {}
    except ValueError:
        return False
    for f in _files(index):
        data = _trust.read_private_file(f)
        if data is None or not _trust.tagged(key, f.name, data, tags.get(f.name)):
            return False
    return True


def _record(index: Path, key: bytes) -> None:
    """Tag numba's files of one function as they are now (mode 0600 first: no one else may change
    them), in ``<stem>.tags``."""
    tags = {}
    for f in _files(index):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f, 0o600, follow_symlinks=False)
            data = _trust.read_private_file(f)
            if data is not None:
                tags[f.name] = _trust.tag(key, f.name, data).hex()
    write_atomic(_tags_path(index), json.dumps(tags).encode())


def _drop_index(cache: Any) -> str:
    """Remove a numba function's index, data and tag files; returns the index's path."""
    index = _index(cache)
    for f in [*_files(index), _tags_path(index)]:
        with contextlib.suppress(OSError):
            f.unlink()
    return str(index)


def _warn_untagged(index: Path) -> None:
    _warn_once(
        "numba-tags",
        f"alpyka's kernel cache: numba's files {index} (or its data) are not the bytes alpyka "
        f"wrote there (changed, appended to, another's, or from before alpyka tagged them): "
        f"removed unread, the kernel is compiled again",
    )


def _load_overload(cache: Any, key: bytes, load: Any, sig: Any, target_context: Any) -> Any:
    index = _index(cache)
    try:
        with _locked(index, exclusive=False) as held:
            if not held:
                return None
            if _verified(index, key):
                return load(sig, target_context)
        with _locked(index, exclusive=True) as held:
            if held and not _verified(index, key):
                _drop_index(cache)
                _warn_untagged(index)
        return None
    except OSError as exc:
        warn_cache_unwritable(index.parent, exc)
        cache.disable()
        return None
    except Exception as exc:  # noqa: BLE001 - pickle, EOF, a library that cannot be rebuilt...
        with _locked(index, exclusive=True) as held:
            if held:
                _drop_index(cache)
        _warn_once(
            "numba-index",
            f"alpyka's kernel cache: numba could not load {index} or its data "
            f"({type(exc).__name__}: {exc}); removed, the kernel is compiled again",
        )
        return None


def _save_overload(cache: Any, key: bytes, save: Any, sig: Any, data: Any) -> None:
    index = _index(cache)
    try:
        with _locked(index, exclusive=True) as held:
            if not held:
                return
            if not _verified(index, key):
                _drop_index(cache)  # numba reads the index before it adds to it
            try:
                save(sig, data)
            finally:
                _record(index, key)
    except OSError as exc:
        warn_cache_unwritable(cache.cache_path, exc)
        cache.disable()
    except Exception as exc:  # noqa: BLE001 - an index that became unreadable since it was loaded
        with _locked(index, exclusive=True) as held:
            if held:
                _drop_index(cache)
        _warn_once(
            "numba-index",
            f"alpyka's kernel cache: numba could not update {index} ({type(exc).__name__}: {exc}); removed",
        )
