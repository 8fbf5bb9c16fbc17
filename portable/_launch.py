"""Kernel launches: the checks before a kernel is enqueued, and the hand-over to the backend.

``pk.exec`` and ``Queue.enqueue`` (portable._queue, one layer up) look up the fast path and
launch through here.

**The fast path.** Once a work division object has launched a kernel on a queue twice through
the checked path, the queue keeps a *fast launcher* for it and the argument types of that
launch: a guard generated for those types (:func:`fast_guard`: per
argument its type, dtype object, rank, flags, device; for ints their range) around the
backend's prepared launch (``Backend.launcher``: the compiled plan, the native call, nothing
checked again) and the interchange bookkeeping prepared for those types
(``portable/_handoff.py: noter``). A later launch whose arguments pass the guard, with
``ALPYKA_DEBUG`` unchanged and no capture running, is the guard plus the native call. Anything
else, a new dtype, byte order, rank, device, argument count, takes the checked path (and may
leave a fast launcher of its own, at most :data:`TYPES_PER_SITE` per kernel and work division).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ._errors import ArgumentTypeError, WorkDivError
from ._graph import active as _capturing
from ._graph import record_launch
from ._handoff import note_queue, noter
from ._registry import get_backend
from ._streamcheck import active as _stream_active
from ._streamcheck import checked_run, note_launch
from ._workdiv import WorkDiv
from .caches import IdentityCache, LRUCache

#: CPython's raw environment (bytes keys, read at every launch): ALPYKA_DEBUG's value object.
#: Measured (timeit, interleaved, loaded 2-core machine): the read takes 0.05 us, os.environ.get
#: 2.8-3.1 us, on a warm cpu_serial launch of 7.1-8.2 us, so ~40% of the launch; os.environ.get
#: also makes a new str per call where the guard below compares identities.
_environ = getattr(os.environ, "_data", None) if os.name == "posix" else None
_DEBUG = b"ALPYKA_DEBUG" if isinstance(_environ, dict) else "ALPYKA_DEBUG"
if not isinstance(_environ, dict):
    _environ = os.environ
#: fast launchers kept per kernel and work division (argument types beyond: the checked path)
TYPES_PER_SITE = 4
#: work divisions remembered per kernel and queue (the least recently used forgotten first)
SITES_MAX = 64


class _Site:
    """One kernel and work division on one queue: the fast launchers of its argument types and
    the ``ALPYKA_DEBUG`` value object they were made under."""

    __slots__ = ("workdiv", "debug", "fast", "checked")

    def __init__(self, workdiv: WorkDiv, debug: Any) -> None:
        self.workdiv, self.debug = workdiv, debug
        self.fast: tuple = ()  # fast(args) -> bool, newest last
        self.checked = 1  # launches through the checked path


def checked_launch(queue: Any, workdiv: WorkDiv, kernel: Any, args: tuple, site: _Site | None = None) -> None:
    """``pk.exec`` (portable._queue) with every check, for a pk.Queue; leaves a fast launcher on
    the queue for launches like this one (the second time this work division launches ``kernel``
    here). ``site``: the launch's site on the queue, where it has one."""
    if not isinstance(workdiv, WorkDiv):
        raise WorkDivError(f"exec needs a pk.WorkDiv second, got {type(workdiv).__name__}")
    if not hasattr(kernel, "__alpyka_kernel__"):
        raise ArgumentTypeError(f"{getattr(kernel, '__name__', kernel)!r} is not a kernel; decorate it with @pk.kernel")
    dev = queue.device
    if _checked.get(workdiv) is not dev:  # checked once per device
        workdiv.check(dev)
        _checked[workdiv] = dev
    if _capturing and record_launch(queue, workdiv, kernel, args):  # inside pk.capture (portable/_graph.py)
        return
    backend = get_backend(dev.backend_name)
    debug = _environ.get(_DEBUG)
    if _stream_active(queue):  # the "stream" check (portable/_streamcheck.py)
        note_launch(queue, workdiv, kernel, args)
    backend.launch(queue, workdiv, kernel, args)
    note_queue(queue, args)  # interchange consumers of these buffers wait for this queue
    _remember(queue, workdiv, kernel, args, backend, debug, site)


def _remember(
    queue: Any, workdiv: WorkDiv, kernel: Any, args: tuple, backend: Any, debug: Any, site: _Site | None
) -> None:
    """Count a checked launch at its site; from the second on, add a fast launcher for the
    types of ``args`` where the backend prepares one (see the module docstring)."""
    make = getattr(backend, "launcher", None)
    if make is None or callable(getattr(kernel, "dynamic_shared_bytes", None)):  # (sized by each launch's values)
        return
    if site is None or site.workdiv is not workdiv or site.debug is not debug:
        sites = queue.launch_sites
        per_kernel = sites.get(kernel)
        if per_kernel is None:
            per_kernel = sites[kernel] = LRUCache(SITES_MAX)
        per_kernel[id(workdiv)] = _Site(workdiv, debug)  # holds the WorkDiv: its id stays its own
        return
    queue.launch_sites[kernel].get(id(workdiv))  # a checked launch marks its site used (the fast path only reads)
    site.checked += 1
    if len(site.fast) >= TYPES_PER_SITE:
        return
    run = make(queue, workdiv, kernel, args)
    if run is not None and _stream_active(queue):  # its fast launcher checks each launch too
        run = checked_run(queue, workdiv, kernel, args, run)
    fast = fast_guard(args, kernel.signature(args), run, noter(queue, args)) if run is not None else None
    if fast is not None:
        site.fast += (fast,)


#: work division (by identity) -> the device it last passed ``WorkDiv.check`` for
_checked = IdentityCache(1024)


# ----------------------------------------------------------------------------- guards
#: numpy's flag bits a launch depends on: C-contiguous (checked) and writeable (the const key)
_FLAGS_MASK = 0x1 | 0x400  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: generated guard makers, by the structure of their test (the objects are their parameters)
_GUARD_MAKERS = LRUCache(4096)


def _guard_terms(i: int, a: Any, key: tuple, objs: dict[str, Any]) -> list[str] | None:
    """The tests that argument ``a{i}`` is what ``a`` (signature key ``key``) was to the checks
    (objects compared by identity go into ``objs``); None for an argument with no fast guard."""
    t = type(a)
    objs[f"T{i}"] = t
    terms = [f"type(a{i}) is T{i}"]
    kind = key[0]
    if kind == "array" and t is np.ndarray:
        objs[f"D{i}"] = a.dtype
        terms += [
            f"a{i}.dtype is D{i}",
            f"a{i}.ndim == {a.ndim}",
            f"a{i}.flags.num & {_FLAGS_MASK} == {a.flags.num & _FLAGS_MASK}",
        ]
    elif kind == "buffer":
        objs[f"D{i}"], objs[f"V{i}"] = a.dtype, a.device
        terms += [f"a{i}.dtype is D{i}", f"len(a{i}.shape) == {len(a.shape)}", f"a{i}.device is V{i}"]
    elif kind == "view":
        objs[f"L{i}"], objs[f"V{i}"] = a.layout, a.device
        terms += [f"a{i}.layout is L{i}", f"a{i}.const is {bool(a.const)}", f"a{i}.device is V{i}"]
    elif kind != "scalar":
        return None
    elif t is int:
        terms.append(
            f"{_INT64_MIN} <= a{i} <= {_INT64_MAX}"
            if _INT64_MIN <= a <= _INT64_MAX
            else f"{_INT64_MAX} < a{i} < {2**64}"
        )
    elif not (t in (float, bool) or t.__module__ == "numpy"):
        return None  # a subclass of a scalar kind: checked at each launch
    return terms


def fast_guard(
    args: tuple, key: tuple, run: Callable[[tuple], None], notes: tuple | None = None
) -> Callable[[tuple], bool] | None:
    """``fast(args2)``: ``run(args2)`` and True when ``args2`` has what every check and the
    compiled plan of a launch with ``args`` (signature key ``key``) depend on (per argument:
    its type; the dtype object, rank and flags of an array; the dtype, rank and device of a
    buffer; the layout, constness and device of a view; the range of an int), else False at
    once (the caller takes the checked path). Objects are compared by identity: an equal but
    distinct dtype (``>f4`` read from a file) just takes the checked path. ``notes``: ``(ref,
    [(index, last_queue_of)])`` (portable/_handoff.py: noter), set after the launch. None when an
    argument has no guard (a subclass of a kind: checked at each launch)."""
    objs: dict[str, Any] = {"_run": run, "_ref": None}
    tests = []
    for i, a in enumerate(args):
        terms = _guard_terms(i, a, key[i], objs)
        if terms is None:
            return None
        tests += terms
    n = len(args)
    lines = [f"if len(args) != {n}:", "    return False"]
    if n:
        lines.append("".join(f"a{i}, " for i in range(n)) + "= args")
        lines.append("if not (" + "\n        and ".join(tests) + "):")
        lines.append("    return False")
    lines.append("_run(args)")
    if notes is not None:
        objs["_ref"] = notes[0]
        for i, get in notes[1]:
            objs[f"G{i}"] = get
            lines += [f"_l = G{i}(a{i})", "if _l is not None:", "    _l.ref = _ref"]
    lines.append("return True")
    body = "".join(f"        {x}\n" for x in lines)
    src = f"def make({', '.join(objs)}):\n    def fast(args):\n{body}    return fast\n"
    make = _GUARD_MAKERS.get(src)
    if make is None:
        ns: dict[str, Any] = {}
        exec(src, ns)
        make = _GUARD_MAKERS[src] = ns["make"]
    return make(**objs)
