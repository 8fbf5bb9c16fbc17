"""The blocking OpenCL launch in one native call: backends/_opencl_native.c, built by the system's
C compiler once per compiler and Python into alpyka's private cache, verified before it is loaded
(:mod:`backends._shared_libraries`), bound to the OpenCL loader pyopencl uses.

A fast launcher of a blocking queue (backends/_opencl_launch.py: ``launcher``) runs its launches
with the very arguments of the last one through it: the queue's lock, the wait's choice, the
enqueue and a joined wait in one call (no Python between the enqueue and the wait). Where it
cannot be built (no C compiler, no Python headers, no OpenCL loader ctypes can open)
:func:`native_problem` says why, and the Python launcher runs alone: the same launches, about
1 us of Python more each."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pyopencl as cl

from ._gpu_launch import same_value
from ._opencl_waits import opencl_library, use_native_hand_over
from ._shared_libraries import Library, build_once, compiler_version, library_cache, load_cached

SOURCE = Path(__file__).with_suffix(".c")
MODULE = "_alpyka_opencl_native"
#: ``-fasynchronous-unwind-tables``: a daemon thread stopped at the interpreter's end while it takes
#: the GIL back (in this library's C) is unwound as one in ``time.sleep``
FLAGS = ("-O2", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden", "-fasynchronous-unwind-tables", "-w")
#: the switch that turns the native launch off (``0``: every launch by the Python launcher)
SWITCH = "ALPYKA_OPENCL_NATIVE"
#: what the library calls in the OpenCL loader, in the order ``bind`` takes them
ENTRY_POINTS = ("clEnqueueNDRangeKernel", "clWaitForEvents", "clReleaseEvent", "clRetainEvent")
CACHE_DIR, LIBRARY = "opencl_native", "alpyka's native OpenCL launch library"

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "module" (or None) and "problem" once probed


class Waiting:
    """What ``OpenCLQueue.last_event`` holds while a native launch waits for its command, one
    per launch (``is_idle`` is False then; the launch puts None back after its wait unless
    another command was enqueued meanwhile)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a native launch waiting>"


def _compilers() -> list[list[str]]:
    """The compilers to try, each as its command's words (``$CC`` may hold several: ``ccache gcc``)."""
    names = [shlex.split(os.environ["CC"])] if os.environ.get("CC", "").strip() else []
    return names + [["cc"], ["gcc"], ["clang"]]


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_loader(MODULE, loader, origin=str(path))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _identity(path: str) -> str:
    """What a library's cache key holds of the compiler at ``path``: its real path, size and
    modification time (no process started; another compiler there is another key)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


#: :func:`_build`'s reason where it was asked to load a cached library only, and none is cached
_NOT_CACHED = "not built yet"


def _build(build: bool = True) -> tuple[ModuleType | None, str | None]:
    """(the module, None), or (None, why it is not there): built where no cached library is found,
    unless ``build`` is False (then (None, :data:`_NOT_CACHED`))."""
    from portable import StateError
    from portable.env import env_flag

    if not env_flag(SWITCH, True, meaning=": build and use the native launch, or not"):
        return None, f"turned off ({SWITCH}=0)"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return None, f"no Python headers ({include}/Python.h; e.g. apt install python3-dev)"
    lib = opencl_library()
    if lib is None:
        return None, "ctypes finds no OpenCL loader"
    try:
        entries = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value for f in ENTRY_POINTS]
    except AttributeError as exc:
        return None, f"the OpenCL loader ctypes opened lacks an entry point ({exc})"
    text = SOURCE.read_text()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    tried, seen = [], set()
    for words in _compilers():
        path = shutil.which(words[0])
        if path is None:
            tried.append(f"{' '.join(words)}: not found")
            continue
        identity = _identity(path)
        if identity in seen:  # (cc and gcc: one compiler)
            continue
        seen.add(identity)
        key_text = "\0".join([text, identity, *words[1:], sys.version, suffix, *FLAGS])
        lib_name = f"{CACHE_DIR}-{hashlib.sha256(key_text.encode()).hexdigest()[:32]}{suffix}"
        command = [path, *words[1:], *FLAGS, f"-I{include}", "-x", "c"]
        cache = library_cache(CACHE_DIR)
        try:
            module = load_cached(cache, lib_name, LIBRARY, _load) if cache is not None else None
            if module is None and not build:
                continue
            if module is None:
                module, _, log = build_once(Library(command, text, "opencl_native.c", lib_name, LIBRARY, _load), cache)
                if module is None:
                    tried.append(f"{' '.join(words)}: {' '.join(log.split())[-300:]}")
                    continue
        except (OSError, ImportError, subprocess.SubprocessError) as exc:
            tried.append(f"{' '.join(words)}: {type(exc).__name__}: {exc}")
            continue
        module.bind(*entries, StateError, time.perf_counter)
        use_native_hand_over(module.hand_over)
        _state["compiler"] = path
        return module, None
    if not build:
        return None, _NOT_CACHED
    return None, "no C compiler built it (" + "; ".join(tried) + "); install gcc, or set CC to a C compiler"


def native_module(build: bool = True) -> ModuleType | None:
    """The built module, or None (:func:`native_problem` says why); built or loaded once a process.
    ``build`` False: loaded only where a library built before is cached (an OpenCL queue, when it
    is made: a first build takes 0.2-0.5 s, which the first blocking launch pays instead), else
    None, and a later call builds it."""
    with _lock:
        if "module" not in _state:
            if not build and _state.get("uncached"):
                return None  # (looked for once a process: a later build=True call builds it)
            try:
                module, problem = _build(build)
                if problem is _NOT_CACHED:
                    _state["uncached"] = True
                    return None
                _state["module"], _state["problem"] = module, problem
            except Exception as exc:  # noqa: BLE001 - any failure to build is a reason to launch in Python
                _state["module"], _state["problem"] = None, f"{type(exc).__name__}: {exc}"
                from portable import AlpykaWarning

                warnings.warn(
                    f"alpyka launches on blocking OpenCL queues in Python: the native launch failed to load "
                    f"({_state['problem']})",
                    AlpykaWarning,
                    stacklevel=2,
                )
        return _state["module"]


def native_problem() -> str | None:
    """None when blocking OpenCL launches run natively here, else why they do not."""
    native_module()
    return _state["problem"]


def native_compiler() -> str | None:
    """The compiler that built the native launch (its version line and path), None without it."""
    native_module()
    path = _state.get("compiler")
    if path is None:
        return None
    found = compiler_version(path)
    return found if isinstance(found, str) else f"{found[1]} ({found[0]})"


def blocking_launch(
    impl: Any,
    python: Callable[[tuple], None],
    set_fresh: Callable[[tuple], None],
    knl: cl.Kernel,
    glob: tuple,
    local: tuple | None,
    last: list,
    cell: list,
) -> Callable[[tuple], None] | None:
    """``run(args)`` of a blocking queue's fast launcher, native (see the module's docstring):
    ``set_fresh(args)``, the Python launcher's, sets arguments that are not the last launch's;
    ``python``, the Python launcher, raises the runtime's error for a failed enqueue; ``last``
    is its list of the last arguments, ``cell`` of the time cell of their work (a one-item list:
    the seconds its last run took). None where the library is not there."""
    module = native_module()
    if module is None:
        return None
    waits = impl.waits
    native = module.BlockingLaunch(
        impl,
        impl.lock,
        python,
        waits.choose,
        waits.wait_chosen,
        impl.flush_cq,
        cl.Event.from_int_ptr,
        same_value,
        last,
        cell,
        Waiting,
        knl,
        set_fresh,
        impl.cq.int_ptr,
        tuple(int(g) for g in glob),
        None if local is None else tuple(int(x) for x in local),
    )
    return native.run
