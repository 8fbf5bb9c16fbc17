"""The backend interface (service-provider interface): the one module that declares what a
backend implements, and that hands backends the pieces of the core they may reuse.

A backend is a factory (a callable, or a module's ``load()``) returning a :class:`Backend`,
registered under the entry-point group ``alpyka.backends`` (name -> factory; alpyka's own five in
``backends/<name>.py`` the same way) or in-process with ``portable.register_backend``; it raises
:class:`~portable.BackendUnavailable` (with the reason) when it cannot run here. Each device it
makes declares its :class:`DeviceCapabilities` (execution model, host-addressable memory, C
dialect, torch device type, warp size, emulated, DLPack device type): the rest of alpyka asks
those, never the backend's name (docs/backends.md, "Writing a backend"). Backends import only
this module, the public ``portable`` package (errors, ``Buffer``, ``portable.compiler``) and
``soa``; tests/portable/test_layering.py checks it.

What a backend provides (declared here, nowhere else):

- :class:`Backend` (the base class to derive from): devices, queues, events, memory, copies
  and kernel launches;
- :class:`QueueImpl`: what ``Backend.create_queue`` returns; ``pk.Queue`` calls it;
- :class:`EventImpl`: what ``Backend.create_event`` returns; ``pk.Event`` and queues of every
  backend call it (:class:`Waitable` is the part other backends' queues wait on);
- :class:`Allocator`: what ``Backend.allocator`` returns (:class:`CachingAllocator` is one);
  buffers hold :class:`MemoryBlock` s of it, and ``copy``/``fill`` receive :class:`MemRef` s;
- optionally ``Backend.recorder(queue)`` -> :class:`Recorder`: what ``pk.capture`` hands each
  launch, copy and fill of a captured block (without it, graphs replay the normal calls).

What a backend is handed: a :class:`KernelHandle` (the kernel of a launch: its name, argument
checks, typed IR and shared memory size, and a slot where the backend keeps its compiled plans
for it, a :class:`PlanCache`), ``pk.Queue`` s, work divisions, :class:`Device` s and
:class:`MemRef` s.

What a backend may reuse: :class:`HostQueue` / :class:`HostEvent` (queues run by a host worker
thread, alpaka's ``QueueCpu*``), :class:`ErrorLog` (which ``wait()`` reports which asynchronous
error), the worker threads (:func:`start_worker`, :func:`stop_worker`, :func:`before_workers_stop`),
:class:`CachingAllocator`, :func:`run_deferred` (the allocator's safe point),
:func:`pinned_host_allocator`, :func:`signature_key` and :func:`c_strides`; a backend reaches
the implementation behind a ``pk.Queue`` it is handed through :func:`queue_impl`.

The core below this module never imports it (tests/portable/test_layering.py: no import circle
runs through it, type-only imports included): it calls backends through the methods declared
here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ._allocator import AllocatorStats, CachingAllocator, MemoryBlock, MemRef, pinned_host_allocator
from ._buffer import c_strides
from ._deferred import run_deferred
from ._device import DLPACK_CPU, DLPACK_CUDA, DLPACK_OPENCL, DLPACK_ROCM, Device, DeviceCapabilities, DeviceLimits
from ._errorlog import ErrorLog
from ._errors import ArgumentTypeError
from ._hostqueue import HostEvent, HostQueue, check_not_own_worker, warn_unseen
from ._queue import Queue
from ._workers import Worker, before_workers_stop, start_worker, stop_worker
from .compiler._signature import signature_key

if TYPE_CHECKING:
    from soa import ArrayFactory

    from ._workdiv import WorkDiv
    from .compiler.ir import KernelDef

_T = TypeVar("_T")


# ----------------------------------------------------------------------------- kernels
@runtime_checkable
class KernelHandle(Protocol):
    """What a backend may use of the kernel it is handed (``Backend.launch``, ``launcher``,
    ``kernel_thread_limit``, ``Recorder.launch``): a ``@pk.kernel`` object, read through these
    members only (tests/portable/test_spi.py checks backends/ and the test plugin backend).

    - ``__name__``: the kernel's name, for messages;
    - ``param_names``: its parameter names after ``acc`` (messages about one argument);
    - ``fast_math``: whether the kernel allows FMA contraction and fast math (the IR says so too);
    - ``dynamic_shared_bytes``: None when the kernel uses no dynamic shared memory, else what
      :meth:`shared_bytes` evaluates (an int, or a function of the work division and arguments);
    - ``signature(args)``: the signature key of a launch with ``args`` (:func:`signature_key`):
      what the compiled code depends on, the part of a plan's key that comes from the arguments;
    - ``check_args(args, device)``: KernelArgumentError for arguments the kernel cannot take on
      ``device`` (count, kinds, dtypes, memory it cannot reach); done once per compiled plan;
    - ``ir(key, ndim, debug)``: the typed IR (:class:`portable.compiler.ir.KernelDef`) for a
      signature key, a dimension and the ``ALPYKA_DEBUG`` range checks; cached, thread-safe;
    - ``shared_bytes(workdiv, args)``: the launch's dynamic shared memory per block in bytes;
    - ``slot(owner, make)``: the object ``owner`` keeps with this kernel, made by ``make()`` on
      the first ask (thread-safe: every caller gets the same one). The kernel never looks inside
      and frees it with itself. A backend keeps its compiled plans there, in a :class:`PlanCache`
      under its own name (:meth:`Backend.plans`).
    """

    __name__: str
    fast_math: bool
    dynamic_shared_bytes: int | Callable[..., int] | None

    @property
    def param_names(self) -> list[str]: ...

    def signature(self, args: tuple) -> tuple: ...

    def check_args(self, args: tuple, device: Device) -> None: ...

    def ir(self, key: tuple, ndim: int, debug: bool) -> KernelDef: ...

    def shared_bytes(self, workdiv: WorkDiv, args: tuple) -> int: ...

    def slot(self, owner: Hashable, make: Callable[[], _T]) -> _T: ...


class PlanCache(dict):
    """The compiled plans one backend keeps for one kernel: ``{key: plan}``, the key of the
    backend's choosing (dimension, signature, debug, device...). It lives in the kernel's slot
    (``kernel.slot(backend.name, PlanCache)``, :meth:`Backend.plans`), so a dropped kernel frees
    its plans. Reads are plain dict reads (a launch's hot path); :meth:`build` makes a missing
    plan once, other threads asking for it meanwhile wait and get the same plan."""

    __slots__ = ("lock", "__weakref__")

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def build(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """The plan of ``key``: the cached one, or ``make()``'s, made once under the cache's lock."""
        plan = self.get(key)
        if plan is None:
            with self.lock:
                plan = self.get(key)
                if plan is None:
                    plan = self[key] = make()
        return plan


# ----------------------------------------------------------------------------- the backend
class Backend:
    """A backend: its devices, queues, events, memory and kernel launches (derive from it).

    ``backends/<name>.py`` defines ``load() -> Backend`` and raises
    :class:`~portable.BackendUnavailable` with the reason when it cannot run here. What
    ``create_queue``/``create_event``/``allocator`` return is declared by :class:`QueueImpl`,
    :class:`EventImpl` and :class:`Allocator`.

    Optional methods, looked up where they are used:

    - ``launcher(queue, workdiv, kernel, args) -> run | None``: a prepared launch for arguments
      of the types of ``args`` (``run(args)``: the compiled plan and native call, nothing checked
      again); portable/_launch.py's fast path calls it after a generated guard of those types;
    - ``recorder(queue) -> Recorder``: what ``pk.capture(queue)`` records with;
    - ``execution() -> str``: how launches run, one line for ``alpyka info``.
    """

    name: str = ""
    #: "cpu" when kernels run on the host's cores, "gpu" for many-threads-per-block devices
    kind: str = "cpu"

    def devices(self) -> list[Device]:
        """The devices this backend uses here, each declaring its :class:`DeviceCapabilities`."""
        raise NotImplementedError

    def first_devices(self, count: int) -> list[Device]:
        """The first ``count`` of :meth:`devices` (fewer where there are fewer): a backend whose
        devices cost work to find (opencl probes each) does that work for these only."""
        return list(self.devices())[:count]

    def excluded_devices(self) -> list[tuple[str, str]]:
        """``(device, reason)`` for each device the backend found on the machine but does not use."""
        return []

    def versions(self) -> dict[str, str]:
        """Versions of the packages and drivers the backend relies on."""
        return {}

    # queues and events
    def create_queue(self, device: Device, blocking: bool) -> QueueImpl:
        """A new queue of ``device`` (see :class:`QueueImpl`)."""
        raise NotImplementedError

    def create_event(self, device: Device) -> EventImpl:
        """A new event of ``device``, never recorded (see :class:`EventImpl`)."""
        raise NotImplementedError

    # memory
    def allocator(self, device: Device, pinned: bool = False) -> Allocator:
        """The allocator of ``device``'s memory (page-locked host memory when ``pinned``)."""
        raise NotImplementedError

    def pinned_allocator(self) -> Allocator | None:
        """Page-locked host memory this backend offers to the host device, or None."""
        return None

    def array_factory(self, buffer: Any, const: bool) -> ArrayFactory | None:
        """Arrays onto a :class:`~portable.Buffer` usable from Python (numpy, cupy), or None when
        there are none. The arrays keep the buffer alive (its memory is not reused under them)."""
        return None

    def copy(self, queue: Queue, dst: MemRef, src: MemRef) -> None:
        """Enqueue a copy of ``src.nbytes`` bytes; one side may be host memory."""
        raise NotImplementedError

    def fill(self, queue: Queue, dst: MemRef, value: int) -> None:
        """Enqueue setting every byte of ``dst`` to ``value``."""
        raise NotImplementedError

    # kernels
    def launch(self, queue: Queue, workdiv: WorkDiv, kernel: KernelHandle, args: tuple) -> None:
        """Enqueue ``kernel`` over ``workdiv`` with ``args`` on ``queue`` (the work division was
        checked against the device already; the arguments are the backend's to check, once per
        compiled plan: ``kernel.check_args``)."""
        raise NotImplementedError(f"backend {self.name} does not implement kernel launches")

    def kernel_thread_limit(self, device: Device, workdiv: WorkDiv, kernel: KernelHandle, args: tuple) -> int:
        """The most threads per block ``kernel`` can run with ``args`` on ``device`` in work
        divisions like ``workdiv`` (alpaka's ``getFunctionAttributes(...).maxThreadsPerBlock``;
        ``pk.valid_workdiv(..., kernel=, args=)`` asks it). This default answers the device's
        limit; GPU backends compile the kernel and answer its own (registers lower it)."""
        return device.limits.max_threads_per_block

    def plans(self, kernel: KernelHandle) -> PlanCache:
        """The compiled plans this backend keeps for ``kernel`` (in the kernel's slot under the
        backend's name): what its launches fill, and what tests and tools inspect or clear."""
        return kernel.slot(self.name, PlanCache)


@runtime_checkable
class Waitable(Protocol):
    """What a queue of any backend can wait for (``queue.wait_for(event)`` across backends).

    ``snapshot()`` captures the state a wait issued now must see complete (a token, or None when
    there is nothing to wait for); ``wait_snapshot(token)`` blocks the calling thread until that
    state completed and raises :class:`~portable.AsyncError` when the work before it failed. A
    queue that cannot wait for a foreign token natively calls ``wait_snapshot`` from its own
    queue order (a host task)."""

    def snapshot(self) -> Any: ...

    def wait_snapshot(self, token: Any, timeout: float | None = None) -> bool: ...


@runtime_checkable
class EventImpl(Waitable, Protocol):
    """What ``Backend.create_event(device)`` returns; ``pk.Event`` holds it.

    Semantics (CUDA's): an event never recorded is complete; ``QueueImpl.record`` marks the
    current end of a queue and a wait waits for the latest record made before the wait, never
    for a later one; an error of the work before a record is raised by waits on it.

    - ``wait()``: block until the latest record completed; raise its error if any;
    - ``is_complete()``: True when the latest record completed (never blocks).

    Optional (``pk.Event.record_external`` / ``complete_external`` need them; :class:`HostEvent`
    has them): ``record_external() -> token`` records a point that no queue reaches, and
    ``complete_external(token, error=None)`` completes it (with ``error``, waits raise it).
    """

    def wait(self) -> None: ...

    def is_complete(self) -> bool: ...


@runtime_checkable
class QueueImpl(Protocol):
    """What ``Backend.create_queue(device, blocking)`` returns; ``pk.Queue`` holds it.

    Work runs in the order it was enqueued. ``blocking``: every enqueue (these methods and the
    backend's ``launch``/``copy``/``fill`` on this queue) has finished when it returns. An error
    raised by asynchronous work is raised by the next ``wait()`` (and by waits on events recorded
    after it) as :class:`~portable.AsyncError`; the queue stays usable (:class:`ErrorLog` does
    the bookkeeping).

    - ``enqueue_host(fn)``: run ``fn()`` on the host once the work before it finished; later
      work waits for it; never on the caller's thread of a non-blocking queue, nor on a thread
      of the native runtime (a CUDA host callback must not wait for other work);
    - ``enqueue_native(fn, *keep)``: run ``fn()``, which enqueues work on ``native_handle``
      (a stream, a command queue), in queue order (after host functions still outstanding) and
      keep the objects ``keep`` alive until that work finished; a CPU queue runs ``fn`` as a task;
    - ``record(event)``: mark the current end of the queue in ``event`` (an :class:`EventImpl`
      of the same backend);
    - ``wait_for(event)``: work enqueued after this call starts only once ``event``, as
      recorded now, completed; ``event`` may belong to any backend (a :class:`Waitable`);
    - ``wait()``: block until all work enqueued so far finished; raise the first error no
      finished wait reported; a wait from one of the queue's own tasks raises RuntimeError
      (:func:`check_not_own_worker`);
    - ``is_idle()``: True when all work enqueued so far finished (never blocks);
    - optionally ``in_own_task()``: True on a thread running this queue's host functions now
      (the interchange protocols then wait for nothing: the work before has finished, and the
      work after would wait for the task itself);
    - ``native_handle``: the backend's own queue object, for interoperation.
    """

    blocking: bool

    def enqueue_host(self, fn: Callable[[], None]) -> None: ...

    def enqueue_native(self, fn: Callable[[], None], *keep: Any) -> None: ...

    def record(self, event: Any) -> None: ...

    def wait_for(self, event: Any) -> None: ...

    def wait(self) -> None: ...

    def is_idle(self) -> bool: ...

    @property
    def native_handle(self) -> Any: ...


@runtime_checkable
class Recorder(Protocol):
    """What the optional ``Backend.recorder(queue)`` returns for ``pk.capture(queue)``
    (portable/_graph.py): each kernel launch, copy and fill enqueued on ``queue`` inside the
    block is handed to it instead of being enqueued.

    - ``launch(workdiv, kernel, args)``, ``copy(dst, src)``, ``fill(dst, value)``: do every check
      the backend's ``launch``/``copy``/``fill`` does (the work division was checked already), and
      raise as they would; then keep the work prepared (the compiled plan with its packed
      arguments, the native call), running nothing;
    - ``finish(keep) -> replay``: called once at the end of the block; ``replay()`` enqueues the
      whole recording on the queue, in order, with no per-launch checks, keeping the objects
      ``keep`` (buffers, views, memory owners) alive until that work finished; a blocking queue
      finishes it before returning. ``replay`` may be called any number of times.
    """

    def launch(self, workdiv: WorkDiv, kernel: KernelHandle, args: tuple) -> None: ...

    def copy(self, dst: MemRef, src: MemRef) -> None: ...

    def fill(self, dst: MemRef, value: int) -> None: ...

    def finish(self, keep: tuple) -> Callable[[], None]: ...


def queue_impl(queue: Any) -> Any:
    """The :class:`QueueImpl` that ``Backend.create_queue`` made for ``queue`` (a ``pk.Queue``:
    what a backend's ``copy``/``fill``/``launch`` receive); None for None (an allocation made
    for no queue)."""
    if isinstance(queue, Queue):
        return queue.impl
    if queue is None:
        return None
    raise ArgumentTypeError(f"queue_impl needs a pk.Queue, got {type(queue).__name__}")


@runtime_checkable
class Allocator(Protocol):
    """What ``Backend.allocator(device, pinned)`` returns (:class:`CachingAllocator` is one).

    ``allocate(nbytes, queue, alignment)`` returns a :class:`MemoryBlock` whose ``allocator`` is this
    allocator and whose memory may be used by work on ``queue`` at once (queue-ordered reuse);
    ``free(block)`` takes it back (work already enqueued on ``block.queue`` may still use it);
    ``release_cache()`` frees cached blocks and returns their bytes; ``stats`` counts."""

    def allocate(self, nbytes: int, queue: Any = None, alignment: int = 1) -> MemoryBlock: ...

    def free(self, b: MemoryBlock) -> None: ...

    def release_cache(self) -> int: ...

    @property
    def stats(self) -> AllocatorStats: ...


__all__ = [
    "Allocator",
    "AllocatorStats",
    "Backend",
    "KernelHandle",
    "MemoryBlock",
    "PlanCache",
    "CachingAllocator",
    "DLPACK_CPU",
    "DLPACK_CUDA",
    "DLPACK_OPENCL",
    "DLPACK_ROCM",
    "Device",
    "DeviceCapabilities",
    "DeviceLimits",
    "ErrorLog",
    "EventImpl",
    "HostEvent",
    "HostQueue",
    "MemRef",
    "QueueImpl",
    "Recorder",
    "Waitable",
    "Worker",
    "before_workers_stop",
    "c_strides",
    "check_not_own_worker",
    "pinned_host_allocator",
    "queue_impl",
    "run_deferred",
    "signature_key",
    "start_worker",
    "stop_worker",
    "warn_unseen",
]
