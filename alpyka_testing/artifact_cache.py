"""Test artifacts that take long to build (an AOTInductor package, exported ONNX / torch.export
files, the demo's trained model) cached by content under ``$ALPYKA_CACHE_DIR/test-artifacts``
(default ``~/.cache/alpyka``), so a CI run with a kept cache directory, or a second worker of
the same run, reuses them instead of building them again.

The key hashes everything an artifact is made from: the source files given (the model's
definition, the code that builds it), the versions of the packages given, Python's version, the
platform and, for compiled code, the CPU's instruction-set flags. A change to any of them makes a
new key, so a stale artifact is never used; old keys are left for the user to delete.

The artifacts are loaded as code (an AOTInductor package is a shared library, a torch file holds
pickles): the cache is used only where ``$ALPYKA_CACHE_DIR`` is private to this user along its
path (``portable.compiler.trust``); elsewhere each process builds them in a private temporary
directory (removed at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """``$ALPYKA_CACHE_DIR/test-artifacts`` (default ``~/.cache/alpyka/test-artifacts``)."""
    root = os.environ.get("ALPYKA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "alpyka")
    return Path(root) / "test-artifacts"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _cpu_flags() -> str:
    """The CPU's instruction-set flags (compiled code may use any of them)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def content_key(sources: Iterable[Path], packages: Iterable[str] = (), compiled: bool = False, extra: str = "") -> str:
    """A hash of the sources' bytes (with their names), the packages' versions, Python, the
    platform and (``compiled``) the CPU flags."""
    h = hashlib.sha256()
    for path in sorted(Path(p) for p in sources):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in sorted(packages):
        h.update(f"{dist}={_version(dist)}\0".encode())
    h.update(f"{sys.version}\0{platform.machine()}\0{sys.platform}\0{extra}\0".encode())
    if compiled:
        h.update(_cpu_flags().encode())
    return h.hexdigest()[:20]


def cached_dir(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The directory ``<cache>/<name>-<key>``, made by ``build(tmp_dir)`` when absent.

    ``build`` fills a private directory beside it, which is then renamed into place in one step:
    two workers building at once both succeed and one result is kept; a build that fails leaves
    nothing behind. Under pytest the build runs outside the running test's time limit, with one
    of its own (``hang_guard.outside_the_test_timeout``): minutes of build on a busy machine do
    not end the worker of the test that needed the artifact first."""
    root = cache_root()
    final = root / f"{name}-{key}"
    if not _private(root):
        return _built_privately(name, key, build)
    if final.is_dir():
        return final
    tmp = root / f".{name}-{key}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with _build_time():
            build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another worker put it in place first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


_private_builds: dict[tuple[str, str], Path] = {}


def _private(root: Path) -> bool:
    from portable.compiler import trust

    try:
        trust.make_private_dirs(root)
    except OSError:
        return False
    return trust.path_problem(root) is None


def _built_privately(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The artifact built once per process in a private temporary directory (removed at exit)."""
    got = _private_builds.get((name, key))
    if got is None:
        got = Path(tempfile.mkdtemp(prefix=f"alpyka-{name}-"))
        atexit.register(shutil.rmtree, got, True)
        try:
            with _build_time():
                build(got)
        except BaseException:
            shutil.rmtree(got, ignore_errors=True)
            raise
        _private_builds[(name, key)] = got
    return got


def _build_time() -> Any:
    """The hang guard's :func:`outside_the_test_timeout` where its plugin runs, else nothing."""
    guard = sys.modules.get("alpyka_testing.hang_guard")
    return guard.outside_the_test_timeout() if guard is not None else contextlib.nullcontext()
