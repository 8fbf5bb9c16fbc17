"""Kernel bodies on the cupy stand-in (fake_cupy.py), and the stand-in as the emulated ``cuda``
and ``rocm`` backends (:func:`load`, which the registry calls for the names ``ALPYKA_EMULATE``
gives; alpyka's own suite turns both on where no real cupy is installed).

How a kernel runs (honest first, then fast):

- **the CUDA/HIP source itself** (the default, ``ALPYKA_EMULATE_EXEC=cpp``): ``RawModule(code)``
  compiles the text the cuda/rocm launcher generated, unmodified, with the system's C++ compiler
  against ``cuda_on_cpu.h`` and runs it on the CPU with a GPU's block semantics: many threads per
  block, barriers, shared memory, atomics, the threads of a block in a seeded random order between
  barriers (cuda_on_cpu.py). No C++ compiler: the emulated backends are unavailable with that
  reason (the matrix's cuda/rocm rows are skipped with it).
- **the OpenCL twin** (``ALPYKA_EMULATE_EXEC=opencl``): the OpenCL C emitted from the same IR
  and plan key, built on the opencl backend's first CPU device (probed, so a broken runtime is
  never used) over the stand-in's memory wrapped with ``USE_HOST_PTR``. Its warps run as wide as
  the emulated GPU's (32 lanes, 64 on rocm: what ``acc.warp_size`` and the device's limits say),
  as sub-groups of that size; a device that cannot require a sub-group size refuses a kernel with
  warps (it ran them 8 or 16 lanes wide, or one, under a device that said 32).
- **the compile guard**, either way: where NVRTC is installed, the CUDA/HIP text is compiled to
  PTX with the options cupy would hand NVRTC (``-ftz=true`` appended on CUDA), so the code a GPU
  would run is checked by NVIDIA's compiler too. hiprtc is not available without ROCm: the HIP
  text (CUDA's source with HIP's atomics) is compiled by NVRTC as the nearest check.
- **sources.** :func:`_record_twins` wraps ``backends._gpu_launch.emit_for`` so that each source
  the cuda/rocm launcher builds is known by its exact text (for build errors that show the kernel's line);
  a source alpyka's emitter did not produce fails to load (``CUDA_ERROR_INVALID_SOURCE``).
- **memory and order.** Stand-in device memory is host memory; each pointer argument is checked
  to be device memory of the launching device before the kernel runs. The kernel runs on the
  stream's thread and returns when it finished, so kernels, copies, memsets and events keep the
  stream's FIFO order; a failed kernel is a sticky error (every later synchronisation raises).

What it does not model: warp-level timing, float32 denormal flushing (``-ftz``), memory the device
could not address (it is host memory here), and accesses outside an allocation (a range-checked
build reports them, as on a GPU; ``ALPYKA_DEBUG=1``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from portable.spi import KernelHandle

PERSONALITIES = ("cuda", "rocm")
#: the variable choosing how kernel bodies run: ``cpp`` (the CUDA/HIP text) or ``opencl`` (its twin)
ENV_EXEC = "ALPYKA_EMULATE_EXEC"
EXECUTORS = ("cpp", "opencl")

_twins: dict[str, tuple[Any, Any]] = {}  # CUDA/HIP text -> (its CSource, the OpenCL CSource or None)
_twins_lock = threading.Lock()
_wrapped = False


def _record_twins() -> None:
    """Wrap the cuda/rocm launcher's emit step to record each source's OpenCL twin (once)."""
    global _wrapped
    if _wrapped:
        return
    import backends._gpu_launch as launch
    from backends._c_emit import emit

    original = launch.emit_for

    def emit_for_with_twin(kernel: KernelHandle, key: tuple, ndim: int, dialect: str) -> tuple[Any, Any]:
        hooked = dialect in ("cuda", "hip") and executor_name() == "cpp"
        if hooked and _checks_on() and not key[3]:  # the checks' "bounds": ALPYKA_DEBUG's range checks
            key = key[:3] + (True,) + key[4:]
        kir, src = original(kernel, key, ndim, dialect)
        if hooked:  # memory accesses and loop iterations through the hooks of cuda_on_cpu.h: its
            # checks, and its threads' switches (with the checks off too: real schedules, spins)
            src = emit(kir, dialect, unit_elements=key[4], checks=True)
        if dialect in ("cuda", "hip"):
            twin = emit(kir, "opencl", unit_elements=key[4]) if executor_name() == "opencl" else None
            with _twins_lock:
                _twins[src.text] = (src, twin)
        return kir, src

    emit_for_with_twin.__wrapped__ = original  # type: ignore[attr-defined]
    launch.emit_for = emit_for_with_twin
    _wrapped = True


@dataclass
class Prepared:
    """A loaded stand-in kernel: its CUDA/HIP source, the OpenCL twin and the built program."""

    name: str
    src: Any
    twin: Any
    program: Any


class _OpenCL:
    """The OpenCL CPU context every stand-in shares: built programs (CUDA's and HIP's twins are the
    same OpenCL text) and one command queue per stream thread."""

    def __init__(self) -> None:
        import pyopencl as cl

        self.cl = cl
        self.context = _cpu_device().native.context
        self.local = threading.local()
        self.programs: dict[tuple[str, int], Any] = {}
        self.lock = threading.Lock()

    def program(self, twin: Any, warp_size: int) -> Any:
        """``twin`` built to run warps of ``warp_size`` lanes, the emulated GPU's (the same text is
        built once per warp size: CUDA's twin and HIP's differ only there); a twin with warps on a
        device that cannot run that many lanes is a KernelBuildError naming the fix."""
        from backends._opencl_launch import build_program, runs_warps_of, uses_warps

        device = self.context.devices[0]
        if uses_warps(twin.text) and not runs_warps_of(device, warp_size):
            from portable import KernelBuildError

            raise KernelBuildError(
                f"kernel {twin.entry}: its warps (acc.warp_*) run {warp_size} lanes wide on the emulated GPU, and "
                f"{ENV_EXEC}=opencl runs them as sub-groups of the OpenCL CPU device {device.name.strip()!r} "
                f"({device.platform.name.strip()}), which cannot require that size "
                "(cl_intel_required_subgroup_size: Intel's CPU runtime can); unset "
                f"{ENV_EXEC} (the default executor, cpp) or install Intel's OpenCL CPU runtime"
            )
        with self.lock:
            program = self.programs.get((twin.text, warp_size))
            if program is None:
                program = build_program(self.context, device, twin, warp_size)
                self.programs[(twin.text, warp_size)] = program
            return program

    def queue(self) -> Any:
        q = getattr(self.local, "queue", None)
        if q is None:
            q = self.local.queue = self.cl.CommandQueue(self.context)
        return q


_opencl: list[_OpenCL] = []


def _shared_opencl() -> _OpenCL:
    with _twins_lock:
        if not _opencl:
            _opencl.append(_OpenCL())
        return _opencl[0]


class OpenCLTwinExecutor:
    """``rt.executor`` of one stand-in: its kernels run as their OpenCL twins on the opencl
    backend's CPU device, over its
    device memory (module docstring)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.ocl = _shared_opencl()

    # ------------------------------------------------------------------ load
    def prepare(self, code: str, name: str, options: tuple) -> Prepared:
        """The twin of ``code``'s kernel ``name``: NVRTC-checked, its OpenCL program built."""

        from backends.emulator.fake_cupy import WARP_SIZE

        src, twin = _recorded(code, name)
        _nvrtc_guard(src, options)
        return Prepared(name, src, twin, self.ocl.program(twin, WARP_SIZE[self.rt.is_hip]))

    # ------------------------------------------------------------------ run
    def run(self, prepared: Prepared, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> None:
        """Run the twin over the launch's arguments; returns once it finished (stream thread)."""

        cl, rt, context = self.ocl.cl, self.rt, self.ocl.context
        buffers: dict[int, Any] = {}

        def buffer_of(ptr: int, what: str) -> tuple[Any, int]:
            base, end = _device_span(rt, ptr, prepared.name, what)
            buf = buffers.get(base)
            if buf is None:
                host = (ctypes.c_uint8 * (end - base)).from_address(base)
                buf = buffers[base] = cl.Buffer(
                    context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host
                )
            return buf, ptr - base

        values: list[Any] = []
        given = iter(args)
        for what, item in prepared.twin.args:
            if what == "dyn_local":
                values.append(cl.LocalMemory(max(shared_mem, 1)))
            elif what == "param" and item.role == "array":
                buf, off = buffer_of(int(next(given)), f"array argument {item.name!r}")
                values += [buf, np.int64(off)]
            elif what == "err":
                buf, off = buffer_of(int(next(given)), "the range-check flag")
                values.append(buf if off == 0 else buf.get_sub_region(off, 4))
            else:
                values.append(next(given))
        from backends._opencl_launch import set_changed  # (numpy scalars set from their bytes)

        kernel = cl.Kernel(prepared.program, prepared.twin.entry)
        set_changed(kernel, [], values)
        q = self.ocl.queue()
        glob = tuple(int(g) * int(b) for g, b in zip(grid, block))
        cl.enqueue_nd_range_kernel(q, kernel, glob, tuple(int(b) for b in block))
        for buf in buffers.values():  # make the host memory current (a no-op copy on a CPU device)
            mapped, _ = cl.enqueue_map_buffer(q, buf, cl.map_flags.READ, 0, (buf.size,), np.uint8)
            mapped.base.release(q)
        q.finish()


def _cpu_device() -> Any:
    """The opencl backend's first CPU device (each of its devices passed a probe build)."""
    import portable as pk

    for dev in pk.devices("opencl"):
        if dev.properties.get("type") == "cpu":
            return dev
    raise pk.EnvVarError(
        f"{ENV_EXEC}=opencl runs the emulated GPU's kernels on an OpenCL CPU device and the opencl backend "
        f"has none here: unset {ENV_EXEC} (the default executor, cpp) or install an OpenCL CPU runtime (PoCL)"
    )


class CppExecutor:
    """``rt.executor`` of one stand-in: each kernel's CUDA/HIP text compiled for the CPU and run
    there with a GPU's block semantics (cuda_on_cpu.py)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt

    def prepare(self, code: str, name: str, options: tuple) -> Any:
        """The compiled kernel ``name`` of ``code``: NVRTC-checked, built by the C++ compiler."""
        from backends.emulator import cuda_on_cpu

        src, _ = _recorded(code, name)
        _nvrtc_guard(src, options)
        return cuda_on_cpu.build(src, name)

    def run(self, prepared: Any, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> None:
        """Run the kernel over the launch's arguments; returns once it finished (stream thread)."""
        from backends.emulator import cuda_on_cpu
        from portable.compiler import KernelCheckError

        for i, ctype in enumerate(prepared.params):
            if ctype.endswith("*"):
                _device_span(self.rt, int(args[i]), prepared.name, f"argument {i} ({ctype})")
        memory = self.rt.memory_table() if cuda_on_cpu.checks_on() else None
        try:
            cuda_on_cpu.run(prepared, grid, block, args, shared_mem, memory)
        except KernelCheckError as exc:
            if not _report_on_flag(prepared.src, args, exc):
                raise  # no error flag: a sticky device fault


def _checks_on() -> bool:
    from backends.emulator.cuda_on_cpu import checks_on

    return checks_on()


def _report_on_flag(src: Any, args: tuple, exc: Any) -> bool:
    """Report a check's KernelCheckError as ALPYKA_DEBUG's range checks report theirs: its
    message joins the source's check messages and its number goes into the kernel's error flag
    (the last argument; the first report wins), which the launcher reads after the kernel and
    raises at the next ``wait()``, the queue staying usable. False when the kernel has no flag."""
    if src is None or not src.needs_error_flag or not args:
        return False
    report = exc.report()
    with _twins_lock:
        messages = src.check_messages
        for i, m in enumerate(messages):
            if type(m) is type(report) and m == report:
                ident = i + 1
                break
        else:
            messages.append(report)
            ident = len(messages)
    flag = ctypes.c_int32.from_address(int(args[-1]))
    if flag.value == 0:
        flag.value = ident
    return True


def _recorded(code: str, name: str) -> tuple[Any, Any]:
    """``(CSource, OpenCL twin or None)`` of a source alpyka's launcher emitted."""
    from backends.emulator.fake_cupy import CUDARuntimeError

    with _twins_lock:
        found = _twins.get(code)
    if found is None or found[0].entry != name:
        raise CUDARuntimeError(
            f"CUDA_ERROR_INVALID_SOURCE: fake cupy runs only kernels emitted by alpyka "
            f"(no source recorded for kernel {name!r})"
        )
    return found


def _device_span(rt: Any, ptr: int, kernel: str, what: str) -> tuple[int, int]:
    """``(base, end)`` of the device allocation ``ptr`` points into; cudaErrorIllegalAddress else."""
    from backends.emulator.fake_cupy import CUDARuntimeError

    span = rt.span(ptr)
    if span is None or span[2] != "device":
        raise CUDARuntimeError(f"cudaErrorIllegalAddress: kernel {kernel}: {what} ({ptr:#x}) is not device memory")
    return span[0], span[1]


def executor_name() -> str:
    """``cpp`` or ``opencl``, from ``ALPYKA_EMULATE_EXEC`` (default cpp); ``pk.EnvVarError`` (a
    ValueError) for another."""
    name = os.environ.get(ENV_EXEC, "cpp").strip().lower() or "cpp"
    if name not in EXECUTORS:
        from portable import EnvVarError  # the error branch only: a launch's path reads this

        raise EnvVarError(f"{ENV_EXEC}={name!r}: use one of {', '.join(EXECUTORS)}")
    return name


def describe() -> str:
    """How the stand-in runs kernels in this process, for the header of a test run."""
    if executor_name() == "opencl":
        return "kernels run as their OpenCL twins on " + str(_cpu_device())
    from backends.emulator import cuda_on_cpu

    path, version = cuda_on_cpu.compiler()
    return f"kernels run as their CUDA/HIP source, compiled by {version} ({path}) for the CPU"


def _nvrtc_guard(src: Any, options: tuple) -> None:
    """Compile the CUDA/HIP text with NVRTC and cupy's options, where NVRTC is installed."""
    from backends._c_build import nvrtc_available, nvrtc_compile

    if nvrtc_available() is not None:
        return
    opts = tuple(o for o in options if o != "--std=c++17")  # nvrtc_compile passes it itself
    if src.dialect == "hip":  # hiprtc's float rules (-ffp-contract=off...) in NVRTC's spelling
        from backends._c_build import HIPRTC_FLOAT_OPTIONS, float_options

        hiprtc_only = {o for spelled in HIPRTC_FLOAT_OPTIONS.values() for o in spelled}
        opts = float_options("cuda", src.fast_math) + tuple(o for o in opts if o not in hiprtc_only)
    nvrtc_compile(src, os.environ.get("ALPYKA_CUDA_ARCH", "compute_90"), opts)


# ---------------------------------------------------------------------- the matrix's backends
def enable_execution(cupy: Any) -> Any:
    """Make the stand-in ``cupy`` (from ``make_fake_cupy``) run kernel bodies with the executor
    ``ALPYKA_EMULATE_EXEC`` names; returns it."""
    _record_twins()
    executor = OpenCLTwinExecutor if executor_name() == "opencl" else CppExecutor
    cupy.rt.executor = executor(cupy.rt)
    # device memory tracked (poisoned, its writes recorded) where the checks see it: cuda_on_cpu
    cupy.rt.memory_checks = _checks_on if executor is CppExecutor else None
    return cupy


def why_not() -> str | None:
    """None when the emulator can run kernels in this process, else why not: its executor
    cannot run here (no C++ compiler; for the twins, no OpenCL CPU device)."""
    try:
        which = executor_name()
    except ValueError as exc:
        return str(exc)
    if which == "cpp":
        from backends.emulator import cuda_on_cpu

        return cuda_on_cpu.compiler_problem()
    try:
        _shared_opencl()
    except Exception as exc:  # noqa: BLE001 - pyopencl missing, no CPU device: the reason is reported
        return f"no OpenCL CPU device to run kernels on ({type(exc).__name__}: {exc})"
    return None


def load(name: str, n_devices: int = 2) -> Any:
    """The ``cuda`` (CUDA personality) or ``rocm`` (HIP) backend on the emulator, for alpyka's
    registry (portable/_registry.py, when ``ALPYKA_EMULATE`` names it); BackendUnavailable with
    the reason where the emulator cannot run here."""
    from backends._cupy_common import CupyBackend
    from backends.emulator.fake_cupy import make_fake_cupy
    from portable import BackendUnavailable

    if name not in PERSONALITIES:
        raise BackendUnavailable(f"the GPU emulator runs {', '.join(PERSONALITIES)}, not {name!r}")
    reason = why_not()
    if reason is not None:
        raise BackendUnavailable(f"emulated on the CPU (ALPYKA_EMULATE) but the emulator cannot run here: {reason}")
    backend = CupyBackend(name, enable_execution(make_fake_cupy(n_devices=n_devices, is_hip=name == "rocm")))
    backend.execution = describe  # how kernels run, for ``alpyka info`` (as the CPU backends say it)
    for dev in backend.devices():  # the same GPU's capabilities, declared emulated
        dev.capabilities = replace(dev.capabilities, emulated=True)
    return backend


def served_here() -> list[str]:
    """The backends the emulator serves in this process (``ALPYKA_EMULATE``, and it can run here)."""
    import portable as pk

    return [
        n
        for n in pk.available_backends()
        if isinstance(getattr(getattr(pk.get_backend(n), "cupy", None), "rt", None), _runtime_class())
    ]


def _runtime_class() -> type:
    from backends.emulator.fake_cupy import _Runtime

    return _Runtime
