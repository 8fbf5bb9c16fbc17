"""The suite's compile checks of every kernel a device backend builds, hooked into the launchers'
one IR -> C step (``backends._gpu_launch.emit_for``) by tests/conftest.py, never by the library:

- ``ALPYKA_CHECK_CUDA=1``: each kernel an OpenCL launch builds is also emitted as CUDA C and
  compiled to PTX by NVRTC, with the options cupy's ``RawModule`` gives it (no GPU needed), once
  per cache: a marker shared by the processes says which texts compiled
  (``backends._c_build.nvrtc_check``);
- ``ALPYKA_CHECK_HIP=1``: each kernel a device launch builds (OpenCL, CUDA or ROCm, emulated or
  not) also has its HIP text compiled for gfx90a, and for gfx942 where the text uses what the
  compile treats per target (``backends/_hip_check.py``, ``targets_for``).

A dialect mistake thus fails the suite on a machine without that GPU, at the kernel's line.
"""

from __future__ import annotations

import os
from typing import Any

from portable.env import env_flag

CUDA_MEANING = " (every OpenCL kernel also through NVRTC)"
HIP_MEANING = " (every device kernel's HIP text also compiled for AMD GPUs)"


def check(kernel: Any, kir: Any, src: Any, unit_elements: bool) -> None:
    """The checks the environment asks for, of the source ``src`` a launch built from ``kir``."""
    from backends import _c_build, _gpu_launch, _hip_check

    if src.dialect == "opencl" and env_flag("ALPYKA_CHECK_CUDA", False, meaning=CUDA_MEANING):
        # with the options NVRTC gets from cupy.RawModule, so the guard compiles what runs; a text
        # another process of this cache compiled with them is not compiled again (a marker)
        _c_build.nvrtc_check(
            _gpu_launch.emit_checked(kernel, kir, "cuda", unit_elements),
            os.environ.get("ALPYKA_CUDA_ARCH", "compute_90"),
            _c_build.float_options("cuda", kir.fast_math) + _c_build.CUPY_NVRTC_APPENDED,
        )
    if env_flag("ALPYKA_CHECK_HIP", False, meaning=HIP_MEANING):
        hip = src if src.dialect == "hip" else _gpu_launch.emit_checked(kernel, kir, "hip", unit_elements)
        _hip_check.check_source(hip)


def wrappers(fn: Any) -> list[Any]:
    """``fn`` and the functions it wraps (``__wrapped__``), outermost first."""
    out = [fn]
    while hasattr(out[-1], "__wrapped__"):
        out.append(out[-1].__wrapped__)
    return out


def install() -> None:
    """Wrap ``backends._gpu_launch.emit_for`` (once) so that every device build runs :func:`check`
    after emitting its source; the checks read their variables at each build."""
    from backends import _gpu_launch

    if any(getattr(f, "compile_checks", False) for f in wrappers(_gpu_launch.emit_for)):
        return
    plain = _gpu_launch.emit_for

    def emit_for(kernel: Any, key: tuple, ndim: int, dialect: str) -> tuple[Any, Any]:
        kir, src = plain(kernel, key, ndim, dialect)
        check(kernel, kir, src, key[4])
        return kir, src

    emit_for.compile_checks = True  # type: ignore[attr-defined]
    emit_for.__wrapped__ = plain  # type: ignore[attr-defined]
    _gpu_launch.emit_for = emit_for
