"""Which OpenCL runtimes (platforms) this machine has, for tests that run on a named one (PoCL,
Oclgrind) beside the opencl backend's default device."""

from __future__ import annotations


def missing_platform(name: str, install: str = "") -> str | None:
    """None when an OpenCL platform whose name contains ``name`` (case-insensitive) is
    registered here, else why not (a skip reason naming the platforms found and ``install``)."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        return f"pyopencl is not installed ({exc})"
    from backends import _opencl_devices

    _opencl_devices.register_runtimes()
    names = [p.name for p in cl.get_platforms()]
    if not any(name.lower() in n.lower() for n in names):
        hint = f"{install}; " if install else ""
        return f"{name} is not installed ({hint}platforms: {names})"
    return None
