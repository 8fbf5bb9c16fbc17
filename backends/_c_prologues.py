"""The text every C kernel starts with, per dialect: typedefs, macros, and the warp macros of
CUDA and HIP (backends/_c_dialect.py's classes choose among them)."""

OPENCL_PROLOGUE = """\
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

CUDA_PROLOGUE = """\
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
WARP_LANES = """\
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
HIP_WARPS = """\
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
