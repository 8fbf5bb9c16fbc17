// cuda_on_cpu.h: alpyka's generated CUDA C and HIP, compiled unmodified by the system's C++
// compiler and run on the CPU with a GPU's semantics (the cupy stand-in's kernel executor,
// cuda_on_cpu.py; force-included before the kernel's source with -include).
//
// - A grid's blocks run on one OS thread per core, claimed in order from a shared counter.
// - A block's threads run on that OS thread as fibers (a stack each and a small context switch)
//   where the kernel synchronises or the emitter wrote its hooks (the emulator's texts always
//   have them: ALPYKA_LOOP at each loop iteration, ALPYKA_GL_*/ALPYKA_SH_* at memory accesses);
//   they switch at barriers, warp operations and a seeded sample of the hooks, in a seeded random
//   order, so a kernel that misses a barrier reads what another thread has not written yet and
//   a lost update shows. A thread spinning on memory nothing changes yields each iteration;
//   stalled blocks get more blocks started beside them, and a wait nothing can end is reported
//   as "deadlock" (see "schedules and spins" in cuda_on_cpu_fibers.h). A text without hooks and
//   barriers runs its threads one after another.
// - __shared__ variables are thread_local: a block owns its OS thread while it runs. The
//   dynamic shared array (alpyka's emitter always names it alpyka_dyn_shared) is a thread_local
//   array of ALPYKA_DYN_SHARED_MAX bytes, filled with a poison byte before each block.
// - Atomics are the compiler's __atomic builtins (blocks really run concurrently), with CUDA's
//   overload set and CUDA's wrap rules for atomicInc/atomicDec.
// - Warps are ALPYKA_WARP_SIZE consecutive threads of a block (32; 64 for HIP sources). A warp
//   operation (__shfl*, __ballot*, __all*, __any*, __match_any_sync, __activemask, __syncwarp) is a rendezvous of
//   the lanes its member mask names (every lane for HIP's intrinsics and __activemask): each
//   lane's fiber waits until every named lane that has not exited arrives, then all get their
//   results; exited lanes are left out (CUDA's "all non-exited threads named in mask", alpaka's
//   "active threads"). Named lanes stuck at different operations, or a lane at a block barrier
//   while the others wait for it at a warp operation, fail the launch (a hang or garbage on a GPU).
// - Checks (the launch's `checks` flag, ALPYKA_EMULATE_CHECKS): what a GPU leaves wrong or
//   undefined fails the launch with a report "check:<kind>:<C line>:<C line>:<text>" that
//   cuda_on_cpu.py turns into a KernelCheckError at the kernel's Python line. Barriers and warp
//   operations carry their call site (__LINE__, through the macros at the end); shared memory
//   accesses do where the emitter wrote them through ALPYKA_SH_LD/ST/AT (emit(checks=True)):
//   a shadow entry per element (a hash table per OS thread, by address) holds whether this block
//   wrote it and which threads wrote, read or updated it atomically since the last barrier.
//   "barrier": threads at different barriers, or some finished while others wait at one;
//   "warp": named lanes at different warp operations (or call sites, or masks), a calling lane its
//   mask does not name, a shuffle from an absent, finished or unnamed lane; "race": two
//   threads touch one shared element between two barriers, one writing, not both atomically (the
//   same in device memory, plus two plain stores to one element from two blocks; every thread
//   storing one value is said to be that); "uninitialized": a read (or atomic) of shared memory
//   this block never wrote, or of device memory nothing wrote since its allocation (the global
//   accesses go through ALPYKA_GL_LD/ST/STV/AT; see cuda_on_cpu_global_checks.h); a plain
//   read of another block's store that no grid fence of that block followed is a "race" too
//   (another block sees a block's stores after its __threadfence or at the kernel's end).
// - Only C headers are included and the math functions are declared here: a kernel compiles in
//   about 0.2 s (the C++ standard headers would triple that).
// - The runtime is this header and the cuda_on_cpu_*.h parts it includes (one concept each);
//   cuda_on_cpu.py keys its kernel cache on the text of all of them.
#pragma once
#define ALPYKA_CUDA_ON_CPU 1  // the generated text's HIP warp macros pass their member masks here

#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

#ifndef ALPYKA_WARP_SIZE
#define ALPYKA_WARP_SIZE 32
#endif
#define warpSize ALPYKA_WARP_SIZE

#ifndef ALPYKA_DYN_SHARED_MAX
#define ALPYKA_DYN_SHARED_MAX (256 * 1024)
#endif

struct alpyka_uint3 { unsigned int x, y, z; };
static thread_local alpyka_uint3 threadIdx, blockIdx, blockDim, gridDim;
thread_local __attribute__((aligned(16))) unsigned char alpyka_dyn_shared[ALPYKA_DYN_SHARED_MAX];

// the runtime, by concept (each part relies on the ones before it)
#include "cuda_on_cpu_device.h"
#include "cuda_on_cpu_fibers.h"
#include "cuda_on_cpu_blocks.h"
#include "cuda_on_cpu_shared_checks.h"
#include "cuda_on_cpu_global_checks.h"
#include "cuda_on_cpu_launch.h"

// barriers and warp operations are macros over functions taking their call site (__LINE__)
static inline void alpyka_syncthreads(int line) { alpyka_host::barrier(1, line); }
static inline int alpyka_syncthreads_count(int p, int line) { return alpyka_host::barrier(p, line); }
static inline int alpyka_syncthreads_and(int p, int line) {
    return alpyka_host::barrier(p, line) == alpyka_host::worker->reduced_waiting;
}
static inline int alpyka_syncthreads_or(int p, int line) { return alpyka_host::barrier(p, line) != 0; }
#define __syncthreads() alpyka_syncthreads(__LINE__)
#define __syncthreads_count(p) alpyka_syncthreads_count((p), __LINE__)
#define __syncthreads_and(p) alpyka_syncthreads_and((p), __LINE__)
#define __syncthreads_or(p) alpyka_syncthreads_or((p), __LINE__)

// shared memory accesses the emitter wrote through these (emit(checks=True)): checked, see above
#define ALPYKA_SH_LD(x) (*alpyka_host::sh_read(&(x), __LINE__))
#define ALPYKA_SH_ST(x) (*alpyka_host::sh_write(&(x), __LINE__))
#define ALPYKA_SH_AT(p) (alpyka_host::sh_atomic((p), __LINE__))
#define ALPYKA_SH_STV(x, v) alpyka_host::sh_store(&(x), (v), __LINE__)
#define ALPYKA_GL_LD(x) (*alpyka_host::gl_read(&(x), __LINE__))
#define ALPYKA_GL_ST(x) (*alpyka_host::gl_write(&(x), __LINE__))
#define ALPYKA_GL_AT(p) (alpyka_host::gl_atomic((p), __LINE__))
#define ALPYKA_GL_STV(x, v) alpyka_host::gl_store(&(x), (v), __LINE__)
#define ALPYKA_LOOP() alpyka_host::loop_hook(__LINE__)  // each loop iteration's start: spins and switches

// ---------------------------------------------------------------------- warps (CUDA, then HIP)
template <class T> static inline unsigned long long alpyka_wbits(T v) {
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T> static inline T alpyka_wvalue(unsigned long long b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
#define ALPYKA_ALL_LANES (~0ull)  // HIP's intrinsics and __activemask(): every lane of the warp
#define ALPYKA_WARP(op, v, arg, m) alpyka_host::warp_op(alpyka_host::op, (v), (arg), (m), line)
#define ALPYKA_LL(x) static_cast<long long>(x)
#define ALPYKA_M(m) static_cast<unsigned long long>(m)
static inline unsigned int alpyka_activemask(int line) {
    return static_cast<unsigned int>(ALPYKA_WARP(W_MASK, 1, 0, ALPYKA_ALL_LANES));
}
static inline int alpyka_all(unsigned long long m, int p, int line) { return static_cast<int>(ALPYKA_WARP(W_ALL, p != 0, 0, m)); }
static inline int alpyka_any(unsigned long long m, int p, int line) { return static_cast<int>(ALPYKA_WARP(W_ANY, p != 0, 0, m)); }
static inline unsigned long long alpyka_ballot(unsigned long long m, int p, int line) { return ALPYKA_WARP(W_BALLOT, p != 0, 0, m); }
static inline void alpyka_syncwarp(unsigned long long m, int line) { ALPYKA_WARP(W_SYNC, 0, 0, m); }
template <class T> static inline unsigned long long alpyka_match_any(unsigned long long m, T v, int line) {
    return ALPYKA_WARP(W_MATCH, alpyka_wbits(v), 0, m);
}
template <class T> static inline T alpyka_shfl(int op, unsigned long long m, T v, long long arg, int line) {
    return alpyka_wvalue<T>(alpyka_host::warp_op(op, alpyka_wbits(v), arg, m, line));
}
#define __activemask() alpyka_activemask(__LINE__)
#define __syncwarp(m) alpyka_syncwarp(ALPYKA_M(m), __LINE__)
#define __all_sync(m, p) alpyka_all(ALPYKA_M(m), (p), __LINE__)
#define __any_sync(m, p) alpyka_any(ALPYKA_M(m), (p), __LINE__)
#define __ballot_sync(m, p) static_cast<unsigned int>(alpyka_ballot(ALPYKA_M(m), (p), __LINE__))
#define __match_any_sync(m, v) static_cast<unsigned int>(alpyka_match_any(ALPYKA_M(m), (v), __LINE__))
#define __shfl_sync(m, v, k) alpyka_shfl(alpyka_host::W_SHFL, ALPYKA_M(m), (v), ALPYKA_LL(static_cast<int>(k)), __LINE__)
#define __shfl_up_sync(m, v, d) \
    alpyka_shfl(alpyka_host::W_UP, ALPYKA_M(m), (v), ALPYKA_LL(static_cast<unsigned int>(d)), __LINE__)
#define __shfl_down_sync(m, v, d) \
    alpyka_shfl(alpyka_host::W_DOWN, ALPYKA_M(m), (v), ALPYKA_LL(static_cast<unsigned int>(d)), __LINE__)
#define __shfl_xor_sync(m, v, k) \
    alpyka_shfl(alpyka_host::W_XOR, ALPYKA_M(m), (v), ALPYKA_LL(static_cast<int>(k)), __LINE__)
#define __all(p) alpyka_all(ALPYKA_ALL_LANES, (p), __LINE__)
#define __any(p) alpyka_any(ALPYKA_ALL_LANES, (p), __LINE__)
#define __ballot(p) alpyka_ballot(ALPYKA_ALL_LANES, (p), __LINE__)
#define __shfl(v, k) alpyka_shfl(alpyka_host::W_SHFL, ALPYKA_ALL_LANES, (v), ALPYKA_LL(static_cast<int>(k)), __LINE__)
#define __shfl_up(v, d) \
    alpyka_shfl(alpyka_host::W_UP, ALPYKA_ALL_LANES, (v), ALPYKA_LL(static_cast<unsigned int>(d)), __LINE__)
#define __shfl_down(v, d) \
    alpyka_shfl(alpyka_host::W_DOWN, ALPYKA_ALL_LANES, (v), ALPYKA_LL(static_cast<unsigned int>(d)), __LINE__)
#define __shfl_xor(v, k) \
    alpyka_shfl(alpyka_host::W_XOR, ALPYKA_ALL_LANES, (v), ALPYKA_LL(static_cast<int>(k)), __LINE__)
