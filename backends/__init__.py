"""alpyka's backends, one module each: ``cpu_serial``, ``cpu_threads``, ``opencl``, ``cuda``, ``rocm``.

Each module defines ``load() -> portable.spi.Backend`` and raises ``portable.BackendUnavailable``
with the reason when it cannot run here. ``portable`` finds them through its registry; import
``portable``, not these modules.
"""
