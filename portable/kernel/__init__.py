"""The kernel language: ``@pk.kernel``, ``@pk.device_function`` and the compiler front-end.

A kernel's Python source and a launch signature become a typed IR (:mod:`portable.kernel.ir`,
types in :mod:`portable.kernel.types`) that each backend's emitter turns into machine code.
See docs/kernels.md for the language reference.
"""

from . import ir, types
from ._cache import cache_dir, load_generated_module, warn_cache_unwritable
from ._errors import KernelArgumentError, KernelCheckError, KernelIndexError, KernelSyntaxError, KernelValueError
from ._errors import KernelAssertionError
from ._irdump import dump as dump_ir
from ._kernel import DeviceFunction, Kernel, check_shared_needs, debug_enabled, device_function, kernel

__all__ = ["DeviceFunction", "Kernel", "KernelArgumentError", "KernelCheckError", "KernelIndexError",
           "KernelSyntaxError",
           "KernelValueError", "KernelAssertionError",
           "cache_dir", "check_shared_needs", "debug_enabled", "device_function", "dump_ir", "ir", "kernel",
           "load_generated_module", "types", "warn_cache_unwritable"]
