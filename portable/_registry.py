"""The backend registry: which backends exist, which load here, and why the others do not."""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - see below
import importlib
import os
import threading
from typing import TYPE_CHECKING

from ._errors import BackendUnavailable
from .env import EMULATED_BACKENDS, emulate as _emulate_env

# Backends import their libraries on first use (numba at a CPU backend's first compile, torch,
# cupy...), and that first use may come from a user thread that the interpreter waits for after
# the main thread returned (backends/_thread_pool.py: launches keep working then). threading
# refuses new shutdown hooks from then on, and concurrent.futures.thread registers one when first
# imported, as numba 0.68 does through scipy: "RuntimeError: can't register atexit after
# shutdown". So it is imported with alpyka, while the interpreter is whole (~5 ms).

if TYPE_CHECKING:
    from ._allocator import CachingAllocator
    from ._backend import Backend
    from ._device import Device

#: backends that may offer page-locked host memory (``Backend.pinned_allocator``), in order
PINNED_PROVIDERS = ("cuda", "rocm")

#: every backend alpyka knows, in order of preference for "the fastest CPU backend" and friends
BACKEND_NAMES = ("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm")

_lock = threading.RLock()
_loaded: dict[str, "Backend"] = {}
_reasons: dict[str, str] = {}

#: the backends that run on the GPU emulator (backends/emulator/fake_cupy_kernels.py) in this
#: process, real cupy or not: ``ALPYKA_EMULATE``, read when alpyka is imported, or :func:`emulate`
_emulated: list[str] = _emulate_env()


def emulate(names: list[str]) -> None:
    """Run the backends ``names`` (cuda, rocm) on the GPU emulator in this process from now on,
    as ``ALPYKA_EMULATE`` does at import (alpyka's own test suite calls this). ValueError for
    another name or for a backend already loaded for real."""
    with _lock:
        for name in names:
            if name not in EMULATED_BACKENDS:
                raise ValueError(f"the GPU emulator runs {', '.join(EMULATED_BACKENDS)}, not {name!r}")
            if name in _emulated:
                continue
            if name in _loaded:
                raise ValueError(f"backend {name!r} is already loaded for real; emulate it before its first use "
                                 f"(set ALPYKA_EMULATE={name} before starting Python)")
            _reasons.pop(name, None)
            _emulated.append(name)


def emulated() -> list[str]:
    """The backends that run on the GPU emulator in this process (``ALPYKA_EMULATE``)."""
    return list(_emulated)


def _import(name: str) -> "Backend":
    """Load backend ``name``: its module's ``load()``, or the GPU emulator's for an emulated one."""
    if name in _emulated:
        return importlib.import_module("backends.emulator.fake_cupy_kernels").load(name)
    return importlib.import_module(f"backends.{name}").load()


def _load(name: str) -> "Backend | None":
    with _lock:
        if name in _loaded:
            return _loaded[name]
        if name in _reasons:
            return None
        try:
            backend = _import(name)
        except BackendUnavailable as exc:
            _reasons[name] = str(exc)
            return None
        except ImportError as exc:
            _reasons[name] = f"backend {name!r} could not be imported: {exc}"
            return None
        except Exception as exc:  # a driver or runtime failure: unavailable, with the reason
            _reasons[name] = f"backend {name!r} failed to load: {type(exc).__name__}: {exc}"
            return None
        _loaded[name] = backend
        return backend


def backends() -> list[str]:
    """Names of every backend alpyka knows, available here or not."""
    return list(BACKEND_NAMES)


def available_backends() -> list[str]:
    """Names of the backends usable on this machine."""
    return [n for n in BACKEND_NAMES if _load(n) is not None]


def unavailable_backends() -> dict[str, str]:
    """``{name: reason}`` for every backend that cannot be used here."""
    for n in BACKEND_NAMES:
        _load(n)
    return {n: _reasons[n] for n in BACKEND_NAMES if n in _reasons}


def get_backend(name: str) -> "Backend":
    """The loaded backend ``name``; a clear error for unknown or unavailable ones."""
    loaded = _loaded.get(name)  # fast path: every kernel launch asks for its device's backend
    if loaded is not None:
        return loaded
    if not isinstance(name, str) or name not in BACKEND_NAMES:
        raise ValueError(f"unknown backend {name!r}; known backends are {', '.join(BACKEND_NAMES)}")
    backend = _load(name)
    if backend is None:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {_reasons[name]}")
    return backend


def devices(backend: str) -> list["Device"]:
    """All devices of ``backend``."""
    return list(get_backend(backend).devices())


def device(backend: str, index: int = 0) -> "Device":
    """Device ``index`` of ``backend`` (``pk.device("cuda", 1)``)."""
    devs = devices(backend)
    if not 0 <= index < len(devs):
        raise IndexError(f"backend {backend!r} has {len(devs)} device(s); index {index} is out of range")
    return devs[index]


def host() -> "Device":
    """The host device: CPU memory that every backend can copy to and from."""
    return device("cpu_serial")


def default_backend() -> str:
    """``ALPYKA_BACKEND`` if set, else the fastest CPU backend available (cpu_threads)."""
    env = os.environ.get("ALPYKA_BACKEND")
    if env:
        get_backend(env)
        return env
    for name in ("cpu_threads", "cpu_serial"):
        if _load(name) is not None:
            return name
    return available_backends()[0]


def pinned_host_allocator() -> "CachingAllocator | None":
    """Page-locked host memory (``pk.Buffer(pk.host(), ..., pinned=True)``): the allocator of the
    first backend of :data:`PINNED_PROVIDERS` available here that offers one, else None."""
    for name in PINNED_PROVIDERS:
        backend = _load(name)
        if backend is not None:
            allocator = backend.pinned_allocator()
            if allocator is not None:
                return allocator
    return None
