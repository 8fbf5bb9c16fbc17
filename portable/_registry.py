"""The backend registry: which backends exist, which load here, and why the others do not.

Backends are plugins: each registers under the entry-point group ``alpyka.backends`` (name ->
factory), alpyka's own five included (:data:`BUILTIN_BACKENDS` where the metadata lacks them),
or in-process through :func:`register_backend`. Nothing is imported before a backend is first
used, and a backend whose import or factory fails is unavailable with the reason."""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - see below
import difflib
import importlib
import importlib.metadata
import os
import threading
import types
from typing import Any

from ._errors import ArgumentError, ArgumentTypeError, BackendUnavailable, EnvVarError
from .env import EMULATED_BACKENDS, read_at_import

# Backends import their libraries on first use (numba at a CPU backend's first compile, torch,
# cupy...), and that first use may come from a user thread that the interpreter waits for after
# the main thread returned (backends/_thread_pool.py: launches keep working then). threading
# refuses new shutdown hooks from then on, and concurrent.futures.thread registers one when first
# imported, as numba 0.68 does through scipy: "RuntimeError: can't register atexit after
# shutdown". So it is imported with alpyka, while the interpreter is whole (~5 ms).

#: the entry-point group backends register under (pyproject.toml registers alpyka's own five)
GROUP = "alpyka.backends"

#: alpyka's own backends as pyproject.toml registers them under :data:`GROUP`, in order of
#: preference: used where the installed metadata does not list them (a source checkout run
#: with PYTHONPATH, or an install made before the group existed). The one place that names them.
BUILTIN_BACKENDS = {
    "cpu_serial": "backends.cpu_serial:load",
    "cpu_threads": "backends.cpu_threads:load",
    "opencl": "backends.opencl:load",
    "cuda": "backends.cuda:load",
    "rocm": "backends.rocm:load",
}

#: the factory of a backend that ALPYKA_EMULATE runs on the CPU's GPU emulator, called with the
#: backend's name: it stands in for the backend's own factory in this process
EMULATOR_FACTORY = "backends.emulator.fake_cupy_kernels:load"

#: every built-in backend, in order of preference (``pk.backends()`` adds the plugins)
BACKEND_NAMES = tuple(BUILTIN_BACKENDS)

#: the CPU backends ``pk.default_backend()`` prefers, fastest first
_DEFAULT_PREFERENCE = ("cpu_threads", "cpu_serial")

#: the backend of ``pk.host()``: host memory every backend copies to and from
HOST_BACKEND = "cpu_serial"

_lock = threading.RLock()
#: loaded backends (:class:`portable.spi.Backend` s: typed Any, since the backend interface sits
#: above the core, which never imports it)
_loaded: dict[str, Any] = {}
_reasons: dict[str, str] = {}
#: name -> factory (a callable returning a Backend, a module with ``load()``, or a
#: ``"module:attr"`` / ``"module"`` string naming one): registered in this process by
#: :func:`register_backend`, or found under :data:`GROUP` (None until first asked)
_factories: dict[str, Any] | None = None
_programmatic: dict[str, Any] = {}
#: plugins found under :data:`GROUP` and not used, ``{"NAME (from DIST)": reason}``: a built-in's
#: name taken by another distribution, a name a second distribution registers too
_refused: dict[str, str] = {}
#: the check of a plugin's ``devices()`` (:func:`check_devices_with`; a no-op until it is set)
_device_check: Any = lambda name, devices: None  # noqa: E731

#: the backends that run on the GPU emulator (backends/emulator/fake_cupy_kernels.py) in this
#: process, real cupy or not: ``ALPYKA_EMULATE``, read when alpyka is imported, or :func:`emulate`
# the emulator's ALPYKA_EMULATE_THREADS/_SEED too: a bad value fails the import, not a launch
_emulated: list[str] = read_at_import()


def _entry_points() -> dict[str, Any]:
    """``{name: entry point}`` of :data:`GROUP` in the installed metadata. A built-in's name is
    taken from alpyka's own distribution only (another package cannot replace cuda), and a name
    from the first distribution that registers it; each plugin left out is in :data:`_refused`
    with the reason (``pk.unavailable_backends()``, ``alpyka info``)."""
    found: dict[str, Any] = {}
    _refused.clear()
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        label = f"{ep.name} (from {dist or 'an unnamed distribution'})"
        if ep.name in BUILTIN_BACKENDS and dist not in (None, "alpyka"):
            _refused[label] = (
                f"distribution {dist!r} registers a backend named {ep.name!r} under {GROUP}, the name of "
                f"alpyka's own {ep.name} backend, which it cannot replace; it is not loaded (the plugin's "
                f"package must register it under another name)"
            )
            continue
        if ep.name in found:
            first = getattr(getattr(found[ep.name], "dist", None), "name", None)
            _refused[label] = (
                f"distribution {dist!r} registers a backend named {ep.name!r} under {GROUP}, as {first!r} "
                f"does already; only the first is loaded (uninstall one, or rename its entry point)"
            )
            continue
        found[ep.name] = ep
    return found


def _discover() -> dict[str, Any]:
    """Every registered backend's factory: the built-ins in their order (from the metadata,
    else :data:`BUILTIN_BACKENDS`), then plugins alphabetically; :func:`register_backend`'s
    registrations take their name's place or come with the plugins."""
    global _factories
    with _lock:
        if _factories is None:
            eps = _entry_points()
            found: dict[str, Any] = {n: eps.pop(n, target) for n, target in BUILTIN_BACKENDS.items()}
            for name in sorted(eps):
                found[name] = eps[name]
            _factories = found
        merged = dict(_factories)
        for name, factory in _programmatic.items():
            merged[name] = factory
        return {n: merged[n] for n in [*BUILTIN_BACKENDS, *sorted(set(merged) - set(BUILTIN_BACKENDS))]}


def register_backend(name: str, factory: Any, replace: bool = False) -> None:
    """Register backend ``name`` in this process, as an ``alpyka.backends`` entry point does:
    ``factory`` is a callable returning a :class:`~portable.spi.Backend`, a module with
    ``load()``, or a ``"module:attr"`` string naming either (imported at the backend's first use).
    ValueError for a name that is not an identifier, one registered already (unless
    ``replace``) or a backend already loaded."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"a backend's name is an identifier (devices are named 'NAME:N'), got {name!r}")
    with _lock:
        if name in _loaded:
            raise ArgumentError(f"backend {name!r} is already loaded; register it before its first use")
        if not replace and name in _discover():
            raise ArgumentError(f"backend {name!r} is registered already; pass replace=True to replace it")
        _programmatic[name] = factory
        _reasons.pop(name, None)


def emulate(names: list[str]) -> None:
    """Run the backends ``names`` (cuda, rocm) on the GPU emulator in this process from now on,
    as ``ALPYKA_EMULATE`` does at import (alpyka's own test suite calls this). ValueError for
    another name or for a backend already loaded for real."""
    with _lock:
        for name in names:
            if name not in EMULATED_BACKENDS:
                raise ArgumentError(f"the GPU emulator runs {', '.join(EMULATED_BACKENDS)}, not {name!r}")
            if name in _emulated:
                continue
            if name in _loaded:
                raise ArgumentError(
                    f"backend {name!r} is already loaded for real; emulate it before its first use "
                    f"(set ALPYKA_EMULATE={name} before starting Python)"
                )
            _reasons.pop(name, None)
            _emulated.append(name)


def emulated() -> list[str]:
    """The backends that run on the GPU emulator in this process (``ALPYKA_EMULATE``)."""
    return list(_emulated)


def _resolve(target: Any) -> Any:
    """A factory's callable: an entry point's or ``"module:attr"`` string's object, loaded now;
    a module's ``load``."""
    if hasattr(target, "load") and hasattr(target, "group"):  # an importlib.metadata.EntryPoint
        target = target.load()
    elif isinstance(target, str):
        module, _, attr = target.partition(":")
        target = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            target = getattr(target, part)
    if isinstance(target, types.ModuleType):
        target = getattr(target, "load", None)
        if target is None:
            raise BackendUnavailable("its module defines no load()")
    if not callable(target):
        raise BackendUnavailable(f"its factory is not callable ({type(target).__name__})")
    return target


def _factory(name: str) -> Any:
    """Backend ``name``'s factory. A built-in's needs no scan of the installed metadata (about
    10 ms of CPU over ~200 distributions, at a process's first ``pk.device``): only alpyka's own
    distribution may register its name, and under :data:`BUILTIN_BACKENDS`' target."""
    with _lock:
        if name in _programmatic:
            return _programmatic[name]
        if _factories is None and name in BUILTIN_BACKENDS:
            return BUILTIN_BACKENDS[name]
    return _discover()[name]


def _import(name: str) -> Any:
    """Load backend ``name``: its registered factory, or the GPU emulator's for an emulated one.
    A plugin's backend is checked here: what its ``devices()`` returns must be its devices."""
    if name in _emulated:
        return _resolve(EMULATOR_FACTORY)(name)
    backend = _resolve(_factory(name))()
    if not callable(getattr(backend, "devices", None)) or not callable(getattr(backend, "launch", None)):
        raise BackendUnavailable(f"its factory returned a {type(backend).__name__}, not a portable.spi.Backend")
    if name not in BUILTIN_BACKENDS or name in _programmatic:  # (the built-ins are alpyka's own)
        _device_check(name, backend.devices())
    return backend


def check_devices_with(check: Any) -> None:
    """Set the check of a plugin's ``devices()`` (``check(name, devices)``, raising
    BackendUnavailable): :mod:`portable._device`, the layer above that defines devices, sets it
    when it is imported (portable imports it before any backend can load)."""
    global _device_check
    _device_check = check


def _load(name: str) -> Any:
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
        except Exception as exc:  # noqa: BLE001 - a driver or runtime failure: unavailable, with the reason
            _reasons[name] = f"backend {name!r} failed to load: {type(exc).__name__}: {exc}"
            return None
        except SystemExit as exc:  # a plugin's import or factory must not end the caller's process
            _reasons[name] = (
                f"backend {name!r} called sys.exit({exc.code!r}) while it loaded; it is left out (the "
                f"plugin's package must raise an exception instead)"
            )
            return None
        _loaded[name] = backend
        return backend


def backends() -> list[str]:
    """Names of every registered backend, available here or not: the built-ins in their order
    (cpu_serial, cpu_threads, opencl, cuda, rocm), then plugins alphabetically."""
    return list(_discover())


def available_backends() -> list[str]:
    """Names of the backends usable on this machine."""
    return [n for n in backends() if _load(n) is not None]


def unavailable_backends() -> dict[str, str]:
    """``{name: reason}`` for every backend that cannot be used here; a plugin left out because
    its name is taken (a built-in's, or another distribution's) under ``"NAME (from DIST)"``."""
    names = backends()
    for n in names:
        _load(n)
    out = {n: _reasons[n] for n in names if n in _reasons}
    with _lock:
        out.update(_refused)  # plugins left out by name: "NAME (from DIST)"
    return out


def get_backend(name: str) -> Any:
    """The loaded backend ``name`` (a :class:`portable.spi.Backend`); a clear error for unknown or
    unavailable ones."""
    loaded = _loaded.get(name)  # fast path: every kernel launch asks for its device's backend
    if loaded is not None:
        return loaded
    if not (isinstance(name, str) and name in BUILTIN_BACKENDS):  # a built-in is known without a scan
        known = backends()
        if not isinstance(name, str):
            raise ArgumentTypeError(f"a backend is named by a str ({', '.join(known)}), got {type(name).__name__}")
        if name not in known:
            base, _, index = name.partition(":")
            close = difflib.get_close_matches(base, known, n=1, cutoff=0.7)
            hint = f"did you mean {close[0]!r}? " if close else ""
            if index and base in known:
                hint = f"pk.devices({base!r})[{index}] is device {index} of a backend; "
            raise ArgumentError(
                f"unknown backend {name!r}; {hint}known backends are {', '.join(known)} "
                f"(pk.available_backends() lists those usable here)"
            )
    backend = _load(name)
    if backend is None:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {_reasons[name]}")
    return backend


def default_backend() -> str:
    """``ALPYKA_BACKEND`` if set, else the fastest CPU backend available (cpu_threads)."""
    env = os.environ.get("ALPYKA_BACKEND")
    if env:
        try:  # the user typed no name here: the message says where it came from
            get_backend(env)
        except ArgumentError as exc:
            raise EnvVarError(
                f"environment variable ALPYKA_BACKEND={env!r}: {exc}; set it to one, or unset it"
            ) from None
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"environment variable ALPYKA_BACKEND={env!r}: {exc}; or unset it") from None
        return env
    for name in _DEFAULT_PREFERENCE:
        if _load(name) is not None:
            return name
    return available_backends()[0]
