"""The on-disk cache of generated kernel modules: real files (numba's ``cache=True`` needs them)
under ``ALPYKA_CACHE_DIR`` (default ``~/.cache/alpyka``), named by a hash of what they contain.

Nothing on disk is trusted: a cached module is used only when its bytes are the source alpyka
generated in this process (else it is rewritten, with one warning); a numba index or data file
beside it that numba cannot read is removed and the kernel compiled again (one warning). Files
are written atomically (a temporary file in the same directory, then ``os.replace``; the
temporary file is removed on any failure) with the umask's mode. A cache that cannot be written
(read-only, full, not a directory) costs one warning naming ``ALPYKA_CACHE_DIR``: the kernel is
then compiled in memory, without numba's disk cache.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import linecache
import os
import secrets
import sys
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from portable._errors import AlpykaWarning

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
    import hashlib

    h = hashlib.sha256(f"{tag}\0{_version()}\0{source}".encode()).hexdigest()[:24]
    return f"alpyka_{tag}_{h}"


# ---------------------------------------------------------------------- warnings
def _warn_once(kind: str, message: str) -> None:
    with _warn_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    warnings.warn(message, AlpykaWarning, stacklevel=3)


def warn_cache_unwritable(where: Path | str, exc: BaseException, variable: str = ENV_CACHE_DIR) -> None:
    """Say once per process that a cache cannot be written, why, and the variable that moves it."""
    why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
    _warn_once(
        f"unwritable {variable}",
        f"the kernel cache {where} cannot be written ({why}): kernels are "
        f"compiled in memory for this process (each new one is compiled again in the next); set "
        f"{variable} to a writable directory",
    )


# ---------------------------------------------------------------------- files
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``
    (a reader never sees half a file), mode 0666 less the umask. On any failure the temporary
    file is removed and the error raised; ``path`` is then as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o666)
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
    """Whether the file at ``path`` holds exactly ``data`` (False when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(data) + 1) == data
    except OSError:
        return False


def _stored(path: Path, data: bytes) -> bool:
    """Make ``path`` hold ``data``: True when it does (verified or rewritten), False when the
    cache cannot be written (warned once)."""
    if _holds(path, data):
        return True
    bad = os.path.lexists(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    except OSError as exc:
        warn_cache_unwritable(path.parent, exc)
        return False
    if bad:
        _warn_once(
            "mismatch",
            f"alpyka's kernel cache: {path} was not the kernel it is named after "
            f"(changed, truncated or unreadable); rewritten",
        )
    return True


# ---------------------------------------------------------------------- modules
def load_generated_module(source: str, tag: str) -> ModuleType:
    """Write ``source`` to the cache directory (once, verified at each process's first use) and
    import it as a registered module; in memory when the cache cannot be written."""
    name = module_name(source, tag)
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    with _lock:
        mod = sys.modules.get(name)
        if mod is not None:
            return mod
        path = cache_dir() / f"{name}.py"
        mod = None
        if _stored(path, source.encode()):
            try:
                mod = _import(name, importlib.util.spec_from_file_location(name, path), None)
            except RuntimeError as exc:
                if "no locator available" not in str(exc):
                    raise
                warn_cache_unwritable(path.parent / "__pycache__", exc)  # numba's own cache directory
        if mod is None:
            mod = _import(name, importlib.util.spec_from_loader(name, loader=None), source)
        guard_numba_caches(mod)
        return mod


def _import(name: str, spec: Any, source: str | None) -> ModuleType:
    """Execute a module registered as ``name``: from its file, or ``source`` in memory (no
    ``__file__``: the generated header then turns numba's disk cache off)."""
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache locator imports the module by name
    try:
        if source is None:
            assert spec.loader is not None
            spec.loader.exec_module(mod)
        else:
            filename = f"<alpyka in memory: {name}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            exec(compile(source, filename, "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


# ---------------------------------------------------------------------- numba's files
def guard_numba_caches(mod: ModuleType) -> None:
    """Make the disk cache of each numba function of ``mod`` fail safe: an index or data file
    numba cannot load is removed (the function is compiled again and its cache rewritten), and
    a cache numba cannot write leaves the function compiled in memory."""
    for obj in list(vars(mod).values()):
        cache = getattr(obj, "_cache", None)
        if cache is None or not hasattr(getattr(cache, "_cache_file", None), "_index_path"):
            continue  # not a numba function with a disk cache
        cache.load_overload = functools.partial(_load_overload, cache, cache.load_overload)
        cache.save_overload = functools.partial(_save_overload, cache, cache.save_overload)


def _drop_index(cache: Any) -> str:
    """Remove a numba function's index and data files; returns the index's path."""
    # numba's cache keeps its files' paths in its internals only (no public accessor)
    cf = cache._cache_file  # noqa: SLF001 - numba's cache: its file paths have no public accessor
    index = Path(cf._index_path)  # noqa: SLF001 - (as above)
    stem = index.name[: -len(".nbi")]
    for f in [index, *index.parent.glob(f"{stem}.*.nbc")]:
        with contextlib.suppress(OSError):
            f.unlink()
    return str(index)


def _load_overload(cache: Any, load: Any, sig: Any, target_context: Any) -> Any:
    try:
        return load(sig, target_context)
    except Exception as exc:  # noqa: BLE001 - pickle, EOF, a library that cannot be rebuilt...
        index = _drop_index(cache)
        _warn_once(
            "numba-index",
            f"alpyka's kernel cache: numba could not load {index} or its data "
            f"({type(exc).__name__}: {exc}); removed, the kernel is compiled again",
        )
        return None


def _save_overload(cache: Any, save: Any, sig: Any, data: Any) -> None:
    try:
        save(sig, data)
    except OSError as exc:
        warn_cache_unwritable(cache._cache_path, exc)  # noqa: SLF001 - numba's internals: no public accessor
        cache.disable()
    except Exception as exc:  # noqa: BLE001 - an index that became unreadable since it was loaded
        index = _drop_index(cache)
        _warn_once(
            "numba-index",
            f"alpyka's kernel cache: numba could not update {index} ({type(exc).__name__}: {exc}); removed",
        )
