"""The on-disk cache of generated kernel modules: real files (numba's ``cache=True`` needs them)
under ``ALPYKA_CACHE_DIR`` (default ``~/.cache/alpyka``), named by a hash of what they contain."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

_lock = threading.Lock()


def cache_dir() -> Path:
    """The directory of generated sources (and numba's cache files beside them)."""
    root = os.environ.get("ALPYKA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "alpyka")
    return Path(root)


def _version() -> str:
    mod = sys.modules.get("portable")
    return getattr(mod, "__version__", "0")


def module_name(source: str, tag: str) -> str:
    """``alpyka_<tag>_<hash>``: the hash covers the generated source, the emitter tag and alpyka's
    version (the source embeds the kernel, its signature and every constant it captured)."""
    h = hashlib.sha256(f"{tag}\0{_version()}\0{source}".encode()).hexdigest()[:24]
    return f"alpyka_{tag}_{h}"


def load_generated_module(source: str, tag: str) -> ModuleType:
    """Write ``source`` to the cache directory (once) and import it as a registered module."""
    name = module_name(source, tag)
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    with _lock:
        mod = sys.modules.get(name)
        if mod is not None:
            return mod
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{name}.py"
        if not path.exists():
            fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                fh.write(source)
            os.replace(tmp, path)  # atomic: concurrent processes never see half a file
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # numba's cache locator imports the module by name
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
        return mod
