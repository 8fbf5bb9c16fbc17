"""cuda: NVIDIA GPUs through cupy (streams, events, memory pool, NVRTC-compiled kernels).

The implementation is shared with ``rocm`` in :mod:`backends._cupy_common`; kernels are CUDA C
from :mod:`backends._c_emit`, compiled by NVRTC through cupy's ``RawModule``.
"""

from __future__ import annotations

from ._cupy_common import CupyBackend, load_backend

_backend: CupyBackend | None = None


def load() -> CupyBackend:
    """The cuda backend; BackendUnavailable says why when cupy, a driver or a device is missing."""
    global _backend
    if _backend is None:
        _backend = load_backend("cuda", want_hip=False)
    return _backend
