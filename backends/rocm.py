"""rocm backend (see the device-backends issue): not implemented in this tree yet."""

from __future__ import annotations

from portable._errors import BackendUnavailable


def load():
    raise BackendUnavailable("the rocm backend is not implemented yet in this version of alpyka")
