// cuda_on_cpu_device.h: device functions the generated text calls besides barriers and warps: bit casts, CUDA's
// and HIP's bit intrinsics, the C library's math, CUDA's atomics and memory fences.
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

// ---------------------------------------------------------------------- bit casts
template <class To, class From> static inline To alpyka_bits(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
    To out;
    memcpy(&out, &v, sizeof out);
    return out;
}
static inline float __int_as_float(int v) { return alpyka_bits<float>(v); }
static inline float __uint_as_float(unsigned int v) { return alpyka_bits<float>(v); }
static inline int __float_as_int(float v) { return alpyka_bits<int>(v); }
static inline unsigned int __float_as_uint(float v) { return alpyka_bits<unsigned int>(v); }
static inline double __longlong_as_double(long long v) { return alpyka_bits<double>(v); }
static inline long long __double_as_longlong(double v) { return alpyka_bits<long long>(v); }

// ---------------------------------------------------------------------- bit intrinsics (CUDA's, HIP's)
// the compiler's builtins, with CUDA's results for 0 (__clz: the width; __ffs: 0)
static inline int __popc(unsigned int v) { return __builtin_popcount(v); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned int)v); }
static inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
static inline unsigned long long __brevll(unsigned long long v) {
    unsigned long long r = 0;
    for (int i = 0; i < 64; ++i, v >>= 1) r = (r << 1) | (v & 1ull);
    return r;
}
static inline unsigned int __brev(unsigned int v) { return (unsigned int)(__brevll(v) >> 32); }

// ---------------------------------------------------------------------- math (the C library's)
extern "C" {
#define ALPYKA_MATH1(g) double g(double) noexcept; float g##f(float) noexcept;
#define ALPYKA_MATH2(g) double g(double, double) noexcept; float g##f(float, float) noexcept;
ALPYKA_MATH1(sqrt) ALPYKA_MATH1(exp) ALPYKA_MATH1(exp2) ALPYKA_MATH1(expm1) ALPYKA_MATH1(log)
ALPYKA_MATH1(log2) ALPYKA_MATH1(log10) ALPYKA_MATH1(log1p) ALPYKA_MATH1(sin) ALPYKA_MATH1(cos)
ALPYKA_MATH1(tan) ALPYKA_MATH1(asin) ALPYKA_MATH1(acos) ALPYKA_MATH1(atan) ALPYKA_MATH1(sinh)
ALPYKA_MATH1(cosh) ALPYKA_MATH1(tanh) ALPYKA_MATH1(asinh) ALPYKA_MATH1(acosh) ALPYKA_MATH1(atanh)
ALPYKA_MATH1(fabs) ALPYKA_MATH1(floor) ALPYKA_MATH1(ceil) ALPYKA_MATH1(trunc) ALPYKA_MATH1(erf)
ALPYKA_MATH1(erfc) ALPYKA_MATH1(lgamma) ALPYKA_MATH1(tgamma) ALPYKA_MATH1(round) ALPYKA_MATH1(rint)
ALPYKA_MATH2(atan2) ALPYKA_MATH2(pow) ALPYKA_MATH2(hypot) ALPYKA_MATH2(copysign) ALPYKA_MATH2(fmod)
ALPYKA_MATH2(fmin) ALPYKA_MATH2(fmax)
#undef ALPYKA_MATH1
#undef ALPYKA_MATH2
}
static inline bool isnan(float x) { return __builtin_isnan(x); }
static inline bool isnan(double x) { return __builtin_isnan(x); }
static inline bool isinf(float x) { return __builtin_isinf(x); }
static inline bool isinf(double x) { return __builtin_isinf(x); }
static inline bool isfinite(float x) { return __builtin_isfinite(x); }
static inline bool isfinite(double x) { return __builtin_isfinite(x); }

// ---------------------------------------------------------------------- atomics (CUDA's set)
#define ALPYKA_SEQ __ATOMIC_SEQ_CST
template <class T, class F> static inline T alpyka_cas_loop(T* p, F next) {
    T old = __atomic_load_n(p, ALPYKA_SEQ);
    while (!__atomic_compare_exchange_n(p, &old, next(old), false, ALPYKA_SEQ, ALPYKA_SEQ)) {
    }
    return old;
}
template <int N> struct alpyka_word;
template <> struct alpyka_word<4> { typedef unsigned int type; };
template <> struct alpyka_word<8> { typedef unsigned long long type; };
template <class T, class F> static inline T alpyka_cas_bits(T* p, F next) {  // float, double
    typedef typename alpyka_word<sizeof(T)>::type W;
    W* w = reinterpret_cast<W*>(p);
    W old = __atomic_load_n(w, ALPYKA_SEQ);
    while (!__atomic_compare_exchange_n(w, &old, alpyka_bits<W>(next(alpyka_bits<T>(old))), false,
                                        ALPYKA_SEQ, ALPYKA_SEQ)) {
    }
    return alpyka_bits<T>(old);
}
#define ALPYKA_INT_ATOMICS(T)                                                                         \
    static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, ALPYKA_SEQ); }             \
    static inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, ALPYKA_SEQ); }           \
    static inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, ALPYKA_SEQ); }             \
    static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, ALPYKA_SEQ); }               \
    static inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, ALPYKA_SEQ); }             \
    static inline T atomicMin(T* p, T v) { return alpyka_cas_loop(p, [v](T c) { return v < c ? v : c; }); } \
    static inline T atomicMax(T* p, T v) { return alpyka_cas_loop(p, [v](T c) { return v > c ? v : c; }); } \
    static inline T atomicCAS(T* p, T compare, T value) {                                            \
        __atomic_compare_exchange_n(p, &compare, value, false, ALPYKA_SEQ, ALPYKA_SEQ);               \
        return compare;                                                                               \
    }
ALPYKA_INT_ATOMICS(int)
ALPYKA_INT_ATOMICS(unsigned int)
ALPYKA_INT_ATOMICS(unsigned long long)
static inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, ALPYKA_SEQ); }
static inline unsigned int atomicSub(unsigned int* p, unsigned int v) { return __atomic_fetch_sub(p, v, ALPYKA_SEQ); }
static inline long long atomicMin(long long* p, long long v) {
    return alpyka_cas_loop(p, [v](long long c) { return v < c ? v : c; });
}
static inline long long atomicMax(long long* p, long long v) {
    return alpyka_cas_loop(p, [v](long long c) { return v > c ? v : c; });
}
static inline unsigned int atomicInc(unsigned int* p, unsigned int v) {
    return alpyka_cas_loop(p, [v](unsigned int c) { return c >= v ? 0u : c + 1u; });
}
static inline unsigned int atomicDec(unsigned int* p, unsigned int v) {
    return alpyka_cas_loop(p, [v](unsigned int c) { return (c == 0u || c > v) ? v : c - 1u; });
}
static inline float atomicAdd(float* p, float v) { return alpyka_cas_bits(p, [v](float c) { return c + v; }); }
static inline double atomicAdd(double* p, double v) { return alpyka_cas_bits(p, [v](double c) { return c + v; }); }
static inline float atomicExch(float* p, float v) { return alpyka_cas_bits(p, [v](float) { return v; }); }

namespace alpyka_host { static void grid_fence(); }  // publishes the block's stores to other blocks
static inline void __threadfence_block() { __atomic_thread_fence(ALPYKA_SEQ); }
static inline void __threadfence() { alpyka_host::grid_fence(); }
static inline void __threadfence_system() { alpyka_host::grid_fence(); }
