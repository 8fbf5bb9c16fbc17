"""Process-wide torch settings for inference, and running work on a queue's native stream.

PyTorch's own thread pools default to one thread each (CMSSW's ``PyTorchService``), so that
alpyka's queues and kernels own the cores; ``set_torch_threads(n)`` (or the environment variable
``ALPYKA_TORCH_THREADS``) changes that. The settings are applied the first time a model is
created or deployed, not at import.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

import portable as pk
from portable.env import env_number

from ._tensors import memory_path, torch_device

_lock = threading.Lock()
_applied = False
_wanted: tuple[int, int] | None = None
_interop_note = ""


def _env_threads() -> int:
    return env_number("ALPYKA_TORCH_THREADS", 1, int, minimum=1)


def set_torch_threads(intra_op: int, inter_op: int | None = None) -> None:
    """Set PyTorch's intra-op (and inter-op, default the same) thread counts now.

    torch accepts the inter-op count only before its inter-op pool started; later requests are
    recorded in :func:`torch_threads` ``["note"]`` instead of raising.
    """
    for v, what in ((intra_op, "intra_op"), (inter_op, "inter_op")):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"set_torch_threads: {what} must be a positive integer, got {v!r}")
    global _applied, _wanted
    with _lock:
        _wanted = (intra_op, inter_op if inter_op is not None else intra_op)
        _apply_locked()
        _applied = True


def _apply_locked() -> None:
    global _interop_note
    intra, inter = _wanted if _wanted is not None else (_env_threads(), _env_threads())
    torch.set_num_threads(intra)
    if torch.get_num_interop_threads() != inter:
        try:
            torch.set_num_interop_threads(inter)
            _interop_note = ""
        except RuntimeError as exc:  # the pool already started: torch allows this only once
            _interop_note = f"inter-op threads stay {torch.get_num_interop_threads()}: {exc}"


def ensure_torch_threads() -> None:
    """Apply the thread settings once per process (called by Model)."""
    global _applied
    if _applied:
        return
    with _lock:
        if not _applied:
            _apply_locked()
            _applied = True


def torch_threads() -> dict[str, object]:
    """The thread counts torch uses now, and why the inter-op count differs from the request."""
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(), "note": _interop_note}


def _native_stream_pointer(queue: pk.Queue) -> int:
    handle = queue.native_handle
    for attr in ("ptr", "handle", "cuda_stream"):
        value = getattr(handle, attr, None)
        if isinstance(value, int):
            return value
    if isinstance(handle, int):
        return handle
    raise TypeError(f"cannot find the native stream of {queue!r} (native handle {handle!r})")


@contextlib.contextmanager
def queue_stream(queue: pk.Queue | None) -> Iterator[None]:
    """Make the queue's native stream torch's current stream (CUDA/ROCm) for the block; the
    previous current stream (thread-local) and device are restored afterwards. A no-op on
    queues whose work torch runs on the host."""
    if queue is None or memory_path(queue.device) != "cuda":
        yield
        return
    dev = torch_device(queue.device)
    stream = torch.cuda.ExternalStream(_native_stream_pointer(queue), device=dev)
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        yield
