"""Memory references as the CUDA/HIP runtime takes them on the cupy backends: native addresses,
and which host memory is pageable (shared by the backend's copies and its graph recorder)."""

from __future__ import annotations

from portable.spi import MemRef

MEMCPY_DEFAULT = 4  # cudaMemcpyDefault / hipMemcpyDefault: direction from the pointers (UVA)


def pageable(ref: MemRef) -> bool:
    """Host memory that is not page-locked: a numpy array, or a host Buffer made without pinned."""
    return ref.device.is_host_memory and not getattr(ref.owner, "pinned", False)


def address(ref: MemRef) -> int:
    """The native address of ``ref``'s first byte (host or device memory)."""
    if ref.device.is_host_memory:
        return int(ref.handle.ctypes.data) + ref.offset
    return int(ref.handle.ptr) + ref.offset
