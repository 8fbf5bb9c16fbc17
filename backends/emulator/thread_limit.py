"""The emulator's estimate of a kernel's own thread limit (cupy's ``RawKernel.max_threads_per_block``,
CUDA's ``cudaFuncGetAttributes(...).maxThreadsPerBlock``) from the kernel's CUDA text.

A GPU lowers a kernel's limit below the device's 1024 when its threads need many registers: a
block's threads share the multiprocessor's 65,536 32-bit registers, so a kernel of ``r``
registers per thread runs at most ``65536 // r`` threads per block (in warps of 32). The CPU has
no register allocator to ask, so the emulator *estimates* ``r``: 16 registers of bookkeeping
(indices, addresses, loop state) plus one per 32-bit and two per 64-bit scalar (or pointer) the
kernel's functions declare, at most 255 (CUDA's per-thread maximum; the rest spills). It counts
declarations, not live ranges, so it is larger than what NVRTC's allocator gives for a long
kernel of short-lived values, and only a kernel with many values (a few dozen doubles) gets a
limit below 1024. That is enough for a register-heavy kernel's limit to show on a CPU: work
divisions over it fail before launch, as on a GPU, and ``pk.valid_workdiv(..., kernel=, args=)``
picks blocks within it. On HIP the answer stays 1024: AMD's compiler builds every kernel for
1024 threads per block (``amdgpu-flat-work-group-size``) and spills instead.
"""

from __future__ import annotations

import bisect
import re

#: 32-bit registers a block's threads share (every NVIDIA GPU since Maxwell)
REGISTER_FILE = 65536
#: CUDA's per-thread maximum (more values spill to local memory)
MAX_REGISTERS = 255
#: registers a thread needs besides its declared values (indices, addresses, loop state)
BASE_REGISTERS = 16
#: the device's limit, the answer of every kernel with at most 64 registers
DEVICE_LIMIT = 1024
_WARP = 32

_NARROW = ("i8", "i16", "i32", "u8", "u16", "u32", "f32", "bool", "int", "float")
_WIDE = ("i64", "u64", "f64", "double")
# a declaration starts a statement (after ; { } or a line start) or a for loop's init
_TYPES = "|".join(_NARROW + _WIDE)
_DECL = re.compile(
    r"(?:^|[;{}]|\bfor\s*\()\s*(?:const\s+)?(" + _TYPES + r")\b\s*(\*?)\s*([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?[=;,]",
    re.MULTILINE,
)
_TOKEN = re.compile(r"[A-Za-z_]\w*|[^\sA-Za-z_]")


def estimated_registers(code: str) -> int:
    """Registers per thread the functions of ``code`` (a CUDA/HIP module) are estimated to use:
    :data:`BASE_REGISTERS` plus the most values live at one line, a value (one register, two if
    64-bit or a pointer) being live from the first line after its declaration that names it to
    the last (the emitter declares a kernel's variables at its top)."""
    lines = code.splitlines()
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    pressure = [0] * (len(lines) + 1)
    for name, width, at in _declarations(code):
        decl = bisect.bisect_right(starts, at) - 1
        used = [i for i in range(decl + 1, len(lines)) if name in lines[i] and re.search(rf"\b{name}\b", lines[i])]
        if used:
            for i in range(used[0], used[-1] + 1):
                pressure[i] += width
    return min(BASE_REGISTERS + max(pressure), MAX_REGISTERS)


def _declarations(code: str) -> list[tuple[str, int, int]]:
    """``(name, registers, offset)`` of each scalar or pointer a statement of ``code`` declares."""
    found = []
    for m in _DECL.finditer(code):
        width = 2 if m.group(1) in _WIDE or m.group(2) else 1
        for name, at in _declarators(code, m.start(3)):
            found.append((name, width, at))
    return found


def _declarators(code: str, at: int) -> list[tuple[str, int]]:
    """The names one declaration statement declares, from its first name at ``at`` to its ``;``
    (``i64 a = f(x, y), b = 2;`` declares a and b), each with its offset."""
    names, depth, expect = [], 0, True
    for m in _TOKEN.finditer(code, at):
        tok = m.group()
        if expect and (tok[0].isalpha() or tok[0] == "_"):
            names.append((tok, m.start()))
            expect = False
        elif tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
            if depth < 0:
                break
        elif tok == ";" and depth == 0:
            break
        elif tok == "," and depth == 0:
            expect = True
    return names


def max_threads_per_block(code: str, is_hip: bool) -> int:
    """The kernel's thread limit: ``65536 // registers`` rounded down to whole warps, at most
    1024 (1024 on HIP, see the module docstring)."""
    if is_hip:
        return DEVICE_LIMIT
    fit = REGISTER_FILE // estimated_registers(code)
    return max(_WARP, min(DEVICE_LIMIT, fit // _WARP * _WARP))
