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

from typing import ClassVar

from portable.compiler.operations import MATH
from portable.compiler.types import ScalarType

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

_OPENCL_PROLOGUE = """\
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable
typedef char i8; typedef short i16; typedef int i32; typedef long i64;
typedef uchar u8; typedef ushort u16; typedef uint u32; typedef ulong u64;
typedef float f32; typedef double f64;
#define ALPYKA_FN static inline
#define ALPYKA_INF_F32 INFINITY
#define ALPYKA_NAN_F32 NAN
#define ALPYKA_INF_F64 ((f64)INFINITY)
#define ALPYKA_NAN_F64 ((f64)NAN)
#ifdef ALPYKA_SUBGROUP_SIZE
#define ALPYKA_KERNEL __attribute__((intel_reqd_sub_group_size(ALPYKA_SUBGROUP_SIZE))) __kernel
#else
#define ALPYKA_KERNEL __kernel
#endif
#ifdef ALPYKA_SEQUENTIAL_LOOPS
#define ALPYKA_NO_VECTORIZE _Pragma("clang loop vectorize(disable)")
#else
#define ALPYKA_NO_VECTORIZE
#endif
"""

_CUDA_PROLOGUE = """\
typedef signed char i8; typedef short i16; typedef int i32; typedef long long i64;
typedef unsigned char u8; typedef unsigned short u16; typedef unsigned int u32;
typedef unsigned long long u64; typedef float f32; typedef double f64;
#define ALPYKA_FN static __device__ __forceinline__
#define ALPYKA_INF_F32 __int_as_float(0x7f800000)
#define ALPYKA_NAN_F32 __int_as_float(0x7fffffff)
#define ALPYKA_INF_F64 __longlong_as_double(0x7ff0000000000000LL)
#define ALPYKA_NAN_F64 __longlong_as_double(0x7fffffffffffffffLL)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600
static __device__ __forceinline__ f64 alpyka_atomic_add_f64(f64* p, f64 v) {  /* no native f64 add below sm_60 */
    unsigned long long* w = (unsigned long long*)p;
    unsigned long long old = *w, seen;
    do {
        seen = old;
        old = atomicCAS(w, seen, (unsigned long long)__double_as_longlong(__longlong_as_double((long long)seen) + v));
    } while (old != seen);
    return __longlong_as_double((long long)old);
}
#else
#define alpyka_atomic_add_f64(p, v) atomicAdd(p, v)
#endif
"""

# The member mask of every CUDA *_sync warp operation: the lanes the launch gave this thread's
# warp (all of them, or the block's partial last warp's), never __activemask(), which only reports
# the lanes that happen to run together (after a divergent loop a subset: the others' values are
# undefined). u64 as HIP's 64-lane wavefront needs; the CUDA calls take its low 32 bits.
_WARP_LANES = """\
ALPYKA_FN u64 alpyka_warp_lanes(void) {  /* the launched lanes of this thread's warp */
    u32 w = (u32)warpSize;
    u32 t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    u32 left = blockDim.x * blockDim.y * blockDim.z - t / w * w;
    return left >= w ? (~0ull >> (64u - w)) : ((1ull << left) - 1ull);
}
#define ALPYKA_LANES ((unsigned int)alpyka_warp_lanes())
"""

# HIP's wavefront intrinsics where hiprtc (or the stand-in's HIP personality) compiles the text
# (no member mask: a wavefront runs its active lanes in lockstep and reconverges after a branch);
# CUDA's *_sync ones over the launched lanes where NVRTC checks the same HIP text
_HIP_WARPS = """\
#if defined(__HIP__) || defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ALPYKA_ACTIVE_MASK() ((u64)__ballot(1))
#define ALPYKA_BALLOT(p) ((u64)__ballot(p))
#define ALPYKA_ALL(p) (__all(p) != 0)
#define ALPYKA_ANY(p) (__any(p) != 0)
#define ALPYKA_SHFL(v, k) __shfl(v, k)
#define ALPYKA_SHFL_UP(v, k) __shfl_up(v, (unsigned int)(k))
#define ALPYKA_SHFL_DOWN(v, k) __shfl_down(v, (unsigned int)(k))
#define ALPYKA_SHFL_XOR(v, k) __shfl_xor(v, k)
#if defined(ALPYKA_CUDA_ON_CPU) /* the GPU emulator: it checks the member mask */
#define ALPYKA_BALLOT_MASK(m, p) ((u64)alpyka_ballot((u64)(m), p, __LINE__))
#define ALPYKA_SHFL_MASK(m, v, k) alpyka_shfl(alpyka_host::W_SHFL, (u64)(m), v, (long long)(int)(k), __LINE__)
#else /* a wavefront votes over the lanes it runs: the mask only masks */
#define ALPYKA_BALLOT_MASK(m, p) (ALPYKA_BALLOT(p) & (u64)(m))
#define ALPYKA_SHFL_MASK(m, v, k) ALPYKA_SHFL(v, k)
#endif
#else
#define ALPYKA_ACTIVE_MASK() ((u64)__activemask())
#define ALPYKA_BALLOT(p) ((u64)__ballot_sync(ALPYKA_LANES, p))
#define ALPYKA_ALL(p) (__all_sync(ALPYKA_LANES, p) != 0)
#define ALPYKA_ANY(p) (__any_sync(ALPYKA_LANES, p) != 0)
#define ALPYKA_SHFL(v, k) __shfl_sync(ALPYKA_LANES, v, k)
#define ALPYKA_SHFL_UP(v, k) __shfl_up_sync(ALPYKA_LANES, v, (unsigned int)(k))
#define ALPYKA_SHFL_DOWN(v, k) __shfl_down_sync(ALPYKA_LANES, v, (unsigned int)(k))
#define ALPYKA_SHFL_XOR(v, k) __shfl_xor_sync(ALPYKA_LANES, v, k)
#define ALPYKA_BALLOT_MASK(m, p) ((u64)__ballot_sync((unsigned int)(m), p))
#define ALPYKA_SHFL_MASK(m, v, k) __shfl_sync((unsigned int)(m), v, k)
#endif
"""


def _member_mask(mask: str | None) -> str:
    """The member mask of a CUDA ``*_sync`` call: the kernel's explicit one, else the warp's launched lanes."""
    return "ALPYKA_LANES" if mask is None else f"(unsigned int)({mask})"


class Dialect:
    """How one C dialect spells the device-specific parts (see the module docstring); every
    method is a dialect's trait, each subclass answers for its own dialect."""

    __slots__ = ()
    #: the dialect's name: "opencl", "cuda" or "hip" (``CSource.dialect``, compiler options)
    name: ClassVar[str]
    #: OpenCL C (kernel arguments for dynamic shared memory and the error flag, sub-group warps)
    is_opencl: ClassVar[bool] = False
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

    def dynamic_shared_param(self) -> str | None:
        """The kernel parameter that carries dynamic shared memory (OpenCL) or None (CUDA)."""
        return None

    def dynamic_shared_base(self) -> str:
        return ""

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

    def native_atomic(self, op: str, t: ScalarType, space: str) -> str | None:
        raise NotImplementedError

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
    is_opencl = True
    no_contraction = "#pragma OPENCL FP_CONTRACT OFF"
    loop_hint = "ALPYKA_NO_VECTORIZE "

    def prologue(self, warps: bool = False) -> str:
        return _OPENCL_PROLOGUE

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

    def dynamic_shared_param(self) -> str | None:
        return "__local u8* alpyka_dyn_shared"

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
        return _CUDA_PROLOGUE + _WARP_LANES if warps else _CUDA_PROLOGUE

    def kernel_qualifier(self) -> str:
        return 'extern "C" __global__ void'

    def shared_decl(self, ctype: str, name: str, size: int) -> str:
        return f"__shared__ {ctype} {name}[{max(size, 1)}];"

    def dynamic_shared_base(self) -> str:
        return "extern __shared__ __align__(16) u8 alpyka_dyn_shared[];"

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

    def prologue(self, warps: bool = False) -> str:
        return super().prologue(warps) + (_HIP_WARPS if warps else "")

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
