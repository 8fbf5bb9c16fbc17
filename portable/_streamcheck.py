"""The ``"stream"`` check: a buffer used on one queue while another queue's unfinished work writes
it (or written while another queue's unfinished work reads it), with no event wait in between.

On under ``ALPYKA_DEBUG=1`` (every backend) and on queues of emulated devices (``ALPYKA_EMULATE``
with ``ALPYKA_EMULATE_CHECKS`` on); off, nothing here runs (the checked launch path reads the flag,
the fast path never reaches this module). Bookkeeping is a vector clock per queue and per host:
every launch, copy and fill on a queue is a step of that queue; ``q.record(ev)`` stores the queue's
clock in the event, ``other.wait_for(ev)`` merges it into ``other``'s, and the host's waits
(``q.wait()``, ``ev.wait()``, a host read of a buffer, ``is_idle()``/``is_complete()`` answering
True, every enqueue of a blocking queue) merge into the host's clock, which every later enqueue
inherits. Each buffer keeps its unordered accesses (queue, step, byte range, read or write); an
access conflicts with another queue's write (or, when it writes, another queue's read) of an
overlapping range that its queue's clock does not cover. Which kernel arguments a kernel writes is
read from its typed IR (stores and atomics, through device functions); a const view is read only.
"""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from typing import Any

from ._errors import AlpykaError
from ._registry import emulated
from .env import debug_flag, emulate_checks

_environ = getattr(os.environ, "_data", None) if os.name == "posix" else None
_DEBUG = b"ALPYKA_DEBUG" if isinstance(_environ, dict) else "ALPYKA_DEBUG"
if not isinstance(_environ, dict):
    _environ = os.environ

_lock = threading.Lock()
#: the host's clock: queue number -> the step of that queue the host knows finished
_host: dict[int, int] = {}
#: root buffer -> its accesses not yet known to be ordered before everything: [_Access]
_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_numbers = [0]
#: accesses kept per buffer (the oldest are forgotten past this: fewer reports, never false ones)
ACCESSES_MAX = 64


class _QState:
    """One queue's number, step count and clock (what it is ordered after)."""

    __slots__ = ("number", "step", "clock", "label")

    def __init__(self, queue: Any) -> None:
        _numbers[0] += 1
        self.number = _numbers[0]
        self.step = 0
        self.clock: dict[int, int] = {}
        self.label = f"queue #{self.number}"


class _Access:
    __slots__ = ("queue", "step", "lo", "hi", "write", "what", "label")

    def __init__(self, queue: int, step: int, lo: int, hi: int, write: bool, what: str, label: str) -> None:
        self.queue, self.step, self.lo, self.hi, self.write, self.what, self.label = (
            queue,
            step,
            lo,
            hi,
            write,
            what,
            label,
        )


def active(queue: Any) -> bool:
    """Whether the stream check watches work on ``queue`` now."""
    if debug_flag(_environ.get(_DEBUG)):
        return True
    emu = queue.__dict__.get("_sc_emulated")
    if emu is None:
        emu = queue.__dict__["_sc_emulated"] = queue.device.backend_name in emulated()
    return emu and emulate_checks()


def _state(queue: Any) -> _QState:
    st = queue.__dict__.get("_sc")
    if st is None:
        st = queue.__dict__["_sc"] = _QState(queue)
    return st


def _merge(into: dict[int, int], clock: dict[int, int]) -> None:
    for q, s in clock.items():
        if into.get(q, 0) < s:
            into[q] = s


# ----------------------------------------------------------------------------- ordering
def note_record(queue: Any, event: Any) -> None:
    """``queue.record(event)``: the event carries the queue's clock (its own steps included)."""
    with _lock:
        st = _state(queue)
        _merge(st.clock, _host)
        clock = dict(st.clock)
        clock[st.number] = st.step
        event.__dict__["_sc_clock"] = clock


def note_wait_for(queue: Any, event: Any) -> None:
    """``queue.wait_for(event)``: later work of ``queue`` is ordered after the event's record."""
    clock = event.__dict__.get("_sc_clock")
    if clock is not None:
        with _lock:
            _merge(_state(queue).clock, clock)


def note_event_done(event: Any) -> None:
    """The host saw ``event`` complete (``ev.wait()``, ``ev.is_complete()`` True)."""
    clock = event.__dict__.get("_sc_clock")
    if clock is not None:
        with _lock:
            _merge(_host, clock)


def note_queue_done(queue: Any) -> None:
    """The host saw all work enqueued so far on ``queue`` finish (``q.wait()``, ``is_idle()``)."""
    st = queue.__dict__.get("_sc")
    if st is not None:
        with _lock:
            _merge(_host, st.clock)
            if _host.get(st.number, 0) < st.step:
                _host[st.number] = st.step


# ----------------------------------------------------------------------------- accesses
#: portable.compiler's KernelCheckError, handed over by ``portable/__init__.py`` (the core does not
#: import the compiler); an AlpykaError until then
_CheckError: Any = None


def use_check_error(cls: type) -> None:
    """Called once by ``portable``: the error class (kind ``"stream"``) a conflict raises."""
    global _CheckError
    _CheckError = cls


_Buffer: Any = None  # portable._buffer.Buffer, which registers itself (it imports this module's users)


def register_buffer_type(cls: type) -> None:
    """Called once by ``portable._buffer``: the class :func:`root_buffer` looks for."""
    global _Buffer
    _Buffer = cls


def root_buffer(obj: Any) -> Any:
    """The Buffer owning the memory behind ``obj`` (a Buffer, a view, a collection), or None."""
    if _Buffer is None:  # portable._buffer not imported yet: no buffer exists
        return None
    if not isinstance(obj, _Buffer):
        owner = getattr(obj, "owner", None)  # soa.View
        obj = owner if owner is not None else getattr(obj, "buffer", None)  # PortableCollection
        if not isinstance(obj, _Buffer):
            return None
    return obj.__dict__.get("_base", obj)


def _site() -> str:
    """``file:line`` of the user's call (the first frame outside alpyka's own packages)."""
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_OWN_DIRS):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


_OWN_DIRS = tuple(
    os.path.dirname(os.path.abspath(p)) + os.sep
    for p in (__file__, *(os.path.join(os.path.dirname(__file__), "..", d, "x") for d in ("soa", "backends")))
)


def note_uses(queue: Any, uses: list[tuple[Any, int, int, bool]], what: str) -> None:
    """Check and record one step of ``queue`` that touches ``uses`` ((root buffer, lo, hi,
    writes)); KernelCheckError of kind ``"stream"`` (nothing recorded) when it conflicts."""
    if not uses:
        return
    site = _site()
    with _lock:
        st = _state(queue)
        _merge(st.clock, _host)
        for buf, lo, hi, write in uses:
            for acc in _buffers.get(buf, ()):
                if acc.queue == st.number or not (acc.write or write) or acc.hi <= lo or hi <= acc.lo:
                    continue
                if st.clock.get(acc.queue, 0) >= acc.step:
                    continue
                message = _message(buf, st, write, what, site, acc)
                raise _CheckError(message, "stream") if _CheckError is not None else AlpykaError(message)
        st.step += 1
        for buf, lo, hi, write in uses:
            kept = [
                a
                for a in _buffers.get(buf, ())
                if not (a.queue == st.number and write and lo <= a.lo and a.hi <= hi) and _host.get(a.queue, 0) < a.step
            ]
            kept.append(_Access(st.number, st.step, lo, hi, write, f"{what} ({site})", st.label))
            _buffers[buf] = kept[-ACCESSES_MAX:]
        if queue.blocking:
            _host[st.number] = st.step


def _message(buf: Any, st: _QState, write: bool, what: str, site: str, acc: _Access) -> str:
    mine, theirs = "writes" if write else "reads", "writes" if acc.write else "reads"
    return (
        f"{what} ({site}): stream: {mine} {buf!r} on {st.label} while {acc.what} on {acc.label} "
        f"{theirs} it and may not have finished: no event wait orders them. Record a pk.Event on "
        f"queue #{acc.queue} after that work and call wait_for(event) on queue #{st.number} before "
        f"this (or wait for queue #{acc.queue} on the host first)"
    )


def note_copy(queue: Any, dst: Any, src: Any, what: str) -> None:
    """A ``pk.memcpy`` (``src`` None: a ``pk.memset``) of MemRefs on ``queue``."""
    uses = []
    for ref, write in ((dst, True), (src, False)):
        if ref is None:
            continue
        buf = root_buffer(ref.owner)
        if buf is not None:
            uses.append((buf, ref.offset, ref.offset + ref.nbytes, write))
    note_uses(queue, uses, what)


def note_launch(queue: Any, workdiv: Any, kernel: Any, args: tuple, written: frozenset[int] | None = None) -> None:
    """A kernel launch on ``queue``: its buffer arguments, written where its IR stores to them
    (``written``: those argument indices, known already)."""
    if written is None:
        try:
            written = written_args(kernel, args, workdiv)
        except (AlpykaError, TypeError, ValueError):  # bad arguments: the launch reports them
            return
    uses = []
    for k, a in enumerate(args):
        buf = root_buffer(a)
        if buf is not None:
            write = k in written and not getattr(a, "const", False)
            uses.append((buf, 0, buf.nbytes, write))
    note_uses(queue, uses, f"kernel {kernel.__name__!r}")


def checked_run(queue: Any, workdiv: Any, kernel: Any, args: tuple, run: Any) -> Any:
    """A fast launcher's ``run`` for launches like ``args`` that checks each launch first while
    the check is on (the fast path keeps its speed with the check: the written arguments of
    these argument types are known once)."""
    written = written_args(kernel, args, workdiv)

    def run_checked(a: tuple) -> None:
        if active(queue):
            note_launch(queue, workdiv, kernel, a, written)
        run(a)

    return run_checked


def written_args(kernel: Any, args: tuple, workdiv: Any) -> frozenset[int]:
    """The indices of the arguments whose memory the kernel stores to or updates atomically."""
    return kernel.written_args(args, workdiv.dim)
