"""alpyka's portable core: devices, queues, events, buffers, work divisions, kernels and
SoA collections, the same on every backend (cpu_serial, cpu_threads, opencl, cuda, rocm).

    import portable as pk
    dev = pk.device("cpu_threads")
    q = pk.Queue(dev)
"""

from . import (  # pk.linalg: per-thread matrices; pk.rand: random numbers; pk.tools: alpakatools
    _command_start,  # noqa: F401 (imported first, for its effect: a Ctrl-C while alpyka's command starts is one line)
    linalg,
    rand,
    tools,
)
from ._allocator import AllocatorStats
from ._buffer import Buffer
from ._collection import CollectionTooLarge, PortableCollection
from ._device import Device, DeviceCapabilities, DeviceLimits, device, devices, host
from ._errors import (
    AlpykaError,
    AlpykaWarning,
    ArgumentError,
    ArgumentTypeError,
    AsyncError,
    BackendUnavailable,
    BufferTooLarge,
    DeviceMismatch,
    EnvVarError,
    FileNotFound,
    KernelBuildError,
    NameNotFound,
    NoSuchDevice,
    OutOfMemory,
    StateError,
    Timeout,
    WorkDivError,
)
from ._graph import CaptureError, Graph, capture
from ._memory import memcpy, memset
from ._queue import Event, Queue, exec
from ._registry import (
    available_backends,
    backends,
    default_backend,
    get_backend,
    register_backend,
    unavailable_backends,
)
from ._streamcheck import use_check_error as _use_check_error
from ._workdiv import WorkDiv, make_workdiv, valid_workdiv
from .compiler import (
    KernelArgumentError,
    KernelAssertionError,
    KernelCheckError,
    KernelIndexError,
    KernelSyntaxError,
    KernelValueError,
    device_function,
    kernel,
)
from .data import (  # data I/O
    CorruptRootFile,
    NotARootFile,
    RootChunk,
    event_workdiv,
    from_awkward,
    iterate_root,
    offsets_to_host,
    pair_offsets,
    read_root,
    root_chunks,
    to_awkward,
)

__version__ = "0.1.0"

_use_check_error(KernelCheckError)  # the stream check's error, from the compiler the core does not import

__all__ = [
    "AllocatorStats",
    "AlpykaError",
    "AlpykaWarning",
    "ArgumentError",
    "ArgumentTypeError",
    "AsyncError",
    "BackendUnavailable",
    "NoSuchDevice",
    "Buffer",
    "CaptureError",
    "Graph",
    "capture",
    "Device",
    "DeviceCapabilities",
    "DeviceLimits",
    "BufferTooLarge",
    "DeviceMismatch",
    "register_backend",
    "EnvVarError",
    "FileNotFound",
    "NameNotFound",
    "StateError",
    "Timeout",
    "OutOfMemory",
    "Event",
    "PortableCollection",
    "Queue",
    "WorkDiv",
    "WorkDivError",
    "available_backends",
    "backends",
    "default_backend",
    "device",
    "device_function",
    "devices",
    "exec",
    "get_backend",
    "host",
    "kernel",
    "make_workdiv",
    "memcpy",
    "memset",
    "unavailable_backends",
    "valid_workdiv",
    "from_awkward",
    "to_awkward",
    "offsets_to_host",
    "read_root",
    "iterate_root",
    "root_chunks",
    "RootChunk",
    "NotARootFile",
    "CorruptRootFile",
    "event_workdiv",
    "pair_offsets",
    "distributed",
    "linalg",
    "rand",
    "tools",
    "CollectionTooLarge",
    "KernelArgumentError",
    "KernelBuildError",
    "KernelCheckError",
    "KernelIndexError",
    "KernelSyntaxError",
    "KernelValueError",
    "KernelAssertionError",
]


# the backend interface lives in portable.spi, apart from the user's API; these names were here once
_MOVED_TO_SPI = ("Backend", "CachingAllocator", "MemRef")


def __getattr__(name: str):
    """``pk.distributed`` on first use (it imports Dask only when a run starts); the backend
    interface's names that moved to :mod:`portable.spi`, with a DeprecationWarning."""
    import importlib

    if name == "distributed":
        return importlib.import_module(".distributed", __name__)
    if name in _MOVED_TO_SPI:
        import warnings

        warnings.warn(
            f"portable.{name} is part of the backend interface: import it from portable.spi",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(".spi", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
