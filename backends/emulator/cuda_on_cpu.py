"""The cupy stand-in's kernel executor: the generated CUDA or HIP text itself, compiled by the
system's C++ compiler against cuda_on_cpu.h and run on the CPU with a GPU's block semantics
(many threads per block, real barriers, shared memory, atomics; see the header).

- **Compiler.** ``$CXX``, else ``c++``, ``g++``, ``clang++``: the first that builds and loads a
  probe library. None: :func:`compiler_problem` says why, and the emulated backends are
  unavailable with that reason (one skip with the reason, not a failure per test).
- **Cache.** One shared library per (source, header, compiler and its version, flags), under
  ``$ALPYKA_CACHE_DIR/cuda_on_cpu/`` (default ``~/.cache/alpyka``), written atomically, its tag
  (HMAC under the cache's per-user secret over its name and bytes, :mod:`portable.compiler.trust`)
  appended. A library is loaded from the cache only when the directory is private to this user
  along its path and the tag matches: a changed, swapped, truncated or appended-to file is built
  again (one warning). A cache that is not private, cannot be written or is full: the library is
  built in a private temporary directory and loaded from there (one warning naming
  ``ALPYKA_CACHE_DIR``).
- **Launch.** The arguments are packed as cupy packs them (each in its C type), the grid runs on
  ``ALPYKA_EMULATE_THREADS`` OS threads (default: the cores; more where blocks wait for each
  other), and the block's schedule (the order its threads run in and where they switch: barriers,
  sampled memory accesses and loop iterations) comes from ``ALPYKA_EMULATE_SEED`` (default 1): a
  missing barrier gives a wrong result, and the same seed gives the same schedule.
- **Errors.** A compile error is a :class:`~backends._c_build.KernelBuildError` showing the
  generated source and the kernel's line; the runtime's own refusals are raised by ``run``.
  Memory outside an allocation is not checked here (range-checked builds report it, as on a GPU).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backends._compiler_run import run_compiler
from backends._shared_libraries import Library, build_once, compiler_version, library_cache, load_cached

HEADER = Path(__file__).with_name("cuda_on_cpu.h")
#: the runtime's text: the force-included header and the cuda_on_cpu_*.h parts it includes (each
#: library's cache key covers them all)
HEADERS = (HEADER, *sorted(HEADER.parent.glob("cuda_on_cpu_*.h")))


def _runtime_text() -> str:
    """The text of every header of the runtime, the part's name before each."""
    return "".join(f"// {path.name}\n{path.read_text()}" for path in HEADERS)


#: ``-ffp-contract=off``: numpy's float bits, as the GPU backends' defaults give them (no FMA
#: contraction, which GCC allows by default and makes on targets with FMA in their base ISA);
#: ``-frounding-math``: signed zeros kept, as numpy's: GCC 12 folds ``0.0 - (double)i`` into
#: ``-(double)i`` even at -O0 (-0.0 for i = 0), which only a non-default rounding mode stops
#: (``-fsigned-zeros``, the default, and ``-fno-fast-math`` do not)
FLAGS = (
    "-std=c++17",
    "-O1",
    "-fPIC",
    "-shared",
    "-pthread",
    "-fno-strict-aliasing",
    "-fvisibility=hidden",
    "-w",
    "-ffp-contract=off",
    "-frounding-math",
)
_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
#: what runs a block's threads as fibers: barriers, warp operations, and the hooks of a checked
#: text (its threads switch at memory accesses and loop iterations)
_BARRIERS = (
    *("__syncthreads", "__shfl", "__ballot", "__all", "__any", "__activemask", "__syncwarp", "__match"),
    "ALPYKA_LOOP",
)
_ERR_LEN = 1024
#: the cache's subdirectory of the libraries, and what a warning about one calls it
CACHE_DIR, LIBRARY = "cuda_on_cpu", "the GPU emulator's library"

_lock = threading.Lock()
_compiler: tuple[str, str] | None = None  # (path, version line)
_problem: str | None = None
_probed = False


@dataclass
class Compiled:
    """A kernel built for the CPU: the library, its launch function and the C type of each argument."""

    name: str
    path: Path
    launch: Any
    params: list[str]
    fibers: bool
    src: Any = None  # the CSource: its line map puts a check's report at the kernel's Python line


# ---------------------------------------------------------------------- compiler
def _candidates() -> list[str]:
    names = [os.environ["CXX"]] if os.environ.get("CXX") else []
    return names + ["c++", "g++", "clang++"]


def _probe_compiler() -> None:
    global _compiler, _problem, _probed
    tried = []
    for name in _candidates():
        found = compiler_version(name)
        if isinstance(found, str):
            tried.append(found)
            continue
        path, version = found
        try:
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "probe.cu"
                src.write_text(
                    'extern "C" __global__ void alpyka_probe(int* p) { atomicAdd(p, 1); __syncthreads(); }\n'
                )
                lib = Path(tmp) / "probe.so"
                done = run_compiler(
                    [path, *FLAGS, "-include", str(HEADER), "-x", "c++", str(src), "-o", str(lib)], timeout=300
                )
                if done.returncode != 0:
                    tried.append(f"{name}: cannot build the probe ({_tail(done.stderr)})")
                    continue
                ctypes.CDLL(str(lib))
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        _compiler = (path, version)
        break
    if _compiler is None:
        _problem = (
            "no C++ compiler builds CUDA source for the CPU ("
            + "; ".join(tried)
            + "); install g++ (apt install g++) or set CXX"
        )
    _probed = True


def compiler_problem() -> str | None:
    """None when a C++ compiler is usable here, else why not (probed once per process)."""
    with _lock:
        if not _probed:
            _probe_compiler()
        return _problem


def compiler() -> tuple[str, str]:
    """``(path, version line)`` of the compiler in use; RuntimeError naming the problem else."""
    problem = compiler_problem()
    if problem is not None:
        raise RuntimeError(problem)
    assert _compiler is not None
    return _compiler


def _tail(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else "..." + text[-n:]


# ---------------------------------------------------------------------- build
def parameters(code: str, name: str) -> list[str]:
    """The C types of kernel ``name``'s parameters, in order."""
    for m in _SIGNATURE.finditer(code):
        if m.group(1) == name:
            decls = [p.strip() for p in m.group(2).split(",") if p.strip()]
            return [re.sub(r"\s*\b\w+$", "", d).strip() for d in decls]
    raise KeyError(name)


def _trampoline(name: str, params: list[str]) -> str:
    call = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(params))
    return f"""
static void alpyka_cpu_body(void** a) {{ {name}({call}); }}
extern "C" __attribute__((visibility("default"))) int alpyka_cpu_launch(
        void** args, const long long* dims, long long dyn_shared, int fibers, unsigned long long seed,
        int threads, int checks, char* error, int error_len) {{
    return alpyka_host::run(&alpyka_cpu_body, args, dims, dyn_shared, fibers, seed, threads, checks, error,
                            error_len);
}}
"""


def warp_size(code: str) -> int:
    """The warp size the source was generated for: 64 for HIP (AMD's CDNA wavefronts), else 32."""
    return 64 if "(hip" in code.split("\n", 1)[0] else 32


def build(src: Any, name: str) -> Compiled:
    """Compile the CUDA/HIP ``src`` (a ``CSource``) for the CPU, or load it from the cache."""
    from backends._c_build import KernelBuildError, format_build_error

    path_cxx, version = compiler()
    code = src.text
    params = parameters(code, name)
    unit = code + _trampoline(name, params)
    hip = ("-D__HIP_PLATFORM_AMD__",) if warp_size(code) == 64 else ()  # the HIP text's own warp intrinsics
    flags = FLAGS + (f"-DALPYKA_WARP_SIZE={warp_size(code)}",) + hip
    key = hashlib.sha256("\0".join([_runtime_text(), unit, version, *flags]).encode()).hexdigest()[:32]
    lib_name = f"{name}-{key}.so"
    cache = library_cache(CACHE_DIR)
    so = load_cached(cache, lib_name, LIBRARY, ctypes.CDLL) if cache is not None else None
    if so is None:
        command = [path_cxx, *flags, "-include", str(HEADER), "-x", "c++"]
        so, lib, log = build_once(Library(command, unit, f"{name}.cu", lib_name, LIBRARY, ctypes.CDLL), cache)
        if so is None:
            raise KernelBuildError(format_build_error(src, f"{Path(path_cxx).name} (CUDA on the CPU)", log))
    else:
        lib = cache[0] / lib_name  # type: ignore[index]  # loaded from the cache: there is one
    launch = so.alpyka_cpu_launch
    launch.restype = ctypes.c_int
    launch.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_longlong),
        ctypes.c_longlong,
        ctypes.c_int,
        ctypes.c_ulonglong,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    fibers = any(b in code for b in _BARRIERS)
    return Compiled(name, lib, launch, params, fibers, src)


# ---------------------------------------------------------------------- run
def _threads() -> int:
    """The OS threads a grid runs on: ``ALPYKA_EMULATE_THREADS`` (checked when portable is imported)."""
    from portable.env import emulate_threads

    return emulate_threads()


def seed() -> int:
    """The schedule's seed: ``ALPYKA_EMULATE_SEED`` (default 1; checked when portable is imported)."""
    from portable.env import emulate_seed

    return emulate_seed()


def checks_on() -> bool:
    """Whether launches check what a GPU leaves wrong or undefined (``ALPYKA_EMULATE_CHECKS``,
    default on; cuda_on_cpu.h's header comment lists them)."""
    from portable.env import emulate_checks

    return emulate_checks()


def _check_error(kernel: Compiled, report: str) -> Exception:
    """The KernelCheckError of a report ``check:<kind>:<C line>:<C line>:<text>`` (cuda_on_cpu.h):
    ``%1``/``%2`` in the text become the lines of the kernel's Python source."""
    from portable.compiler import KernelCheckError

    _, kind, l1, l2, text = report.split(":", 4)
    src = kernel.src
    where = src.source_file if src is not None and src.source_file else "<kernel>"

    def line(c_line: str) -> int:
        return src.python_line(int(c_line)) if src is not None and int(c_line) > 0 else 0

    first = line(l1) or (src.line_map and min(src.line_map.values())) or 0
    text = text.replace("%1", f"line {line(l1) or '?'}").replace("%2", f"line {line(l2) or '?'}")
    name = src.kernel_name if src is not None and src.kernel_name else kernel.name
    found = (
        "found by the GPU emulator, whose threads take turns in loops that wait"
        if kind == "deadlock"
        else "found by the GPU emulator's checks, ALPYKA_EMULATE_CHECKS=0 turns them off"
    )
    return KernelCheckError(f"kernel {name!r} ({where}:{first}): {kind}: {text} ({found})", kind)


def run(kernel: Compiled, grid: tuple, block: tuple, args: tuple, shared_mem: int, memory: Any = None) -> None:
    """Run ``kernel`` over ``grid`` x ``block`` (CUDA's order: x first) with the packed ``args``;
    returns once every block finished. A check's report is a KernelCheckError naming the kernel's
    Python line; RuntimeError with the runtime's message on a refusal. ``memory``: the tracked
    device memory of the checks (``(rows, shadows)`` of the stand-in's ``memory_table``), or None."""
    if len(args) != len(kernel.params):
        raise TypeError(f"kernel {kernel.name} takes {len(kernel.params)} arguments; got {len(args)}")
    slots = np.zeros(max(len(args), 1), np.uint64)  # each argument in an 8-byte slot, little-endian
    raw = slots.view(np.uint8)
    for i, value in enumerate(args):
        b = np.asarray(value).tobytes()
        raw[8 * i : 8 * i + len(b)] = np.frombuffer(b, np.uint8)
    base = slots.ctypes.data
    ptrs = (ctypes.c_void_p * len(slots))(*[base + 8 * i for i in range(len(slots))])
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    b = tuple(int(x) for x in block) + (1,) * (3 - len(block))
    rows = memory[0] if memory is not None else None  # (base, end, shadow) rows, kept alive below
    table = (rows.ctypes.data, len(rows)) if rows is not None else (0, 0)
    dims = (ctypes.c_longlong * 8)(*g, *b, *table)  # the grid, the block, then the memory table
    err = ctypes.create_string_buffer(_ERR_LEN)
    if kernel.launch(
        ptrs, dims, int(shared_mem), int(kernel.fibers), seed(), _threads(), int(checks_on()), err, _ERR_LEN
    ):
        report = err.value.decode(errors="replace")
        if report.startswith("check:"):
            raise _check_error(kernel, report)
        raise RuntimeError(f"kernel {kernel.name}: {report}")
