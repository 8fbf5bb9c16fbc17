"""Torch tensors over the memory of alpyka buffers, and the host staging of the copy path.

Three ways a collection's memory reaches torch, chosen by the device
(:func:`inference._torch_queue.memory_path`):

- ``"host"`` (devices whose ``capabilities.host_addressable``: cpu_serial, cpu_threads):
  ``torch.from_numpy`` over the buffer's bytes, then ``as_strided``: zero copies;
- ``"cuda"`` (``capabilities.torch_device_type == "cuda"``: cuda, rocm, torch calls both
  "cuda"): the backend's device array over the buffer (``__cuda_array_interface__`` /
  ``__dlpack__``), then ``as_strided``: zero copies;
- ``"copy"`` (no torch device type: opencl, and any backend whose memory torch cannot
  address): the bytes of a block are copied into host staging memory in queue order and the
  model runs on the CPU.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

import portable as pk
from portable import ArgumentTypeError, StateError

from ._block import Block
from ._torch_queue import dlpack_tensor, memory_path, torch_device

_NP_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}
for _np, _t in ((np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64")):
    if hasattr(torch, _t):
        _NP_TO_TORCH[np.dtype(_np)] = getattr(torch, _t)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype; a clear error for those torch lacks."""
    try:
        return _NP_TO_TORCH[np.dtype(dtype)]
    except KeyError:
        raise ArgumentTypeError(
            f"dtype {np.dtype(dtype)} has no torch equivalent in this torch ({torch.__version__}); give the "
            f"column a dtype torch has: {', '.join(sorted(str(d) for d in _NP_TO_TORCH))}"
        ) from None


def _flat_array(buffer: pk.Buffer, dtype: np.dtype, nbytes: int) -> Any:
    """A 1-D array of ``dtype`` over the first ``nbytes`` of ``buffer`` (numpy or cupy)."""
    make = buffer.device.backend.array_factory(buffer, False)
    if make is None:
        raise StateError(
            f"memory of {buffer.device} is not addressable from Python; memcpy it into a host buffer first"
        )
    count = nbytes // dtype.itemsize
    return make(0, dtype, (count,), (dtype.itemsize,))


class _CudaArrayInterface:
    """A raw device pointer as ``__cuda_array_interface__`` (v2: no stream semantics); keeps
    ``owner`` alive as long as the tensor made from it."""

    def __init__(self, ptr: int, count: int, dtype: np.dtype, owner: Any) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": (count,),
            "typestr": dtype.str,
            "data": (ptr, False),
            "strides": None,
            "version": 2,
        }


def flat_tensor(buffer: pk.Buffer, dtype: np.dtype, nbytes: int) -> torch.Tensor:
    """A 1-D torch tensor of ``dtype`` over the first ``nbytes`` of ``buffer``, zero copies.

    The tensor keeps the buffer alive (its memory is not reused while the tensor exists).
    """
    dtype = np.dtype(dtype)
    path = memory_path(buffer.device)
    if path == "host" or buffer.device.is_host_memory:
        arr = _flat_array(buffer, dtype, nbytes)
        return torch.from_numpy(arr) if dtype.itemsize else torch.empty(0)
    if path == "cuda":
        tdev = torch_device(buffer.device)
        count = nbytes // dtype.itemsize
        try:
            arr = _flat_array(buffer, dtype, nbytes)
        except RuntimeError:
            arr = None
        if arr is not None and hasattr(arr, "__cuda_array_interface__"):
            # CAI rather than DLPack: DLPack's stream handshake would tie the tensor to
            # cupy's current stream; the caller orders work on the queue's stream instead.
            return torch.as_tensor(arr, device=tdev)
        if arr is not None and hasattr(arr, "__dlpack__"):  # cupy on HIP: no CAI
            return dlpack_tensor(arr)
        if buffer.ptr:
            return torch.as_tensor(_CudaArrayInterface(buffer.ptr, count, dtype, buffer), device=tdev)
        raise RuntimeError(f"{buffer.device} exposes neither a device array nor a pointer for its buffers")
    raise StateError(f"memory of {buffer.device} is not addressable from torch; use the copy path")


def block_tensor(flat: torch.Tensor, block: Block) -> torch.Tensor:
    """The strided tensor of ``block`` over ``flat`` (a flat tensor of the block's dtype over
    the buffer that holds it)."""
    return torch.as_strided(flat, block.shape, block.strides, block.offset // block.itemsize)


def block_numpy(flat: np.ndarray, block: Block) -> np.ndarray:
    """The strided numpy view of ``block`` over a flat numpy array of its dtype."""
    return np.lib.stride_tricks.as_strided(flat[block.offset // block.itemsize :], block.shape, block.byte_strides)


# --------------------------------------------------------------------------- copy path
class Staging:
    """Host memory holding one block's bytes (its span) for the copy path."""

    def __init__(self, block: Block) -> None:
        start, stop = block.span
        self.block = block
        self.nbytes = stop - start
        self.buffer = pk.Buffer(pk.host(), (max(self.nbytes, 1),), np.uint8)
        self.local = replace(block, offset=block.offset - start, span=(0, self.nbytes))
        self._tensor: torch.Tensor | None = None

    def tensor(self) -> torch.Tensor:
        """The block's tensor over the staging memory."""
        if self._tensor is None:
            flat = flat_tensor(self.buffer, self.block.dtype, self.buffer.nbytes)
            self._tensor = block_tensor(flat, self.local)
        return self._tensor


def enqueue_to_staging(queue: pk.Queue, buffer: pk.Buffer, staging: Staging) -> None:
    """Enqueue copying the block's span of ``buffer`` (device memory) into ``staging``."""
    start, _ = staging.block.span
    pk.memcpy(queue, staging.buffer.memref(0, staging.nbytes), buffer.memref(start, staging.nbytes))


def enqueue_from_staging(queue: pk.Queue, buffer: pk.Buffer, staging: Staging) -> None:
    """Enqueue copying ``staging`` back into the block's span of ``buffer``."""
    start, _ = staging.block.span
    pk.memcpy(queue, buffer.memref(start, staging.nbytes), staging.buffer.memref(0, staging.nbytes))
