"""The kernel language: ``@pk.kernel``, ``@pk.device_function`` and the compiler front-end.

A kernel's Python source and a launch signature become a typed IR (:mod:`portable.compiler.ir`,
types in :mod:`portable.compiler.types`) that each backend's emitter turns into machine code.
See docs/kernels.md for the language reference.
"""

from . import _trust as trust
from . import ir, types
from ._cache import (
    cache_dir,
    compile_slot,
    load_generated_module,
    private_cache,
    warn_cache_not_private,
    warn_cache_once,
    warn_cache_unwritable,
    write_atomic,
)
from ._depth import deep_recursion
from ._errors import (
    KernelArgumentError,
    KernelAssertionError,
    KernelCheckError,
    KernelDeviceMismatch,
    KernelIndexError,
    KernelSyntaxError,
    KernelValueError,
    ValueCheck,
    device_check_error,
)
from ._irdump import dump as dump_ir
from ._kernel import DeviceFunction, Kernel, check_shared_needs, debug_enabled, device_function, kernel
from ._locks import build_lock, lock_file_free

__all__ = [
    "DeviceFunction",
    "Kernel",
    "KernelArgumentError",
    "KernelDeviceMismatch",
    "KernelAssertionError",
    "KernelCheckError",
    "KernelIndexError",
    "KernelSyntaxError",
    "KernelValueError",
    "ValueCheck",
    "cache_dir",
    "check_shared_needs",
    "compile_slot",
    "build_lock",
    "debug_enabled",
    "deep_recursion",
    "device_check_error",
    "device_function",
    "dump_ir",
    "ir",
    "kernel",
    "load_generated_module",
    "lock_file_free",
    "private_cache",
    "trust",
    "types",
    "warn_cache_not_private",
    "warn_cache_once",
    "warn_cache_unwritable",
    "write_atomic",
]
