"""The emulator's estimate of a kernel's own thread limit (cupy's ``RawKernel.max_threads_per_block``,
CUDA's ``cudaFuncGetAttributes(...).maxThreadsPerBlock``) from the kernel's CUDA text.

A GPU lowers a kernel's limit below the device's 1024 when its threads need many registers: a
block's threads share the multiprocessor's 65,536 32-bit registers, so a kernel of ``r``
registers per thread runs at most ``65536 // r`` threads per block (in warps of 32). The CPU has
no register allocator to ask, so the emulator *estimates* ``r``: 16 registers of bookkeeping
(indices, addresses, loop state) plus one per 32-bit and two per 64-bit scalar (or pointer) the
kernel's functions declare, at most 255 (CUDA's per-thread maximum; the rest spills). A per-thread
array (``acc.local_array``, ``T name[N]``) counts as NVRTC places it: where no subscript of it
reads memory or depends on data (constant indices, or loops over constant ranges, which NVRTC
unrolls) it is kept in registers, all ``N`` elements counted as ``N`` such scalars (64 float64:
128 registers; NVRTC's cubin said 142 in all, a limit of 448 threads); any other array lives in
the thread's local memory (NVRTC's stack frame), which takes no registers: one value, its
address. It counts
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
    r"(?:^|[;{}]|\bfor\s*\()\s*(?:const\s+)?(" + _TYPES + r")\b\s*(\*?)\s*([A-Za-z_]\w*)\s*(?:\[([^\]]*)\]\s*)?[=;,]",
    re.MULTILINE,
)
_TOKEN = re.compile(r"[A-Za-z_]\w*|[^\sA-Za-z_]")
_NAME = re.compile(r"\b[A-Za-z_]\w*")
# an assignment (``x = e``, ``x += e``; not ``==``, ``<=``) with the text up to its ``;``
_ASSIGN = re.compile(r"(?=\b([A-Za-z_]\w*)\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)([^;]*))")
# a for loop's variable and its condition
_FOR = re.compile(r"\bfor\s*\(\s*(?:[A-Za-z_]\w*\s+)?([A-Za-z_]\w*)\s*=[^;]*;([^;]*);")
_KERNEL_PARAMS = re.compile(r"__global__\s+void\s+\w+\s*\(([^)]*)\)")
_MEMORY_READ = re.compile(r"\b[A-Za-z_]\w*\s*\[")
#: what makes a value differ between threads or launches besides the kernel's parameters
_GPU_INDICES = {"threadIdx", "blockIdx", "blockDim", "gridDim"}


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
    found, varying = [], None
    for m in _DECL.finditer(code):
        width = 2 if m.group(1) in _WIDE or m.group(2) else 1
        for name, at in _declarators(code, m.start(3)):
            elements = 1
            if at == m.start(3) and m.group(4) is not None and m.group(4).strip().isdigit():
                varying = _data_dependent(code) if varying is None else varying
                elements = _elements_in_registers(code, name, int(m.group(4)), varying)
            found.append((name, width * elements, at))
    return found


def _elements_in_registers(code: str, name: str, extent: int, varying: set[str]) -> int:
    """How many values the array ``name`` of ``extent`` elements puts in registers: all of them
    where no subscript reads memory or names a ``varying`` value (its indices are then known
    once NVRTC unrolls its loops), else 1 (it lives in local memory)."""
    for m in re.finditer(rf"\b{re.escape(name)}\[([^\]]*)\]", code):
        subscript = m.group(1)
        if "[" in subscript or any(n in varying for n in _NAME.findall(subscript) if not n.startswith("alpyka_")):
            return 1
    return max(extent, 1)


def _data_dependent(code: str) -> set[str]:
    """The names of ``code`` whose values depend on data: the kernel's parameters, the GPU's
    indices, values read from memory, and whatever is computed from them (loop variables from
    their bounds too). The emitter's helpers (``alpyka_*``) do not count."""
    varying = set(_GPU_INDICES)
    for m in _KERNEL_PARAMS.finditer(code):
        varying |= {p.split()[-1].lstrip("*") for p in m.group(1).split(",") if p.split()}
    uses: dict[str, set[str]] = {}
    for m in _ASSIGN.finditer(code):
        name, value = m.groups()
        if _MEMORY_READ.search(value):
            varying.add(name)
        uses.setdefault(name, set()).update(_NAME.findall(value))
    for m in _FOR.finditer(code):
        uses.setdefault(m.group(1), set()).update(_NAME.findall(m.group(2)))
    grown = True
    while grown:
        grown = False
        for name, used in uses.items():
            if name not in varying and not used.isdisjoint(varying):
                varying.add(name)
                grown = True
    return varying


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
