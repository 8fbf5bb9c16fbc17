"""Captured graphs: ``with pk.capture(q) as graph:`` records the kernels, copies and fills
enqueued on ``q`` inside the block without running them; ``graph.launch()`` enqueues the whole
recording again on ``q`` (CUDA graphs' model: the same buffers and scalar arguments each time).

Each launch, copy and fill is checked once, at capture time, as ``pk.exec``/``memcpy``/``memset``
check it (work division, arguments, devices), and handed to the backend's recorder
(``Backend.recorder(queue)``, a :class:`~portable.spi.Recorder`), which keeps it prepared: the
compiled plan with its packed arguments, the native copy call. ``graph.launch()`` enqueues the
prepared work with no per-launch Python checks: one queue task on the CPU backends, the native
enqueues in order on OpenCL, a CUDA graph (cupy's stream capture) on cuda. A backend without a
recorder replays the calls through its normal path.

Inside the block, what a graph cannot hold is a :class:`CaptureError` naming it: ``q.wait()``,
host functions (``enqueue_host``/``enqueue_native``), events (``record``/``wait_for``), host reads
of buffers with queue work pending, work on another queue, a nested capture. ``q.is_idle()`` is
allowed (it sees the work enqueued before the block). An exception inside the block discards the
recording; the queue stays usable.

The hooks in pk.exec, memcpy, memset, the queue's methods and the buffers' host reads test
:data:`active` first: no capture anywhere, one truth test per call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._errors import AlpykaError, ArgumentTypeError
from ._handoff import note_queue


class CaptureError(AlpykaError, RuntimeError):
    """Something a captured graph cannot hold was done inside ``pk.capture`` (a wait, a host
    function, an event, a host read, work on another queue, a nested capture), or a graph that
    holds no recording was launched."""


#: the captures in progress, on any thread (the hooks' fast test: empty means none)
active: list = []
_local = threading.local()

#: what to do instead, per refused queue operation
_HINTS = {
    "wait()": "the captured work has not run (a capture records, it runs nothing); call q.wait() after "
    "graph.launch(), outside the with block",
    "enqueue_host()": "a host function is not part of a captured graph; enqueue it after graph.launch(), "
    "outside the with block",
    "enqueue_native()": "native work is not part of a captured graph; enqueue it after graph.launch(), "
    "outside the with block",
    "record()": "events are not part of a captured graph; record the event after graph.launch()",
    "wait_for()": "events are not part of a captured graph; make the queue wait before the with block",
}


class _Capture:
    """One capture in progress: its queue, the backend's recorder and what the graph keeps."""

    __slots__ = ("queue", "recorder", "keep", "graph", "count")

    def __init__(self, queue: Any, recorder: Any, graph: Graph) -> None:
        self.queue, self.recorder, self.graph = queue, recorder, graph
        self.keep: dict[int, Any] = {}  # id -> object: buffers, views, memory owners (deduplicated)
        self.count = 0

    def hold(self, objs: tuple) -> None:
        keep = self.keep
        for o in objs:
            if o is not None:
                keep.setdefault(id(o), o)


def _mine() -> _Capture | None:
    return getattr(_local, "capture", None)


def _other_queue(cap: _Capture, queue: Any, what: str) -> CaptureError:
    return CaptureError(
        f"{what} on {queue!r} inside pk.capture({cap.queue!r}): a graph records one queue; "
        f"enqueue on the other queue outside the with block, or capture it separately"
    )


def refuse(queue: Any, what: str) -> None:
    """CaptureError when this thread is capturing (``queue``'s ``what``: ``"wait()"``, ...);
    other threads use their queues as usual."""
    cap = _mine()
    if cap is None:
        return
    if queue is not cap.queue:
        raise _other_queue(cap, queue, f"q.{what}")
    raise CaptureError(f"q.{what} inside pk.capture({queue!r}): {_HINTS.get(what, 'not part of a captured graph')}")


def refuse_host_read(queue: Any) -> None:
    """CaptureError for a host read (``np.asarray(buf)``, ``.numpy()``, DLPack on the host) of
    memory with work of ``queue`` noted on it, from a thread that is capturing."""
    cap = _mine()
    if cap is not None and queue is not None:
        raise CaptureError(
            f"a host read (np.asarray, .numpy(), DLPack) of memory used on {queue!r} inside "
            f"pk.capture({cap.queue!r}): the captured work has not run; read it after "
            "graph.launch() and q.wait(), outside the with block"
        )


def _recorder_for(queue: Any, what: str) -> _Capture | None:
    cap = _mine()
    if cap is None:
        return None
    if queue is not cap.queue:
        raise _other_queue(cap, queue, what)
    return cap


def record_launch(queue: Any, workdiv: Any, kernel: Any, args: tuple) -> bool:
    """pk.exec's hook: True when the launch was recorded (this thread captures ``queue``; the
    work division was checked already, the backend's recorder checks the rest now)."""
    cap = _recorder_for(queue, f"pk.exec of {getattr(kernel, '__name__', kernel)!r}")
    if cap is None:
        return False
    cap.recorder.launch(workdiv, kernel, args)
    cap.hold(args)
    cap.count += 1
    note_queue(queue, args)  # host reads of these buffers inside the block are refused
    return True


def record_copy(queue: Any, dst: Any, src: Any) -> bool:
    """memcpy's hook (``dst``/``src``: checked MemRefs): True when recorded."""
    cap = _recorder_for(queue, "pk.memcpy")
    if cap is None:
        return False
    cap.recorder.copy(dst, src)
    cap.hold((dst.owner, src.owner))
    cap.count += 1
    note_queue(queue, (dst.owner, src.owner))
    return True


def record_fill(queue: Any, dst: Any, value: int) -> bool:
    """memset's hook (``dst``: a checked MemRef): True when recorded."""
    cap = _recorder_for(queue, "pk.memset")
    if cap is None:
        return False
    cap.recorder.fill(dst, value)
    cap.hold((dst.owner,))
    cap.count += 1
    note_queue(queue, (dst.owner,))
    return True


class ReplayRecorder:
    """The recorder of a backend that declares none: the calls themselves, replayed through the
    backend's normal ``launch``/``copy``/``fill`` (checked again at each replay)."""

    def __init__(self, backend: Any, queue: Any) -> None:
        self.backend, self.queue = backend, queue
        self.calls: list[tuple] = []

    def launch(self, workdiv: Any, kernel: Any, args: tuple) -> None:
        self.calls.append((self.backend.launch, (self.queue, workdiv, kernel, args)))

    def copy(self, dst: Any, src: Any) -> None:
        self.calls.append((self.backend.copy, (self.queue, dst, src)))

    def fill(self, dst: Any, value: int) -> None:
        self.calls.append((self.backend.fill, (self.queue, dst, value)))

    def finish(self, keep: tuple) -> Callable[[], None]:
        calls = tuple(self.calls)

        def replay() -> None:
            for fn, args in calls:
                fn(*args)

        return replay


class Graph:
    """What ``pk.capture(q)`` records: ``launch()`` enqueues it on ``q`` again (any number of
    times, with the buffers and scalars of the capture). It holds the buffers it uses (a CUDA
    graph does not: here dropping them cannot free memory a later launch writes)."""

    __slots__ = ("queue", "operations", "_replay", "_keep", "_why", "__weakref__")

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.operations = 0  #: kernels, copies and fills recorded
        self._replay: Callable[[], None] | None = None
        self._keep: tuple = ()
        self._why = "the graph is still being captured: launch it after the with block"

    def launch(self) -> None:
        """Enqueue the recording on the graph's queue (no per-launch checks)."""
        replay = self._replay
        if replay is None:
            raise CaptureError(self._why)
        if active and _mine() is not None:
            raise CaptureError(
                f"graph.launch() inside pk.capture({_mine().queue!r}): graphs do not nest; "
                "launch it outside the with block"
            )
        replay()
        note_queue(self.queue, self._keep)  # interchange consumers wait for the replayed work

    def end_capture(self, recorder: Any, keep: tuple, raised: type | None) -> None:
        """The end of ``pk.capture``'s block: the graph replays what ``recorder`` built
        (``recorder.finish(keep)``, holding ``keep``), or, when the block raised (``raised``, the
        exception's type) or building failed, ``launch()`` says why it holds nothing."""
        if raised is not None:
            self._why = (
                f"the with block of pk.capture raised {raised.__name__}: its recording was discarded; capture again"
            )
            return
        try:
            self._replay = recorder.finish(keep)
        except BaseException as err:
            self._why = f"building the graph failed ({err!r}); capture again"
            raise
        self._keep = keep

    def __repr__(self) -> str:
        state = "ready" if self._replay is not None else "empty"
        return f"<Graph of {self.operations} operations on {self.queue}: {state}>"


class capture:
    """``with pk.capture(queue) as graph:`` records the kernels, copies and fills enqueued on
    ``queue`` in the block (by this thread) without running them; ``graph.launch()`` enqueues
    the recording again on ``queue``. See the module docstring for what the block refuses."""

    __slots__ = ("queue", "_cap")

    def __init__(self, queue: Any) -> None:
        if not hasattr(queue, "_impl") or not hasattr(queue, "device"):  # a pk.Queue (_queue.py imports this module)
            raise ArgumentTypeError(
                f"pk.capture needs a pk.Queue, got {type(queue).__name__}: pk.capture(pk.Queue(pk.device(...)))"
            )
        self.queue = queue
        self._cap: _Capture | None = None

    def __enter__(self) -> Graph:
        q = self.queue
        mine = _mine()
        if mine is not None:
            raise CaptureError(
                f"pk.capture({q!r}) inside pk.capture({mine.queue!r}): captures do not nest; "
                "end the first with block first"
            )
        if any(c.queue is q for c in list(active)):
            raise CaptureError(
                f"pk.capture({q!r}): another thread is capturing this queue; capture it from one thread at a time"
            )
        backend = q.device.backend
        make = getattr(backend, "recorder", None)
        recorder = (make(q) if make is not None else None) or ReplayRecorder(backend, q)
        cap = self._cap = _Capture(q, recorder, Graph(q))
        _local.capture = cap
        active.append(cap)
        return cap.graph

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        cap = self._cap
        self._cap = None
        _local.capture = None
        active.remove(cap)
        cap.graph.operations = cap.count
        cap.graph.end_capture(cap.recorder, tuple(cap.keep.values()), exc_type)


__all__ = [
    "CaptureError",
    "Graph",
    "ReplayRecorder",
    "active",
    "capture",
    "record_copy",
    "record_fill",
    "record_launch",
    "refuse",
    "refuse_host_read",
]
