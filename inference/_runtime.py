"""Process-wide torch settings for inference: the sizes of torch's own thread pools.

PyTorch's own thread pools default to one thread each (CMSSW's ``PyTorchService``), so that
alpyka's queues and kernels own the cores; ``set_torch_threads(n)`` (or the environment variable
``ALPYKA_TORCH_THREADS``) changes that. The settings are applied the first time a model is
created or deployed, not at import.
"""

from __future__ import annotations

import threading

import torch

from portable import ArgumentError
from portable.env import torch_threads as _env_threads

_lock = threading.Lock()
_applied = False
_wanted: tuple[int, int] | None = None
_interop_note = ""


def set_torch_threads(intra_op: int, inter_op: int | None = None) -> None:
    """Set PyTorch's intra-op (and inter-op, default the same) thread counts now.

    torch accepts the inter-op count only before its inter-op pool started; later requests are
    recorded in :func:`torch_threads` ``["note"]`` instead of raising.
    """
    for v, what in ((intra_op, "intra_op"), (inter_op, "inter_op")):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ArgumentError(f"set_torch_threads: {what} must be a positive integer (1, 2, ...), got {v!r}")
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
