"""The three C dialects of the device emitter: OpenCL C, CUDA C and HIP (CUDA's source on hiprtc).

A :class:`Dialect` says how the emitter spells what differs between them: address spaces,
work-item queries, barriers, atomics, math function names and the helper functions the kernel
needs (Python's ``//`` and ``%``, integer ``**``, CAS-loop atomics). Helpers are emitted on
demand, so a kernel's source holds only what it uses.

One class per dialect, as alpaka keeps one trait specialisation per backend
(``include/alpaka/kernel/Traits.hpp``): :class:`OpenCL`, :class:`Cuda`, and :class:`Hip`, a
refinement of CUDA (one source serves both, as alpaka's ``TaskKernelGpuUniformCudaHipRt.hpp``
does) that differs only in its warp intrinsics and the atomics AMD GPUs lack. Nothing branches on
a dialect's name: what differs is a method of the dialect's class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from portable.compiler.operations import MATH, Intrinsic
from portable.compiler.types import ScalarType

from ._c_prologues import CUDA_PROLOGUE, HIP_WARPS, OPENCL_PROLOGUE, WARP_LANES

#: C spelling of each kernel scalar type (typedefs in every dialect's prologue)
CTYPE = {
    "bool": "bool",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float32": "f32",
    "float64": "f64",
}
#: how a value of each type is stored in memory and passed as a kernel argument (no C bool there)
STORAGE = {**CTYPE, "bool": "u8"}

#: the macro an OpenCL build defines where the device has work-group collectives
#: (backends/_opencl_launch.py): the body of ``if acc.block_collectives:`` is compiled then
WG_COLLECTIVES = "ALPYKA_WG_COLLECTIVES"

#: CUDA's cap on a block's static ``__shared__`` memory on every GPU (ptxas refuses more); a block
#: may use more only as dynamic shared memory, which the launcher opts in to up to the device's
#: ``sharedMemPerBlockOptin``
CUDA_STATIC_SHARED = 48 * 1024


def _member_mask(mask: str | None) -> str:
    """The member mask of a CUDA ``*_sync`` call: the kernel's explicit one, else the warp's launched lanes."""
    return "ALPYKA_LANES" if mask is None else f"(unsigned int)({mask})"


class Dialect:
    """How one C dialect spells the device-specific parts (see the module docstring); every
    method is a dialect's trait, each subclass answers for its own dialect."""

    __slots__ = ()
    #: the dialect's name: "opencl", "cuda" or "hip" (``CSource.dialect``, compiler options)
    name: ClassVar[str]
    #: whether block predicates (``acc.syncthreads_count``...) count in a ``__local`` int the kernel
    #: declares and passes to its device functions (OpenCL: no block-wide vote built-in)
    block_predicate_counter: ClassVar[bool] = False
    #: whether a thread whose assert failed must still reach the block's barriers (OpenCL: a
    #: barrier that some work-items of the group skip is undefined)
    failed_thread_reaches_barriers: ClassVar[bool] = False
    #: whether warp operations are helper functions of the kernel over sub-group built-ins
    #: (OpenCL), not the prologue's intrinsic macros
    warps_by_helpers: ClassVar[bool] = False
    #: whether ``print`` calls the dialect's own ``printf`` (OpenCL), not the ``alpyka_printf`` helper
    builtin_printf: ClassVar[bool] = False
    #: printf's length modifier and the C type of a 64-bit integer argument
    printf_int64: ClassVar[tuple[str, str]] = ("ll", "long long")
    #: the source line that turns FMA contraction off (where build options do not: CUDA, HIP)
    no_contraction: ClassVar[str] = ""
    #: what a loop of the kernel's code starts with (OpenCL: ``ALPYKA_NO_VECTORIZE``, a loop-vectorizer
    #: veto where the build defines ``ALPYKA_SEQUENTIAL_LOOPS``, backends/_opencl_launch.py)
    loop_hint: ClassVar[str] = ""
    #: whether the GPU emulator runs this dialect (its shared-memory access checks apply)
    emulator_checks: ClassVar[bool] = False

    # ------------------------------------------------------------------ declarations
    def prologue(self, warps: bool = False) -> str:
        """The typedefs and macros every kernel starts with (``warps``: the warp's launched-lanes
        mask, and HIP's warp macros)."""
        raise NotImplementedError

    def kernel_qualifier(self) -> str:
        raise NotImplementedError

    def space(self, kind: str) -> str:
        """Address-space qualifier of a pointer to an array of ``kind``."""
        return ""

    def shared_decl(self, ctype: str, name: str, size: int) -> str:
        raise NotImplementedError

    def dynamic_shared_param(self) -> tuple[str, str] | None:
        """The C type and name of the kernel parameter that carries dynamic shared memory, which
        device functions take too (OpenCL), or None (CUDA: :meth:`dynamic_shared_base`)."""
        return None

    def dynamic_shared_base(self) -> str:
        """The kernel body's line that names the dynamic shared memory ("" where a parameter does)."""
        return ""

    def array_param(self, name: str, const: bool, storage: str) -> tuple[list[str], str] | None:
        """The kernel parameters of array argument ``name`` and the body's line that makes its
        pointer, where an array arrives as a buffer and a byte offset (OpenCL); None where it
        arrives as a pointer."""
        return None

    # ------------------------------------------------------------------ errors, launch limits
    def report_error(self, err: str, code: str) -> str:
        """The statement that stores ``code`` in the error flag ``err`` unless one is there."""
        raise NotImplementedError

    def static_shared_limit(self, device: Any) -> tuple[int, str, str]:
        """The bytes of static shared arrays one block may declare on ``device``, the rule that
        sets it and what a kernel above it does instead (a block's local memory, by default)."""
        limit = device.limits.shared_memory_per_block
        rule = f"{device} has {limit} bytes of {self.shared_memory_name}"
        return limit, rule, "make the arrays smaller (fewer elements per block, or a smaller dtype)"

    #: what the device's shared memory per block is called in a static shared limit's error
    shared_memory_name: ClassVar[str] = "shared memory per block"

    # ------------------------------------------------------------------ each dialect's own
    def index(self, query: str, dim: int, ndim: int) -> str:
        """Work-division query ``query`` along alpaka dimension ``dim`` of ``ndim``, as i64."""
        raise NotImplementedError

    def barrier(self) -> str:
        raise NotImplementedError

    def fence(self, scope: str) -> str:
        raise NotImplementedError

    def block_predicate(self, op: str, p: str) -> str | None:
        raise NotImplementedError

    def warp_vote(self, op: str, p: str, mask: str | None = None) -> str | None:
        raise NotImplementedError

    def warp_shuffle(self, op: str, v: str, k: str, mask: str | None = None) -> str | None:
        raise NotImplementedError

    def lane_and_warp_size(self) -> tuple[str, str]:
        """The u32 expressions of the caller's lane in its warp and the warp's size."""
        raise NotImplementedError

    def warps_only(self, body: str, fallback: str) -> str:
        """A helper's ``body`` where the build has warps, else ``fallback`` (a one-lane warp)."""
        return body

    def native_match_any(self, bits: str) -> tuple[str, str] | None:
        """CUDA's ``__match_any_sync`` on ``bits`` and the active lanes' mask, or None where the
        lanes vote in a loop (:meth:`match_loop`)."""
        return None

    def match_loop(self) -> tuple[str, str, str]:
        """A match by votes: the active lanes' mask, the lowest undecided lane's value of ``b``
        (from ``todo``) and the ballot's function."""
        raise NotImplementedError

    def bit_intrinsic(self, intrinsic: Intrinsic, x: str, t: ScalarType, helper: Callable[..., str]) -> str:
        """Bit intrinsic ``intrinsic`` (popcount, clz...) on the rendered ``x`` of type ``t``
        (``helper`` includes a helper function the dialect needs)."""
        raise NotImplementedError

    def native_atomic(self, op: str, t: ScalarType, space: str) -> str | None:
        raise NotImplementedError

    def collectives_macro(self) -> str | None:
        """The macro a build defines where the device has work-group collectives (then the body
        of ``if acc.block_collectives:`` is compiled), or None: the dialect has none."""
        return None

    def block_collective(self, op: str, t: ScalarType, v: str) -> str | None:
        """Work-group collective ``op`` (ir.BLOCK_COLLECTIVES) of the integer ``v`` of type ``t``
        (wrapping sums), or None: the dialect has none."""
        return None

    def alone_in_block(self, ndim: int) -> str | None:
        """The condition that the caller is its block's only thread, where a dialect's kernels
        run such blocks (then an atomic on shared memory is a plain update, which no other
        thread can see), or None: the atomics stay atomic."""
        return None

    def cas_word(self, bits: int, space: str) -> tuple[str, str]:
        raise NotImplementedError

    def atomic_read(self, word: str, space: str) -> str:
        raise NotImplementedError

    def bits_of(self, t: ScalarType, expr: str) -> str:
        raise NotImplementedError

    def from_bits(self, t: ScalarType, expr: str) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ math
    def math(self, func: str, t: ScalarType) -> str:
        """C name of ``math.<func>`` on arguments of type ``t`` (float32 or float64), as
        :mod:`portable.compiler.operations` declares it."""
        name = MATH[func].c
        if name is None:
            raise KeyError(func)
        return name

    def from_bits_int(self, t: ScalarType, expr: str) -> str:
        """``expr`` (an unsigned word) as the integer type ``t``."""
        return f"({CTYPE[t.name]})({expr})"


class OpenCL(Dialect):
    """OpenCL C 1.2 (with the 64-bit atomics and fp64 extensions)."""

    __slots__ = ()
    name = "opencl"
    block_predicate_counter = True
    failed_thread_reaches_barriers = True
    warps_by_helpers = True
    builtin_printf = True
    printf_int64 = ("l", "long")  # OpenCL's long is 64 bits
    shared_memory_name = "local memory per work-group (CL_DEVICE_LOCAL_MEM_SIZE)"
    no_contraction = "#pragma OPENCL FP_CONTRACT OFF"
    loop_hint = "ALPYKA_NO_VECTORIZE "

    def prologue(self, warps: bool = False) -> str:
        return OPENCL_PROLOGUE

    def kernel_qualifier(self) -> str:
        # ALPYKA_KERNEL: __kernel with the sub-group size the device reports where the build pins
        # one (ALPYKA_SUBGROUP_SIZE, backends/_opencl_launch.py)
        return "ALPYKA_KERNEL void"

    def space(self, kind: str) -> str:
        if kind == "private":
            return ""
        return "__local " if kind in ("shared", "dynamic_shared") else "__global "

    def shared_decl(self, ctype: str, name: str, size: int) -> str:
        return f"__local {ctype} {name}[{max(size, 1)}];"

    def dynamic_shared_param(self) -> tuple[str, str] | None:
        return "__local u8*", "alpyka_dyn_shared"

    def array_param(self, name: str, const: bool, storage: str) -> tuple[list[str], str] | None:
        q = "const " if const else ""
        ptr = f"__global {q}{storage}*"
        return [f"__global u8* {name}_buf", f"i64 {name}_off"], f"{ptr} {name} = ({ptr})({name}_buf + {name}_off);"

    def report_error(self, err: str, code: str) -> str:
        return f"atomic_cmpxchg((volatile __global i32*){err}, 0, {code})"

    def lane_and_warp_size(self) -> tuple[str, str]:
        return "get_sub_group_local_id()", "get_max_sub_group_size()"

    def warps_only(self, body: str, fallback: str) -> str:
        return f"#ifdef ALPYKA_SUBGROUPS\n{body}\n#else\n    {fallback}\n#endif"

    def match_loop(self) -> tuple[str, str, str]:
        return "alpyka_ballot(true)", "sub_group_shuffle(b, (uint)popcount((todo & (0 - todo)) - 1))", "alpyka_ballot"

    def bit_intrinsic(self, intrinsic: Intrinsic, x: str, t: ScalarType, helper: Callable[..., str]) -> str:
        return intrinsic.opencl_text(x, t, helper)

    def index(self, query: str, dim: int, ndim: int) -> str:
        axis = ndim - 1 - dim  # alpaka's fastest dimension is OpenCL's 0 and CUDA's x
        fn = {
            "block_idx": "get_group_id",
            "thread_idx": "get_local_id",
            "grid_blocks": "get_num_groups",
            "block_threads": "get_local_size",
        }[query]
        return f"((i64){fn}({axis}))"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"

    def fence(self, scope: str) -> str:
        """``acc.mem_fence(scope)``: OpenCL 1.2's ``mem_fence`` (both address spaces: a block's
        shared memory and global memory), whatever the scope."""
        return "mem_fence(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"

    def block_predicate(self, op: str, p: str) -> str | None:
        """None: a helper does it (backends/_c_helpers.py)."""
        return None

    def warp_vote(self, op: str, p: str, mask: str | None = None) -> str | None:
        """None: helpers over sub-groups."""
        return None

    def warp_shuffle(self, op: str, v: str, k: str, mask: str | None = None) -> str | None:
        """None: helpers over sub-groups."""
        return None

    def native_atomic(self, op: str, t: ScalarType, space: str) -> str | None:
        """A native atomic call template ``"fn((P*)ptr, V)"`` for ``op`` on ``t``, or None."""
        n = t.name
        if n in ("int32", "uint32"):
            fn = {
                "add": "atomic_add",
                "sub": "atomic_sub",
                "min": "atomic_min",
                "max": "atomic_max",
                "exch": "atomic_xchg",
                "and": "atomic_and",
                "or": "atomic_or",
                "xor": "atomic_xor",
            }.get(op)
            return None if fn is None else f"{fn}((volatile {space}{CTYPE[n]}*)p, v)"
        if n in ("int64", "uint64"):
            fn = {
                "add": "atom_add",
                "sub": "atom_sub",
                "min": "atom_min",
                "max": "atom_max",
                "exch": "atom_xchg",
                "and": "atom_and",
                "or": "atom_or",
                "xor": "atom_xor",
            }.get(op)
            return None if fn is None else f"{fn}((volatile {space}{CTYPE[n]}*)p, v)"
        if n == "float32" and op == "exch":
            return f"atomic_xchg((volatile {space}f32*)p, v)"
        return None

    def collectives_macro(self) -> str | None:
        """OpenCL C 2.0's work-group functions (3.0: the ``__opencl_c_work_group_collective_functions``
        feature): :data:`WG_COLLECTIVES`, defined with the ``-cl-std`` that has them where the
        device does (backends/_opencl_launch.py)."""
        return WG_COLLECTIVES

    def block_collective(self, op: str, t: ScalarType, v: str) -> str | None:
        """``work_group_scan_inclusive_add`` / ``work_group_reduce_add`` on an unsigned word
        (wrapping sums, the bits of any integer type's)."""
        word = "u64" if t.bits == 64 else "u32"
        fn = {"scan_add": "work_group_scan_inclusive_add", "reduce_add": "work_group_reduce_add"}[op]
        return f"(({CTYPE[t.name]}){fn}(({word})({v})))"

    def alone_in_block(self, ndim: int) -> str | None:
        """A CPU-shaped work division's work-group has one work-item (``pk.make_workdiv`` on a
        CPU device): its local memory is its own, and a CPU runtime's atomic instructions on it
        cost 2-3x the kernel (PoCL). Asked of the launch's dimensions only (PoCL 3 crashes when
        a 1D kernel asks for ``get_local_size(1)``: :meth:`Helpers.block_predicate`)."""
        return " && ".join(f"get_local_size({d}) == 1" for d in range(ndim))

    def cas_word(self, bits: int, space: str) -> tuple[str, str]:
        """``(word type, CAS call template)`` for a compare-and-swap of ``bits`` (32/64) bits."""
        if bits == 32:
            return "u32", f"atomic_cmpxchg((volatile {space}u32*)p, cmp, val)"
        return "u64", f"atom_cmpxchg((volatile {space}u64*)p, cmp, val)"

    def atomic_read(self, word: str, space: str) -> str:
        """The first read of a compare-and-swap loop over ``wp`` (a volatile ``word`` pointer).
        OpenCL 1.2 has no atomic load, and a plain load racing with other work-items' atomics is
        a data race in its memory model (Oclgrind reports it): a CAS of 0 by 0 reads atomically
        and changes nothing."""
        fn = "atomic_cmpxchg" if word == "u32" else "atom_cmpxchg"
        return f"{fn}((volatile {space}{word}*)wp, ({word})0, ({word})0)"

    def bits_of(self, t: ScalarType, expr: str) -> str:
        """``expr`` (of type ``t``) reinterpreted as an unsigned word of the same size."""
        if t.name == "float32":
            return f"as_uint({expr})"
        if t.name == "float64":
            return f"as_ulong({expr})"
        return f"({'u32' if t.bits == 32 else 'u64'})({expr})"

    def from_bits(self, t: ScalarType, expr: str) -> str:
        if t.name == "float32":
            return f"as_float({expr})"
        if t.name == "float64":
            return f"as_double({expr})"
        return self.from_bits_int(t, expr)


class Cuda(Dialect):
    """CUDA C++ as NVRTC compiles it."""

    __slots__ = ()
    name = "cuda"
    emulator_checks = True

    def prologue(self, warps: bool = False) -> str:
        return CUDA_PROLOGUE + WARP_LANES if warps else CUDA_PROLOGUE

    def kernel_qualifier(self) -> str:
        return 'extern "C" __global__ void'

    def shared_decl(self, ctype: str, name: str, size: int) -> str:
        return f"__shared__ {ctype} {name}[{max(size, 1)}];"

    def dynamic_shared_base(self) -> str:
        return "extern __shared__ __align__(16) u8 alpyka_dyn_shared[];"

    def report_error(self, err: str, code: str) -> str:
        return f"atomicCAS((int*){err}, 0, {code})"

    def static_shared_limit(self, device: Any) -> tuple[int, str, str]:
        """CUDA_STATIC_SHARED of ``__shared__`` (ptxas's cap), or less where the device has less;
        what is above goes to dynamic shared memory, up to the device's opt-in limit."""
        block_limit = device.limits.shared_memory_per_block
        limit = min(CUDA_STATIC_SHARED, block_limit)
        rule = f"CUDA caps a block's static __shared__ memory at {limit} bytes ({limit // 1024} KiB)"
        optin = device.properties.get("shared_memory_per_block_optin") or block_limit
        fix = (
            f"declare what is above it as dynamic shared memory (acc.dynamic_shared_array with "
            f"@pk.kernel(dynamic_shared_bytes=...)), which {device} gives a block up to {optin} bytes of"
        )
        return limit, rule, fix

    def lane_and_warp_size(self) -> tuple[str, str]:
        return "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % (u32)warpSize", "(u32)warpSize"

    def native_match_any(self, bits: str) -> tuple[str, str] | None:
        return f"(u64)__match_any_sync(ALPYKA_LANES, {bits})", "(u64)__ballot_sync(ALPYKA_LANES, 1)"

    def match_loop(self) -> tuple[str, str, str]:
        return "ALPYKA_BALLOT(1)", "ALPYKA_SHFL(b, (int)__ffsll((long long)todo) - 1)", "ALPYKA_BALLOT"

    def bit_intrinsic(self, intrinsic: Intrinsic, x: str, t: ScalarType, helper: Callable[..., str]) -> str:
        return intrinsic.cuda_text(x, t)

    # ------------------------------------------------------------------ work-item queries
    def index(self, query: str, dim: int, ndim: int) -> str:
        axis = ndim - 1 - dim  # alpaka's fastest dimension is OpenCL's 0 and CUDA's x
        xyz = "xyz"[axis]
        var = {
            "block_idx": "blockIdx",
            "thread_idx": "threadIdx",
            "grid_blocks": "gridDim",
            "block_threads": "blockDim",
        }[query]
        return f"((i64){var}.{xyz})"

    def barrier(self) -> str:
        return "__syncthreads();"

    def fence(self, scope: str) -> str:
        """``acc.mem_fence(scope)``: CUDA's and HIP's thread fences."""
        return {"block": "__threadfence_block();", "grid": "__threadfence();", "device": "__threadfence_system();"}[
            scope
        ]

    def block_predicate(self, op: str, p: str) -> str | None:
        """CUDA's and HIP's ``__syncthreads_count/and/or``."""
        if op == "count":
            return f"((i64)__syncthreads_count({p}))"
        return f"(__syncthreads_{op}({p}) != 0)"

    # ------------------------------------------------------------------ warps
    def warp_vote(self, op: str, p: str, mask: str | None = None) -> str | None:
        """Warp size, active mask, all/any/ballot: ``*_sync`` over the warp's launched lanes
        (``__activemask()`` only for the active mask itself)."""
        if op == "size":
            return "((i64)warpSize)"
        if op == "active_mask":
            return "((u64)__activemask())"
        if op == "ballot":
            return f"((u64)__ballot_sync({_member_mask(mask)}, {p}))"
        return f"(__{op}_sync(ALPYKA_LANES, {p}) != 0)"

    def warp_shuffle(self, op: str, v: str, k: str, mask: str | None = None) -> str | None:
        """``__shfl*_sync`` over the launched lanes of a 32- or 64-bit value."""
        kk = f"(unsigned int)({k})" if op in ("shfl_up", "shfl_down") else k
        return f"__{op}_sync({_member_mask(mask)}, {v}, {kk})"

    # ------------------------------------------------------------------ math
    def math(self, func: str, t: ScalarType) -> str:
        """CUDA's float32 functions end in ``f`` (``sqrtf``)."""
        name = super().math(func, t)
        return name if t.name == "float64" else name + "f"

    # ------------------------------------------------------------------ atomics
    def native_atomic(self, op: str, t: ScalarType, space: str) -> str | None:
        """A native atomic call template ``"fn((P*)ptr, V)"`` for ``op`` on ``t``, or None."""
        n = t.name
        ull = "unsigned long long"
        if n in ("int32", "uint32"):
            fn = {
                "add": "atomicAdd",
                "sub": "atomicSub",
                "min": "atomicMin",
                "max": "atomicMax",
                "exch": "atomicExch",
                "and": "atomicAnd",
                "or": "atomicOr",
                "xor": "atomicXor",
            }.get(op)
            if n == "uint32" and op in ("inc", "dec"):
                fn = "atomicInc" if op == "inc" else "atomicDec"
            return None if fn is None else f"{fn}(p, v)"
        if n == "uint64":
            fn = {
                "add": "atomicAdd",
                "min": "atomicMin",
                "max": "atomicMax",
                "exch": "atomicExch",
                "and": "atomicAnd",
                "or": "atomicOr",
                "xor": "atomicXor",
            }.get(op)
            return None if fn is None else f"{fn}(({ull}*)p, ({ull})v)"
        if n == "int64":
            if op in ("min", "max"):  # long long overloads: CUDA sm_35+
                return f"(i64)atomic{op.capitalize()}((long long*)p, (long long)v)"
            fn = {
                "add": "atomicAdd",
                "exch": "atomicExch",
                "and": "atomicAnd",
                "or": "atomicOr",
                "xor": "atomicXor",
            }.get(op)
            return None if fn is None else f"(i64){fn}(({ull}*)p, ({ull})v)"
        if n == "float32" and op in ("add", "exch"):
            return f"atomic{'Add' if op == 'add' else 'Exch'}(p, v)"
        if n == "float64" and op == "add":
            return "alpyka_atomic_add_f64(p, v)"  # native on sm_60+, a CAS loop below (prologue)
        return None

    def cas_word(self, bits: int, space: str) -> tuple[str, str]:
        """``(word type, CAS call template)`` for a compare-and-swap of ``bits`` (32/64) bits."""
        if bits == 32:
            return "u32", "atomicCAS((unsigned int*)p, cmp, val)"
        return "u64", "(u64)atomicCAS((unsigned long long*)p, (unsigned long long)cmp, (unsigned long long)val)"

    def atomic_read(self, word: str, space: str) -> str:
        """The first read of a compare-and-swap loop: the plain volatile load."""
        return "*wp"

    def bits_of(self, t: ScalarType, expr: str) -> str:
        """``expr`` (of type ``t``) reinterpreted as an unsigned word of the same size."""
        if t.name == "float32":
            return f"__float_as_uint({expr})"
        if t.name == "float64":
            return f"(u64)__double_as_longlong({expr})"
        return f"({'u32' if t.bits == 32 else 'u64'})({expr})"

    def from_bits(self, t: ScalarType, expr: str) -> str:
        if t.name == "float32":
            return f"__uint_as_float({expr})"
        if t.name == "float64":
            return f"__longlong_as_double((long long)({expr}))"
        return self.from_bits_int(t, expr)


class Hip(Cuda):
    """HIP: CUDA's source on hiprtc, with the wavefront's warp intrinsics (through the
    prologue's macros) and without the atomics AMD GPUs lack."""

    __slots__ = ()
    name = "hip"
    shared_memory_name = "LDS per block"

    def static_shared_limit(self, device: Any) -> tuple[int, str, str]:
        """The device's LDS per block (no static cap of its own)."""
        return Dialect.static_shared_limit(self, device)

    def native_match_any(self, bits: str) -> tuple[str, str] | None:
        """None: no such instruction on every AMD target (the lanes vote in a loop)."""
        return None

    def prologue(self, warps: bool = False) -> str:
        return super().prologue(warps) + (HIP_WARPS if warps else "")

    def warp_vote(self, op: str, p: str, mask: str | None = None) -> str | None:
        """Warp size, and HIP's wavefront intrinsics through the prologue's macros."""
        if op == "size":
            return "((i64)warpSize)"
        return f"ALPYKA_BALLOT_MASK({mask}, {p})" if mask else f"ALPYKA_{op.upper()}({p})"

    def warp_shuffle(self, op: str, v: str, k: str, mask: str | None = None) -> str | None:
        """``__shfl*`` through the prologue's macros."""
        return f"ALPYKA_SHFL_MASK({mask}, {v}, {k})" if mask else f"ALPYKA_{op.upper()}({v}, {k})"

    def native_atomic(self, op: str, t: ScalarType, space: str) -> str | None:
        """CUDA's, but no ``long long`` min/max overloads and no native float64 add (a CAS loop
        does them)."""
        if (t.name == "int64" and op in ("min", "max")) or (t.name == "float64" and op == "add"):
            return None
        return super().native_atomic(op, t, space)


DIALECTS: dict[str, Dialect] = {d.name: d for d in (OpenCL(), Cuda(), Hip())}
