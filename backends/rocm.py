"""rocm: AMD GPUs through cupy's ROCm (HIP) build: the cuda backend's code on HIP.

Available only where ``cupy.cuda.runtime.is_hip`` is true and a device exists. Kernels are the
same C source as on CUDA, compiled by hiprtc through cupy's ``RawModule``.
"""

from __future__ import annotations

from ._cupy_common import CupyBackend, load_backend

_backend: CupyBackend | None = None


def load() -> CupyBackend:
    """The rocm backend; BackendUnavailable says why when cupy's HIP build or a device is missing."""
    global _backend
    if _backend is None:
        _backend = load_backend("rocm", want_hip=True)
    return _backend
