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
//   as "deadlock" (see "schedules and spins" below). A text without hooks and barriers runs
//   its threads one after another.
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
//   accesses go through ALPYKA_GL_LD/ST/STV/AT; see the device-memory sections below); a plain
//   read of another block's store that no grid fence of that block followed is a "race" too
//   (another block sees a block's stores after its __threadfence or at the kernel's end).
// - Only C headers are included and the math functions are declared here: a kernel compiles in
//   about 0.2 s (the C++ standard headers would triple that).
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

// ---------------------------------------------------------------------- fibers
namespace alpyka_host {

struct Launch;
enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE, ABORTED };
enum WarpOp { W_MASK, W_ALL, W_ANY, W_BALLOT, W_SYNC, W_MATCH, W_SHFL, W_UP, W_DOWN, W_XOR };

struct Fiber {
    void* sp;  // saved stack pointer (x86-64) while switched out
#if !defined(__x86_64__)
    ucontext_t ctx;
#endif
    alpyka_uint3 tid;
    State state;
    int pred;
    char* stack;
    int wop;                  // at a warp operation: which, its value's bits and its lane/delta/mask
    int site;                 // the C line of the barrier or warp operation it waits at
    unsigned long long wval, wres;
    unsigned long long wmask;  // the lanes its warp operation names (the warp's lanes: bit k, lane k)
    long long warg;
    // spin detection (loop_hook): this loop iteration's reads (a hash of addresses and values),
    // the last iteration's, whether it changed memory, and how many iterations in a row spun
    unsigned long long sig, prev_sig;
    int reads, spin, loop_line, read_line;
    bool wrote;
};

struct Worker {  // one OS thread's view of the block it runs
    Launch* launch;
    Fiber* current;
    void* sched_sp;
#if !defined(__x86_64__)
    ucontext_t sched_ctx;
#endif
    int reduced_count;    // the last barrier's count of threads with a true predicate ...
    int reduced_waiting;  // ... among this many (the threads that had not exited)
    int n;                // threads per block
    Fiber* fibers;        // n of them, or none when the kernel has no barrier
    int* order;           // the order the threads run in, reshuffled each phase
    int tid;              // the running thread's index in the block
    unsigned long long gen;  // blocks run by this worker so far (shadow entries of older ones are stale)
    unsigned epoch;          // barriers this block passed
    struct Shadow* table;    // shared-memory shadow: open addressing by element address
    size_t cap, used;
    long long mem_hint;      // the row of Launch::mem the last global access hit
    long long block;         // the block it runs (linear index)
    unsigned long long rng;  // the block's switching draws (seeded by the launch's seed and the block)
    bool stalled;            // every live thread of its block spins or waits (see stalled_round)
    bool alone;              // one thread of the block was runnable at the round's start: no draws
    long long all_since;     // when it first saw every running block stalled (ns), 0: not so
};
static thread_local Worker* worker = nullptr;

struct Launch {
    void (*body)(void**);
    void** args;
    alpyka_uint3 grid, block;
    long long dyn_shared;
    bool fibers;
    unsigned long long seed;
    unsigned long long next_block;  // claimed with __atomic_fetch_add
    int failed;                     // set once, with __atomic_exchange_n
    int checks;                     // the checks of the header comment are on
    const unsigned long long* mem;  // tracked device memory: n_mem rows (base, end, shadow address) by base
    long long n_mem;
    struct Races* races;            // the launch's race shadow of that memory (nullptr: none)
    unsigned* fences;               // per block, its grid fences so far (nullptr: not modelled)
    unsigned long long n_fences;
    unsigned long long blocks;
    int active, stalled;            // the OS threads running blocks / those whose block is stalled
    pthread_mutex_t pool_lock;      // guards pool and started (spawn)
    pthread_t* pool;
    int started;
    char* error;
    int error_len;

    void fail(const char* msg) {
        if (__atomic_exchange_n(&failed, 1, __ATOMIC_SEQ_CST) == 0) {
            strncpy(error, msg, error_len - 1);
            error[error_len - 1] = 0;
        }
    }
    // a check's report (see the header comment); %1 and %2 in text stand for the lines' Python lines
    void check(const char* kind, int line, int line2, const char* text) {
        char buf[1024];
        snprintf(buf, sizeof buf, "check:%s:%d:%d:%s", kind, line, line2, text);
        fail(buf);
    }
};

#if defined(__x86_64__)
// switch(save, to): push the callee-saved registers, save the stack pointer, load the other
// stack's, pop its registers and return into it
extern "C" void alpyka_ctx_switch(void** save, void* to);
asm(R"(
    .text
    .p2align 4
    .hidden alpyka_ctx_switch
    .globl alpyka_ctx_switch
    .type alpyka_ctx_switch, @function
alpyka_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size alpyka_ctx_switch, .-alpyka_ctx_switch
)");
#endif

static const size_t STACK_BYTES = 256 * 1024;  // reserved per fiber, touched as used

// A worker's fiber stacks: one mapping for all of them (a mapping per stack would use up the
// process's vm.max_map_count on a many-core machine), a guard page below the lowest.
static char* map_stacks(int n, size_t* bytes) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    *bytes = page + static_cast<size_t>(n) * STACK_BYTES;
    void* p = mmap(nullptr, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (mprotect(p, page, PROT_NONE) != 0) {
        munmap(p, *bytes);
        return nullptr;
    }
    return static_cast<char*>(p) + page;
}

static void fiber_main();

static inline void to_scheduler(Fiber* f) {
#if defined(__x86_64__)
    alpyka_ctx_switch(&f->sp, worker->sched_sp);
#else
    swapcontext(&f->ctx, &worker->sched_ctx);
#endif
}

static inline void resume(Worker* w, Fiber* f) {
    w->current = f;
    threadIdx = f->tid;
#if defined(__x86_64__)
    alpyka_ctx_switch(&w->sched_sp, f->sp);
#else
    swapcontext(&w->sched_ctx, &f->ctx);
#endif
}

static void start_fiber(Fiber* f) {
    char* top = f->stack + STACK_BYTES;
#if defined(__x86_64__)
    // the frame alpyka_ctx_switch pops: six registers, then the return address (fiber_main),
    // above it a fake return address so that fiber_main starts with rsp = 8 (mod 16)
    void** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15));
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(&fiber_main);
    for (int i = 0; i < 6; ++i) *--sp = nullptr;
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, &fiber_main, 0);
#endif
}

static void fiber_main() {
    Worker* w = worker;
    w->launch->body(w->launch->args);
    Fiber* f = w->current;
    f->state = DONE;
    to_scheduler(f);
    __builtin_trap();  // a finished fiber is never resumed
}

static inline unsigned long long mix(unsigned long long x) {  // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void shuffle(int* order, int n, unsigned long long key) {  // Fisher-Yates
    for (int i = n; i > 1; --i) {
        key = mix(key);
        int j = static_cast<int>(key % static_cast<unsigned long long>(i));
        int t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

// ---------------------------------------------------------------------- schedules and spins
// The emitter's hooks (emit(checks=True)) let a block's threads switch where a GPU's may: at a
// sampled subset of global and shared memory accesses and loop iterations (drawn from the
// launch's seed and the block, so one seed gives one schedule per block), and at every iteration
// of a loop that spins: one whose reads (addresses and values) are those of its last iteration
// and that changed no memory. A lane waiting for another lane's flag therefore lets that lane
// run (legal since Volta's independent thread scheduling). A block whose live threads all spin
// or wait is stalled: once every running block is, another block is started beside them on a
// new OS thread (blocks that wait for each other are co-resident on a GPU), and when none is
// left to start and nothing changed for DEADLOCK_NS the launch fails with "deadlock".
static const int SPIN_MIN = 64;                           // iterations in a row before a thread counts as spinning
static const long long DEADLOCK_NS = 1000000000ll;        // every block stalled this long: a deadlock
static const int POOL_MAX = 256;                          // OS threads a launch may run blocks on
static const unsigned SWITCH_LOAD = 63, SWITCH_STORE = 15, SWITCH_LOOP = 15;  // 1 in (mask + 1)

static inline bool draw(Worker* w, unsigned mask) {  // xorshift64 (a few instructions per access)
    unsigned long long x = w->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w->rng = x;
    return (x >> 40 & mask) == 0;
}

static inline void yield_fiber(Worker* w) {  // the running thread lets the block's others run
    Fiber* f = w->current;
    f->state = RUNNABLE;
    to_scheduler(f);
}

// A memory access of the running thread (before it happens): maybe switch to another thread.
static inline void access_hook(unsigned mask) {
    Worker* w = worker;
    if (w != nullptr && w->current != nullptr && !w->alone && draw(w, mask)) yield_fiber(w);
}

// A read of [p, p + n) (a load, or the old value of an atomic) goes into the iteration's hash.
static inline void note_read(const void* p, size_t n, int line) {
    Worker* w = worker;
    if (w == nullptr || w->current == nullptr) return;
    Fiber* f = w->current;
    unsigned long long v = 0;
    memcpy(&v, p, n < sizeof v ? n : sizeof v);
    f->sig = (f->sig ^ (reinterpret_cast<uintptr_t>(p) + v * 0x9E3779B97F4A7C15ull)) * 0x100000001B3ull;
    ++f->reads;
    f->read_line = line;
}

static inline void note_write(bool changed) {
    Worker* w = worker;
    if (changed && w != nullptr && w->current != nullptr) w->current->wrote = true;
}

// The start of a loop iteration (the loop's line): spinning or not, and maybe switch.
static void loop_hook(int line) {
    Worker* w = worker;
    if (w == nullptr || w->current == nullptr) return;
    Fiber* f = w->current;
    bool spinning = f->reads > 0 && !f->wrote && f->sig == f->prev_sig && f->loop_line == line;
    f->spin = spinning ? f->spin + 1 : 0;
    f->prev_sig = f->sig;
    f->sig = 0;
    f->reads = 0;
    f->wrote = false;
    f->loop_line = line;
    if (spinning || (!w->alone && draw(w, SWITCH_LOOP))) yield_fiber(w);
}

static void grid_fence() {
    __atomic_thread_fence(ALPYKA_SEQ);
    Worker* w = worker;
    if (w == nullptr) return;
    Launch* L = w->launch;
    if (L->fences != nullptr && static_cast<unsigned long long>(w->block) < L->n_fences)
        __atomic_add_fetch(&L->fences[w->block], 1u, __ATOMIC_SEQ_CST);
}

static long long now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ll + t.tv_nsec;
}

static void* work(void* arg);

// Start one more OS thread on the launch's blocks, if a block is left and the pool has room.
static bool spawn(Launch* L) {
    if (__atomic_load_n(&L->next_block, __ATOMIC_SEQ_CST) >= L->blocks) return false;
    bool ok = false;
    pthread_mutex_lock(&L->pool_lock);
    if (L->started < POOL_MAX - 1) {
        __atomic_add_fetch(&L->active, 1, __ATOMIC_SEQ_CST);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 8u << 20);
        ok = pthread_create(&L->pool[L->started], &attr, work, L) == 0;
        pthread_attr_destroy(&attr);
        if (ok) __atomic_add_fetch(&L->started, 1, __ATOMIC_SEQ_CST);
        else __atomic_sub_fetch(&L->active, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&L->pool_lock);
    return ok;
}

static void unstall(Worker* w) {
    if (!w->stalled) return;
    w->stalled = false;
    w->all_since = 0;
    __atomic_sub_fetch(&w->launch->stalled, 1, __ATOMIC_SEQ_CST);
}

static void report_deadlock(Worker* w, Fiber* fibers, int n) {
    int spinner = -1, other = -1, spinners = 0;
    for (int i = 0; i < n; ++i) {
        if (fibers[i].state == RUNNABLE) {
            ++spinners;
            if (spinner < 0) spinner = i;
            else if (other < 0 && fibers[i].loop_line != fibers[spinner].loop_line) other = i;
        } else if ((fibers[i].state == AT_BARRIER || fibers[i].state == AT_WARP) &&
                   (other < 0 || fibers[other].state == RUNNABLE)) {
            other = i;
        }
    }
    const Fiber& f = fibers[spinner];
    char where[160];
    int line2 = f.read_line;
    if (other >= 0) {
        const Fiber& o = fibers[other];
        line2 = o.state == RUNNABLE ? o.loop_line : o.site;
        snprintf(where, sizeof where, "; thread %d waits %s %%2", other,
                 o.state == AT_BARRIER ? "at the barrier of" : o.state == AT_WARP ? "at the warp operation of"
                                                                                  : "spinning in the loop of");
    } else {
        snprintf(where, sizeof where, ", its last read at %%2");
    }
    char text[500];
    snprintf(text, sizeof text, "no thread of the launch can go on: thread %d of block %lld spins in the loop of %%1 "
             "on values nothing changes any more (%d of the block's live threads spin%s); this hangs on a GPU. A "
             "thread waited for must be able to run and store the value: not wait itself (at a barrier, in a spin), "
             "its block running (blocks that wait for each other must fit on the GPU at once), and a store of "
             "another block followed by acc.mem_fence(\"grid\")", spinner, w->block, spinners, where);
    w->launch->check("deadlock", f.loop_line, line2, text);
}

// A round of the block where every runnable thread spun: start another block or, when every
// running block has been stalled for DEADLOCK_NS with none left to start, report a deadlock.
// False after the report.
static bool stalled_round(Worker* w, Fiber* fibers, int n) {
    Launch* L = w->launch;
    if (!w->stalled) {
        w->stalled = true;
        w->all_since = 0;
        __atomic_add_fetch(&L->stalled, 1, __ATOMIC_SEQ_CST);
    }
    struct timespec nap = {0, 20000};
    if (__atomic_load_n(&L->stalled, __ATOMIC_SEQ_CST) < __atomic_load_n(&L->active, __ATOMIC_SEQ_CST) || spawn(L)) {
        w->all_since = 0;
        nanosleep(&nap, nullptr);
        return true;
    }
    long long now = now_ns();
    if (w->all_since == 0) {
        w->all_since = now;
    } else if (now - w->all_since > DEADLOCK_NS) {
        report_deadlock(w, fibers, n);
        return false;
    }
    nanosleep(&nap, nullptr);
    return true;
}

static alpyka_uint3 unflatten(unsigned long long i, alpyka_uint3 extent) {
    alpyka_uint3 out;
    out.x = static_cast<unsigned int>(i % extent.x);
    i /= extent.x;
    out.y = static_cast<unsigned int>(i % extent.y);
    out.z = static_cast<unsigned int>(i / extent.y);
    return out;
}

// A warp operation is a rendezvous of the lanes its member mask names (CUDA's *_sync rule: "all
// non-exited threads named in mask must execute the same intrinsic with the same mask"): lanes
// named in the mask that finished the kernel are not awaited (alpaka's warp functions act on the
// active threads: a lane that returned is inactive, on CUDA as on HIP), lanes outside the mask are
// not part of it (they may be anywhere). HIP's intrinsics and __activemask() name every lane.
// release_warps releases every group whose named lanes all wait at one operation (one call site
// under the checks, one mask) or finished: true when any was released. Lanes waiting on a lane
// that stands elsewhere stay; stuck_warp reports them once nothing can run.
static unsigned long long warp_lanes(int base, int n) {  // the lanes the launch gave the warp at base
    int k = n - base < ALPYKA_WARP_SIZE ? n - base : ALPYKA_WARP_SIZE;
    return k >= 64 ? ~0ull : (1ull << k) - 1ull;
}

static bool same_warp_op(Launch* L, const Fiber& a, const Fiber& b) {
    return a.wop == b.wop && a.wmask == b.wmask && (!L->checks || a.site == b.site);
}

static bool own_bit_missing(Launch* L, Fiber* fibers, int base, int i) {
    if ((fibers[i].wmask >> (i - base)) & 1ull) return false;
    char text[256];
    snprintf(text, sizeof text, "lane %d calls the warp operation of %%1 with a member mask (0x%llx) that does not "
             "name it: undefined on a GPU; every calling lane must be in the mask (acc.warp_active_mask() gives the "
             "live lanes)", i - base, fibers[i].wmask);
    L->check("warp", fibers[i].site, 0, text);
    return true;
}

// The results of the group of lanes ``group`` (all AT_WARP at one operation), false after a report.
static bool warp_results(Launch* L, Fiber* fibers, int n, int base, unsigned long long group) {
    const int ws = ALPYKA_WARP_SIZE;
    char text[320];
    unsigned long long pred = 0;
    for (int k = 0; k < ws; ++k)
        if (((group >> k) & 1ull) && fibers[base + k].wval) pred |= 1ull << k;
    for (int k = 0; k < ws; ++k) {
        if (!((group >> k) & 1ull)) continue;
        Fiber& f = fibers[base + k];
        long long lane = k, src = -1;
        unsigned long long res = f.wval;
        switch (f.wop) {
            case W_MASK: res = group; break;
            case W_ALL: res = pred == group; break;
            case W_ANY: res = pred != 0; break;
            case W_BALLOT: res = pred; break;
            case W_SYNC: res = 0; break;
            case W_MATCH:  // __match_any_sync: the lanes whose value has this lane's bits
                res = 0;
                for (int j = 0; j < ws; ++j)
                    if (((group >> j) & 1ull) && fibers[base + j].wval == f.wval) res |= 1ull << j;
                break;
            case W_SHFL: src = ((f.warg % ws) + ws) % ws; break;
            case W_UP: src = lane - f.warg; break;
            case W_DOWN: src = lane + f.warg; break;
            case W_XOR: src = lane ^ f.warg; break;
        }
        if (f.wop >= W_SHFL && src >= 0 && src < ws) {
            bool absent = base + src >= n, member = !absent && ((group >> src) & 1ull);
            if (L->checks && !member) {
                if (absent)
                    snprintf(text, sizeof text, "lane %lld reads lane %lld in the shuffle of %%1, a lane the block's "
                             "partial last warp does not have (%d lanes): its value is undefined on a GPU; shuffle "
                             "only from lanes below the warp's lane count", lane, src, n - base);
                else if (fibers[base + src].state == DONE)
                    snprintf(text, sizeof text, "lane %lld reads lane %lld in the shuffle of %%1, a lane that is not "
                             "there (it finished the kernel): its value is undefined on a GPU", lane, src);
                else
                    snprintf(text, sizeof text, "lane %lld reads lane %lld in the shuffle of %%1, a lane that does not "
                             "take part in it (outside its member mask): its value is undefined on a GPU", lane, src);
                L->check("warp", f.site, 0, text);
                return false;
            }
            if (member) res = fibers[base + src].wval;
        }  // else the lane's own value (CUDA's rule out of range)
        f.wres = res;
    }
    return true;
}

static bool release_warps(Launch* L, Fiber* fibers, int n) {
    const int ws = ALPYKA_WARP_SIZE;
    bool released = false;
    for (int base = 0; base < n; base += ws) {
        int end = base + ws < n ? base + ws : n;
        unsigned long long launched = warp_lanes(base, n), handled = 0;
        for (int i = base; i < end; ++i) {
            if (fibers[i].state != AT_WARP || ((handled >> (i - base)) & 1ull)) continue;
            if (L->checks && own_bit_missing(L, fibers, base, i)) return false;
            unsigned long long named = (fibers[i].wmask | (1ull << (i - base))) & launched, group = 0;
            bool ready = true;
            for (int k = 0; k < end - base && ready; ++k) {
                if (!((named >> k) & 1ull)) continue;
                const Fiber& g = fibers[base + k];
                if (g.state == AT_WARP && same_warp_op(L, fibers[i], g))
                    group |= 1ull << k;
                else if (g.state != DONE)
                    ready = false;  // still running, at a barrier, or at another warp operation
            }
            handled |= group;
            if (!ready) continue;
            if (!warp_results(L, fibers, n, base, group)) return false;
            for (int k = 0; k < end - base; ++k)
                if ((group >> k) & 1ull) fibers[base + k].state = RUNNABLE;
            released = true;
        }
    }
    return released;
}

// Nothing can run and ``i`` waits at a warp operation: report what it waits on.
static void stuck_warp(Launch* L, Fiber* fibers, int n, int i) {
    char text[320];
    int base = i / ALPYKA_WARP_SIZE * ALPYKA_WARP_SIZE, end = base + ALPYKA_WARP_SIZE < n ? base + ALPYKA_WARP_SIZE : n;
    unsigned long long named = fibers[i].wmask | (1ull << (i - base));
    for (int j = base; j < end; ++j) {
        if (!((named >> (j - base)) & 1ull) || fibers[j].state == DONE || j == i) continue;
        if (fibers[j].state == AT_WARP && !same_warp_op(L, fibers[i], fibers[j])) {
            snprintf(text, sizeof text, "lanes %d and %d of a warp stand at different warp operations (%%1 and %%2%s): "
                     "divergent warp code, which hangs or gives garbage on a GPU; every lane named in the operation's "
                     "mask must reach the same operation", i - base, j - base,
                     fibers[i].wmask != fibers[j].wmask ? ", with different member masks" : "");
            L->check("warp", fibers[i].site, fibers[j].site, text);
            return;
        }
    }
    L->check("warp", fibers[i].site, 0,
             "a warp operation (%1) that not every live lane of the warp reached (some lanes wait at a "
             "block barrier): divergent warp code, which hangs on a GPU");
}

// The barrier checks, once every thread of the block waits at a barrier or finished: all at one
// call site, none finished. False after a report.
static bool check_barrier(Launch* L, Fiber* fibers, int n) {
    char text[256];
    int first = -1, done = -1;
    for (int i = 0; i < n; ++i) {
        if (fibers[i].state == DONE) {
            done = i;
        } else if (fibers[i].state == AT_BARRIER) {
            if (first < 0) {
                first = i;
            } else if (fibers[i].site != fibers[first].site) {
                snprintf(text, sizeof text, "threads %d and %d of a block wait at different barriers (%%1 and "
                         "%%2): a divergent sync_block_threads, undefined on a GPU (a hang or a wrong result); "
                         "every thread of the block must reach the same barrier", first, i);
                L->check("barrier", fibers[first].site, fibers[i].site, text);
                return false;
            }
        }
    }
    if (first >= 0 && done >= 0) {
        snprintf(text, sizeof text, "thread %d of a block finished the kernel while thread %d waits at the barrier "
                 "of %%1: a barrier some threads of the block skip is undefined on a GPU (a hang or a wrong "
                 "result); every thread of the block must reach it, or none", done, first);
        L->check("barrier", fibers[first].site, 0, text);
        return false;
    }
    return true;
}

static void run_block(Worker* w, unsigned long long b) {
    Launch* L = w->launch;
    blockIdx = unflatten(b, L->grid);
    blockDim = L->block;
    gridDim = L->grid;
    ++w->gen;  // the shadow entries of earlier blocks are stale: this block's shared memory is unwritten
    w->block = static_cast<long long>(b);
    w->epoch = 0;
    if (L->dyn_shared > 0) memset(alpyka_dyn_shared, 0xA5, static_cast<size_t>(L->dyn_shared));
    int n = w->n;
    int* order = w->order;
    for (int i = 0; i < n; ++i) order[i] = i;
    unsigned long long key = mix(L->seed ^ mix(b));
    if (!L->fibers) {  // no barrier in the kernel: each thread runs to its end in turn
        shuffle(order, n, key);
        for (int k = 0; k < n && !__atomic_load_n(&L->failed, __ATOMIC_RELAXED); ++k) {
            w->tid = order[k];
            threadIdx = unflatten(static_cast<unsigned long long>(order[k]), L->block);
            L->body(L->args);
        }
        return;
    }
    Fiber* fibers = w->fibers;
    for (int i = 0; i < n; ++i) {
        memset(&fibers[i].sig, 0, sizeof(Fiber) - offsetof(Fiber, sig));
        fibers[i].tid = unflatten(static_cast<unsigned long long>(i), L->block);
        fibers[i].state = RUNNABLE;
        start_fiber(&fibers[i]);
    }
    w->rng = mix(key ^ 0x5bd1e995ull) | 1ull;  // (xorshift's state is never 0)
    for (unsigned long long round = 0;; ++round) {
        shuffle(order, n, mix(key + round));
        int ready = 0;
        for (int i = 0; i < n && ready < 2; ++i) ready += fibers[i].state == RUNNABLE;
        w->alone = ready < 2;
        for (int k = 0; k < n; ++k) {
            if (fibers[order[k]].state != RUNNABLE) continue;
            w->tid = order[k];
            resume(w, &fibers[order[k]]);
            if (__atomic_load_n(&L->failed, __ATOMIC_RELAXED)) break;
        }
        w->current = nullptr;
        if (__atomic_load_n(&L->failed, __ATOMIC_RELAXED)) break;
        bool released = release_warps(L, fibers, n);
        if (__atomic_load_n(&L->failed, __ATOMIC_RELAXED)) break;
        int runnable = 0, spinning = 0, waiting = 0, count = 0, at_warp = -1;
        for (int i = 0; i < n; ++i) {
            if (fibers[i].state == RUNNABLE) {
                ++runnable;
                spinning += fibers[i].spin >= SPIN_MIN;
            } else if (fibers[i].state == AT_BARRIER) {
                ++waiting;
                count += fibers[i].pred != 0;
            } else if (fibers[i].state == AT_WARP) {
                at_warp = i;
            }
        }
        if (runnable > 0 && spinning == runnable && !released) {  // threads that yielded while spinning
            if (!stalled_round(w, fibers, n)) break;
            continue;
        }
        unstall(w);
        if (runnable > 0 || released) continue;  // threads that yielded, or lanes a warp operation released
        if (at_warp >= 0) {
            stuck_warp(L, fibers, n, at_warp);
            break;
        }
        if (waiting == 0) break;
        if (L->checks && !check_barrier(L, fibers, n)) break;
        w->reduced_count = count;
        w->reduced_waiting = waiting;
        ++w->epoch;
        for (int i = 0; i < n; ++i)
            if (fibers[i].state == AT_BARRIER) fibers[i].state = RUNNABLE;
    }
    unstall(w);
}

// ---------------------------------------------------------------------- shared memory shadow
struct Shadow {
    uintptr_t addr;          // 0: a free slot
    unsigned long long gen;  // the block (Worker::gen) the entry describes
    unsigned epoch;          // the barrier phase of the fields below
    bool init;               // written (or updated atomically) by this block
    int wr, rd, at;          // a thread that wrote / read / updated it atomically in this phase, or -1
    int rd2, at2;            // another thread than rd / at that read / updated it, or -1
    int wr_line, rd_line, at_line;
};

static Shadow* shadow_slot(Shadow* table, size_t cap, uintptr_t addr) {
    size_t i = static_cast<size_t>(mix(addr)) & (cap - 1);
    while (table[i].addr != 0 && table[i].addr != addr) i = (i + 1) & (cap - 1);
    return &table[i];
}

static bool shadow_grow(Worker* w) {  // double the table, keeping this block's entries only
    size_t cap = w->cap ? w->cap * 2 : 4096;
    Shadow* table = static_cast<Shadow*>(calloc(cap, sizeof(Shadow)));
    if (table == nullptr) return false;
    size_t used = 0;
    for (size_t i = 0; i < w->cap; ++i)
        if (w->table[i].addr != 0 && w->table[i].gen == w->gen) {
            *shadow_slot(table, cap, w->table[i].addr) = w->table[i];
            ++used;
        }
    free(w->table);
    w->table = table;
    w->cap = cap;
    w->used = used;
    return true;
}

// The shadow entry of the shared element at ``p`` for the running thread's block and phase, or
// nullptr when the checks are off (or out of memory: unchecked then).
static Shadow* shadow(const void* p) {
    Worker* w = worker;
    if (w == nullptr || !w->launch->checks) return nullptr;
    if ((w->used + 1) * 2 > w->cap && !shadow_grow(w)) return nullptr;
    uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    Shadow* e = shadow_slot(w->table, w->cap, addr);
    if (e->addr == 0) {
        e->addr = addr;
        ++w->used;
        e->gen = w->gen - 1;
    }
    if (e->gen != w->gen) {
        e->gen = w->gen;
        e->init = false;
        e->epoch = w->epoch + 1;
    }
    if (e->epoch != w->epoch) {
        e->epoch = w->epoch;
        e->wr = e->rd = e->at = e->rd2 = e->at2 = -1;
    }
    return e;
}

// Report a check from inside the running thread and stop it (a fiber is never resumed; without
// fibers the thread finishes its access and the block stops after it).
static void check_failed(const char* kind, int line, int line2, const char* text) {
    Worker* w = worker;
    w->launch->check(kind, line, line2, text);
    Fiber* f = w->current;
    if (f != nullptr) {
        f->state = ABORTED;
        to_scheduler(f);
    }
}

static void race(int line, int other_line, int t, const char* what, int other, const char* other_what,
                 const char* where = "a shared memory element") {
    char text[400];
    snprintf(text, sizeof text, "thread %d %s %s at %%1 that thread %d %s at %%2 with no "
             "barrier between (a data race: the result depends on the order the GPU runs them); put "
             "acc.sync_block_threads() between the two, or make both accesses atomic", t, what, where, other,
             other_what);
    check_failed("race", line, other_line, text);
}

template <class T> static T* sh_read(T* p, int line) {
    access_hook(SWITCH_LOAD);
    note_read(p, sizeof(T), line);
    Shadow* e = shadow(p);
    if (e == nullptr) return p;
    int t = worker->tid;
    if (!e->init) {
        check_failed("uninitialized", line, 0,
                     "a read of shared memory at %1 that this block never wrote: shared memory starts undefined "
                     "on a GPU (never zero, never what another block left); write it before reading it");
    } else if (e->wr >= 0 && e->wr != t) {
        race(line, e->wr_line, t, "reads", e->wr, "wrote");
    } else if (e->at >= 0 && (e->at2 >= 0 || e->at != t)) {
        race(line, e->at_line, t, "reads (a plain load)", e->at != t ? e->at : e->at2, "updated atomically");
    } else if (e->rd < 0) {
        e->rd = t;
        e->rd_line = line;
    } else if (e->rd != t) {
        e->rd2 = t;
    }
    return p;
}

// Two threads storing the same bits: the order cannot change the element, but it is still a data
// race (undefined in CUDA's memory model; racecheck grades it a hazard of its own).
static void same_value_race(int line, int other_line, int t, int other, const char* where = "a shared memory element") {
    char text[420];
    snprintf(text, sizeof text, "thread %d writes the same value to %s at %%1 that thread %d "
             "wrote at %%2 with no barrier between: every thread storing one value gives that value whatever the "
             "order, but the stores still race (undefined under CUDA's memory model, racecheck's write-write "
             "hazard); let one thread store it (if acc.thread_idx == 0) before a barrier", t, where, other);
    check_failed("race", line, other_line, text);
}

template <class T> static T* sh_write(T* p, int line, const T* value = nullptr) {
    access_hook(SWITCH_STORE);
    note_write(value == nullptr || memcmp(p, value, sizeof(T)) != 0);
    Shadow* e = shadow(p);
    if (e == nullptr) return p;
    int t = worker->tid;
    if (e->wr >= 0 && e->wr != t && value != nullptr && memcmp(p, value, sizeof(T)) == 0) {
        same_value_race(line, e->wr_line, t, e->wr);
    } else if (e->wr >= 0 && e->wr != t) {
        race(line, e->wr_line, t, "writes", e->wr, "wrote");
    } else if (e->at >= 0 && (e->at2 >= 0 || e->at != t)) {
        race(line, e->at_line, t, "writes (a plain store)", e->at != t ? e->at : e->at2, "updated atomically");
    } else if (e->rd >= 0 && (e->rd2 >= 0 || e->rd != t)) {
        race(line, e->rd_line, t, "writes", e->rd != t ? e->rd : e->rd2, "read");
    } else {
        e->wr = t;
        e->wr_line = line;
        e->init = true;
    }
    return p;
}

template <class T, class V> static void sh_store(T* p, V v, int line) {  // p = v, the checks seeing v
    T value = static_cast<T>(v);
    *sh_write(p, line, &value) = value;
}

template <class T> static T* sh_atomic(T* p, int line) {
    access_hook(SWITCH_STORE);
    note_read(p, sizeof(T), line);
    Shadow* e = shadow(p);
    if (e == nullptr) return p;
    int t = worker->tid;
    if (!e->init) {
        check_failed("uninitialized", line, 0,
                     "an atomic update at %1 of shared memory that this block never wrote: shared memory starts "
                     "undefined on a GPU (never zero); write it before updating it");
    } else if (e->wr >= 0 && e->wr != t) {
        race(line, e->wr_line, t, "updates atomically", e->wr, "wrote with a plain store");
    } else if (e->rd >= 0 && (e->rd2 >= 0 || e->rd != t)) {
        race(line, e->rd_line, t, "updates atomically", e->rd != t ? e->rd : e->rd2, "read with a plain load");
    } else if (e->at < 0) {
        e->at = t;
        e->at_line = line;
    } else if (e->at != t) {
        e->at2 = t;
    }
    return p;
}

// ---------------------------------------------------------------------- global memory shadow
// Device allocations the stand-in tracks (fake_cupy_runtime.py's memory_table): a shadow byte per
// byte, 1 once written (a copy, a memset, a kernel's store); a fresh allocation's bytes are the
// poison 0xA5. A read (or atomic) of a byte never written whose value is still the poison is
// "uninitialized"; a byte that changed behind the emulator's back (a host library writing through
// the pointer) counts as written.
static const unsigned char POISON = 0xA5;

static unsigned char* gl_shadow(const void* p, size_t n) {  // the shadow of [p, p + n), or nullptr
    Worker* w = worker;
    if (w == nullptr || w->launch->n_mem <= 0) return nullptr;
    const Launch* L = w->launch;
    const unsigned long long* m = L->mem;
    unsigned long long a = reinterpret_cast<uintptr_t>(p);
    long long i = w->mem_hint;
    if (!(i >= 0 && i < L->n_mem && m[3 * i] <= a && a < m[3 * i + 1])) {
        long long lo = 0, hi = L->n_mem - 1;
        i = -1;
        while (lo <= hi) {
            long long mid = lo + (hi - lo) / 2;
            if (m[3 * mid] <= a) i = mid, lo = mid + 1;
            else hi = mid - 1;
        }
        if (i < 0 || a >= m[3 * i + 1]) return nullptr;
        w->mem_hint = i;
    }
    if (a + n > m[3 * i + 1]) return nullptr;
    return reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(m[3 * i + 2])) + (a - m[3 * i]);
}

// Whether [p, p + n) holds a byte never written that still holds the poison (bytes changed behind
// the emulator's back are marked written).
static bool gl_unwritten(const void* p, size_t n, unsigned char* s) {
    bool unwritten = false, poisoned = true;
    for (size_t k = 0; k < n; ++k) {
        if (__atomic_load_n(s + k, __ATOMIC_RELAXED)) continue;
        unwritten = true;
        poisoned = poisoned && static_cast<const unsigned char*>(p)[k] == POISON;
    }
    if (unwritten && !poisoned)
        for (size_t k = 0; k < n; ++k) __atomic_store_n(s + k, static_cast<unsigned char>(1), __ATOMIC_RELAXED);
    return unwritten && poisoned;
}

static void gl_uninitialized(int line, const char* what) {
    char text[320];
    snprintf(text, sizeof text, "%s of device memory at %%1 that nothing wrote since it was allocated: a fresh "
             "buffer holds garbage on a GPU (never zero; the emulator fills it with 0xA5 bytes); write it first "
             "(pk.memset, pk.memcpy or a kernel's store)", what);
    check_failed("uninitialized", line, 0, text);
}

// Races in tracked device memory: per element (by address) the last plain writer, the readers and
// the atomic updaters, each with its block and barrier phase, in a table of the launch shared by
// its OS threads (one lock). Within a block the shared-memory rules apply; between blocks two
// plain stores to one element race (a lost update, or an order nothing fixes), and a plain read of
// another block's store races unless a grid fence of the storing block followed the store (the
// memory model the emulator keeps: another block sees a block's stores after its
// acc.mem_fence("grid") or at the kernel's end; a fence and an atomic flag order the last block of
// a threadfence reduction). Stores after another block's atomics are not reported (that last block
// resets the counter).
//
// Where the entries live: each tracked allocation is cut into spans of RACE_SPAN bytes; a span's
// entries are one array in address order, made when the launch first touches the span, whose
// element size is that first access's size (slot = offset in the span / size), with a lock of its
// own. A kernel streaming through a buffer so walks its entries in order, and blocks on different
// spans do not wait for each other (one hash table and one lock for all made every access a
// cache miss and a contended lock: 25x a launch without the table). An address off its span's
// slots (a span read with two element sizes, a misaligned access) has its entry in a hash table of
// the launch (one lock). Either way one address has one entry for the whole launch. At most
// RACE_SPAN_BYTES of span entries and RACE_LIMIT hash entries per launch; addresses past that go
// unchecked.
struct RaceEntry {
    uintptr_t addr;  // 0: free
    long long wb, rb, ab;  // the block of the last plain store / plain load / atomic, -1: none
    unsigned we, re, ae;   // their barrier phases
    int wt, rt, rt2, at, at2;  // their threads (rt2, at2: a second thread of the same block and phase)
    int wl, rl, al;        // their lines
    unsigned wf;           // the storing block's grid fences at the store (Launch::fences)
};
// a lock held for a few loads and stores (an uncontended pthread mutex cost 15% of a checked
// launch); a waiter yields its core, as the holder may be descheduled on a busy machine
static inline void race_lock(int* lock) {
    while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(lock, __ATOMIC_RELAXED)) sched_yield();
}
static inline void race_unlock(int* lock) { __atomic_store_n(lock, 0, __ATOMIC_RELEASE); }

struct RaceSpan {
    int lock;
    unsigned shift;  // log2 of the element size of its slots
    RaceEntry* slots;
};
struct Races {
    int lock;  // the hash table's
    RaceEntry* table;
    size_t cap, used;
    bool full;  // the hash table reached its limit: addresses not seen so far go unchecked
    RaceSpan*** spans;  // per row of Launch::mem, its spans (each made on first touch), or nullptr
    long long n_rows;
    size_t span_bytes;  // entry bytes of the spans made (RACE_SPAN_BYTES at most)
    bool spans_full;    // a span was refused (the budget): no more are made
};
static const size_t RACE_LIMIT = size_t(1) << 22;  // hash entries (64 bytes each)
static const size_t RACE_SPAN = 4096;  // bytes of device memory per span
static const size_t RACE_SPAN_BYTES = size_t(256) << 20;  // span entries per launch, in bytes
static const char* const GLOBAL_ELEMENT = "a device memory element";

static RaceEntry* race_slot(RaceEntry* table, size_t cap, uintptr_t addr) {
    size_t i = static_cast<size_t>(mix(addr)) & (cap - 1);
    while (table[i].addr != 0 && table[i].addr != addr) i = (i + 1) & (cap - 1);
    return &table[i];
}

static void race_fresh(RaceEntry* e, uintptr_t addr) {  // an entry's first access
    e->addr = addr;
    e->wb = e->rb = e->ab = -1;
}

static RaceEntry* race_entry(Races* R, uintptr_t addr) {  // under R->lock; nullptr: unchecked
    if ((R->used + 1) * 2 > R->cap) {
        size_t cap = R->cap ? R->cap * 2 : 1 << 12;
        RaceEntry* table = cap <= RACE_LIMIT ? static_cast<RaceEntry*>(calloc(cap, sizeof(RaceEntry))) : nullptr;
        if (table == nullptr) {
            R->full = true;
        } else {
            for (size_t i = 0; i < R->cap; ++i)
                if (R->table[i].addr != 0) *race_slot(table, cap, R->table[i].addr) = R->table[i];
            free(R->table);
            R->table = table;
            R->cap = cap;
        }
    }
    RaceEntry* e = race_slot(R->table, R->cap, addr);
    if (e->addr == 0) {
        if (R->full && (R->used + 1) * 2 > R->cap) return nullptr;
        race_fresh(e, addr);
        ++R->used;
    }
    return e;
}

// The span of row ``row`` holding ``addr``, made for ``n``-byte elements if it is new; nullptr
// past the entry budget (or without memory).
static RaceSpan* race_span(Races* R, long long row, const unsigned long long* m, uintptr_t addr, size_t n) {
    size_t k = (addr - m[3 * row]) / RACE_SPAN;
    RaceSpan** spans = __atomic_load_n(&R->spans[row], __ATOMIC_ACQUIRE);
    if (spans == nullptr) {
        size_t count = (m[3 * row + 1] - m[3 * row] + RACE_SPAN - 1) / RACE_SPAN;
        RaceSpan** made = static_cast<RaceSpan**>(calloc(count, sizeof(RaceSpan*)));
        if (made == nullptr) return nullptr;
        if (!__atomic_compare_exchange_n(&R->spans[row], &spans, made, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            free(made);  // another OS thread made them first: ``spans`` holds its array
        else
            spans = made;
    }
    RaceSpan* span = __atomic_load_n(&spans[k], __ATOMIC_ACQUIRE);
    if (span != nullptr) return span;
    if (__atomic_load_n(&R->spans_full, __ATOMIC_RELAXED)) return nullptr;
    unsigned shift = 0;  // slots of the largest power of two (16 at most) that divides the size
    while (shift < 4 && n % (size_t(2) << shift) == 0) ++shift;
    size_t bytes = (RACE_SPAN >> shift) * sizeof(RaceEntry);
    if (__atomic_add_fetch(&R->span_bytes, bytes, __ATOMIC_RELAXED) > RACE_SPAN_BYTES) {
        __atomic_store_n(&R->spans_full, true, __ATOMIC_RELAXED);  // from now on the hash table only
        __atomic_sub_fetch(&R->span_bytes, bytes, __ATOMIC_RELAXED);
        return nullptr;
    }
    RaceSpan* made = static_cast<RaceSpan*>(malloc(sizeof(RaceSpan)));
    RaceEntry* slots = static_cast<RaceEntry*>(calloc(RACE_SPAN >> shift, sizeof(RaceEntry)));
    if (made == nullptr || slots == nullptr) {
        free(made);
        free(slots);
        __atomic_sub_fetch(&R->span_bytes, bytes, __ATOMIC_RELAXED);
        return nullptr;
    }
    made->lock = 0;
    made->shift = shift;
    made->slots = slots;
    if (__atomic_compare_exchange_n(&spans[k], &span, made, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return made;
    // another OS thread made it first: ``span`` is that one
    free(slots);
    free(made);
    __atomic_sub_fetch(&R->span_bytes, bytes, __ATOMIC_RELAXED);
    return span;
}

// The entry of ``addr`` (an ``n``-byte access in row ``row`` of the tracked memory ``m``) with
// ``*held`` locked, or nullptr (unchecked, nothing locked).
static RaceEntry* race_find(Races* R, long long row, const unsigned long long* m, uintptr_t addr, size_t n,
                            int** held) {
    RaceSpan* span = R->spans != nullptr ? race_span(R, row, m, addr, n) : nullptr;
    if (span != nullptr) {
        size_t off = (addr - m[3 * row]) % RACE_SPAN;
        if ((off & ((size_t(1) << span->shift) - 1)) == 0) {
            race_lock(&span->lock);
            RaceEntry* e = &span->slots[off >> span->shift];
            if (e->addr == 0) race_fresh(e, addr);
            *held = &span->lock;
            return e;
        }
    }
    race_lock(&R->lock);
    RaceEntry* e = race_entry(R, addr);
    if (e == nullptr) {
        race_unlock(&R->lock);
        return nullptr;
    }
    *held = &R->lock;
    return e;
}

static void races_free(Races* R, const unsigned long long* m) {  // ``m``: the launch's tracked memory
    for (long long i = 0; R->spans != nullptr && i < R->n_rows; ++i) {
        if (R->spans[i] == nullptr) continue;
        size_t count = (m[3 * i + 1] - m[3 * i] + RACE_SPAN - 1) / RACE_SPAN;
        for (size_t k = 0; k < count; ++k) {
            if (R->spans[i][k] == nullptr) continue;
            free(R->spans[i][k]->slots);
            free(R->spans[i][k]);
        }
        free(R->spans[i]);
    }
    free(R->spans);
    free(R->table);
}

enum { G_READ, G_WRITE, G_ATOMIC };

// The access of the running thread to ``p`` (``value``: a store's new bits); false after a report.
static bool gl_race(const void* p, size_t n, int kind, int line, const void* value) {
    Worker* w = worker;
    Races* R = w->launch->races;
    if (R == nullptr) return true;
    long long b = w->block;
    int t = w->tid;
    unsigned ep = w->epoch;
    int* held = nullptr;
    RaceEntry* e = race_find(R, w->mem_hint, w->launch->mem, reinterpret_cast<uintptr_t>(p), n, &held);
    if (e == nullptr) return true;
    bool w_here = e->wb == b && e->we == ep, r_here = e->rb == b && e->re == ep, a_here = e->ab == b && e->ae == ep;
    bool w_other = w_here && e->wt != t, r_other = r_here && (e->rt != t || e->rt2 >= 0);
    bool a_other = a_here && (e->at != t || e->at2 >= 0);
    int other_r = e->rt != t ? e->rt : e->rt2, other_a = e->at != t ? e->at : e->at2;
    RaceEntry seen = *e;
    // a plain store of another block that no grid fence of that block followed yet
    const Launch* L = w->launch;
    bool unfenced = e->wb >= 0 && e->wb != b && L->fences != nullptr && static_cast<unsigned long long>(e->wb) < L->n_fences
                    && __atomic_load_n(&L->fences[e->wb], __ATOMIC_SEQ_CST) == e->wf;
    int verdict = 0;  // 1 race in the block, 2 a plain store of another block, 3 the same value, 4 unfenced
    if (kind == G_READ) {
        verdict = w_other || a_other ? 1 : unfenced ? 4 : 0;
        if (!r_here) e->rb = b, e->re = ep, e->rt = t, e->rt2 = -1, e->rl = line;
        else if (e->rt != t) e->rt2 = t;
    } else if (kind == G_WRITE) {
        bool w_block = e->wb >= 0 && e->wb != b;
        verdict = w_other || w_block ? 2 : (r_other || a_other);
        if ((w_other || w_block) && value != nullptr && memcmp(p, value, n) == 0) verdict = 3;
        e->wb = b, e->we = ep, e->wt = t, e->wl = line;
        e->wf = L->fences != nullptr && static_cast<unsigned long long>(b) < L->n_fences
                    ? __atomic_load_n(&L->fences[b], __ATOMIC_SEQ_CST) : 0;
    } else {
        verdict = w_other || r_other;
        if (!a_here) e->ab = b, e->ae = ep, e->at = t, e->at2 = -1, e->al = line;
        else if (e->at != t) e->at2 = t;
    }
    race_unlock(held);
    if (verdict == 0) return true;
    const char* what = kind == G_READ ? "reads" : kind == G_WRITE ? "writes" : "updates atomically";
    if (verdict == 3) {
        same_value_race(line, seen.wl, t, seen.wt, GLOBAL_ELEMENT);
    } else if (verdict == 4) {
        char text[620];
        snprintf(text, sizeof text, "thread %d of block %lld reads a device memory element at %%1 that thread %d of "
                 "block %lld wrote at %%2 with no grid fence after it: blocks run in no set order, and another block "
                 "sees a block's plain stores only after its acc.mem_fence(\"grid\") or at the kernel's end, so the "
                 "read may see the old value on a GPU (a data race; a lost update where blocks add to it); update a "
                 "shared total with an atomic (acc.atomic_add), hand a result over with acc.mem_fence(\"grid\") "
                 "between its store and the atomic that tells the other block", t, b, seen.wt, seen.wb);
        check_failed("race", line, seen.wl, text);
    } else if (verdict == 2 && seen.wb != b) {
        char text[420];
        snprintf(text, sizeof text, "thread %d of block %lld writes a device memory element at %%1 that thread %d of "
                 "block %lld wrote at %%2 in the same launch: blocks run in no set order (a data race: a lost "
                 "update or the last writer wins by chance); let one block own each element, or use an atomic "
                 "(acc.atomic_add, acc.atomic_exch)", t, b, seen.wt, seen.wb);
        check_failed("race", line, seen.wl, text);
    } else if (w_other || (verdict == 2 && seen.wb == b)) {
        race(line, seen.wl, t, what, seen.wt, "wrote", GLOBAL_ELEMENT);
    } else if (kind != G_ATOMIC && a_other) {
        race(line, seen.al, t, what, other_a, "updated atomically", GLOBAL_ELEMENT);
    } else {
        race(line, seen.rl, t, what, other_r, "read", GLOBAL_ELEMENT);
    }
    return false;
}

template <class T> static T* gl_read(T* p, int line) {
    access_hook(SWITCH_LOAD);
    note_read(p, sizeof(T), line);
    unsigned char* s = gl_shadow(p, sizeof(T));
    if (s == nullptr) return p;
    if (gl_unwritten(p, sizeof(T), s)) gl_uninitialized(line, "a read");
    else gl_race(p, sizeof(T), G_READ, line, nullptr);
    return p;
}

template <class T> static T* gl_write(T* p, int line, const T* value = nullptr) {
    access_hook(SWITCH_STORE);
    note_write(value == nullptr || memcmp(p, value, sizeof(T)) != 0);
    unsigned char* s = gl_shadow(p, sizeof(T));
    if (s == nullptr) return p;
    if (!gl_race(p, sizeof(T), G_WRITE, line, value)) return p;
    for (size_t k = 0; k < sizeof(T); ++k) __atomic_store_n(s + k, static_cast<unsigned char>(1), __ATOMIC_RELAXED);
    return p;
}

template <class T, class V> static void gl_store(T* p, V v, int line) {  // p = v, the checks seeing v
    T value = static_cast<T>(v);
    *gl_write(p, line, &value) = value;
}

template <class T> static T* gl_atomic(T* p, int line) {
    access_hook(SWITCH_STORE);
    note_read(p, sizeof(T), line);
    unsigned char* s = gl_shadow(p, sizeof(T));
    if (s == nullptr) return p;
    if (gl_unwritten(p, sizeof(T), s)) gl_uninitialized(line, "an atomic update");
    else gl_race(p, sizeof(T), G_ATOMIC, line, nullptr);
    return p;
}

static void* work(void* arg) {
    Launch* L = static_cast<Launch*>(arg);
    Worker w;
    memset(&w, 0, sizeof w);
    w.launch = L;
    w.n = static_cast<int>(1ull * L->block.x * L->block.y * L->block.z);
    w.order = static_cast<int*>(calloc(static_cast<size_t>(w.n), sizeof(int)));
    char* stacks = nullptr;
    size_t stack_bytes = 0;
    if (L->fibers) {
        w.fibers = static_cast<Fiber*>(calloc(static_cast<size_t>(w.n), sizeof(Fiber)));
        stacks = map_stacks(w.n, &stack_bytes);
    }
    bool ok = w.order != nullptr && (!L->fibers || (w.fibers != nullptr && stacks != nullptr));
    for (int i = 0; ok && L->fibers && i < w.n; ++i) w.fibers[i].stack = stacks + static_cast<size_t>(i) * STACK_BYTES;
    if (!ok) L->fail("cuda_on_cpu: no memory for the block's threads (fiber stacks)");
    worker = &w;
    unsigned long long blocks = 1ull * L->grid.x * L->grid.y * L->grid.z;
    while (ok && !__atomic_load_n(&L->failed, __ATOMIC_RELAXED)) {
        unsigned long long b = __atomic_fetch_add(&L->next_block, 1ull, __ATOMIC_RELAXED);
        if (b >= blocks) break;
        run_block(&w, b);
    }
    worker = nullptr;
    __atomic_sub_fetch(&L->active, 1, __ATOMIC_SEQ_CST);
    if (stacks != nullptr) munmap(stacks - sysconf(_SC_PAGESIZE), stack_bytes);
    free(w.fibers);
    free(w.order);
    free(w.table);
    return nullptr;
}

static unsigned long long warp_op(int op, unsigned long long value, long long arg, unsigned long long mask, int line) {
    Worker* w = worker;
    if (w->current == nullptr) {
        w->launch->fail("cuda_on_cpu: a warp operation in a kernel launched without fibers");
        return value;
    }
    Fiber* f = w->current;
    f->wop = op;
    f->wval = value;
    f->warg = arg;
    f->wmask = ALPYKA_WARP_SIZE >= 64 ? mask : mask & ((1ull << ALPYKA_WARP_SIZE) - 1ull);
    f->site = line;
    f->state = AT_WARP;
    to_scheduler(f);
    return f->wres;
}

static int barrier(int pred, int line) {
    Worker* w = worker;
    if (w->current == nullptr) {
        // the launcher found no barrier in the source: refuse rather than run unsynchronised
        w->launch->fail("cuda_on_cpu: a barrier in a kernel launched without fibers");
        return 0;
    }
    Fiber* f = w->current;
    f->pred = pred;
    f->site = line;
    f->state = AT_BARRIER;
    to_scheduler(f);
    return w->reduced_count;
}

static int run(void (*body)(void**), void** args, const long long* dims, long long dyn_shared, int fibers,
               unsigned long long seed, int threads, int checks, char* error, int error_len) {
    Launch L;
    memset(&L, 0, sizeof L);
    L.body = body;
    L.args = args;
    L.grid = {static_cast<unsigned>(dims[0]), static_cast<unsigned>(dims[1]), static_cast<unsigned>(dims[2])};
    L.block = {static_cast<unsigned>(dims[3]), static_cast<unsigned>(dims[4]), static_cast<unsigned>(dims[5])};
    L.dyn_shared = dyn_shared;
    L.fibers = fibers != 0;
    L.checks = checks;
    if (checks) {  // dims[6], dims[7]: the table of tracked device memory (cuda_on_cpu.py's run)
        L.mem = reinterpret_cast<const unsigned long long*>(static_cast<uintptr_t>(dims[6]));
        L.n_mem = dims[7];
    }
    L.seed = seed;
    L.error = error;
    L.error_len = error_len;
    if (dyn_shared > ALPYKA_DYN_SHARED_MAX) {
        L.fail("cuda_on_cpu: more dynamic shared memory than ALPYKA_DYN_SHARED_MAX");
        return 1;
    }
    Races races;
    memset(&races, 0, sizeof races);
    if (L.n_mem > 0) {
        races.spans = static_cast<RaceSpan***>(calloc(static_cast<size_t>(L.n_mem), sizeof(RaceSpan**)));
        races.n_rows = races.spans != nullptr ? L.n_mem : 0;
        L.races = &races;
    }
    L.blocks = 1ull * L.grid.x * L.grid.y * L.grid.z;
    if (L.races != nullptr && L.blocks <= (1ull << 24)) {  // which blocks published their stores (grid fences)
        L.fences = static_cast<unsigned*>(calloc(L.blocks, sizeof(unsigned)));
        L.n_fences = L.fences != nullptr ? L.blocks : 0;
    }
    unsigned long long n = L.blocks < static_cast<unsigned long long>(threads > 0 ? threads : 1)
                               ? L.blocks : static_cast<unsigned long long>(threads > 0 ? threads : 1);
    pthread_t pool[POOL_MAX];
    L.pool = pool;
    pthread_mutex_init(&L.pool_lock, nullptr);
    L.active = 1;  // this thread; spawn counts the others
    for (unsigned long long i = 1; i < n && i < POOL_MAX; ++i) spawn(&L);
    work(&L);
    for (int i = 0; i < __atomic_load_n(&L.started, __ATOMIC_SEQ_CST); ++i) pthread_join(pool[i], nullptr);
    pthread_mutex_destroy(&L.pool_lock);
    if (L.races != nullptr) {
        races_free(&races, L.mem);
    }
    free(L.fences);
    return L.failed ? 1 : 0;
}

}  // namespace alpyka_host

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
