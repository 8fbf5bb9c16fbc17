// cuda_on_cpu_fibers.h: a block's threads as fibers on one OS thread (stacks, the context switch, the
// shuffled order) and where they switch: the seeded schedule of the emitter's hooks, spinning
// loops, stalled blocks getting more blocks beside them, and the deadlock report.
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

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

}  // namespace alpyka_host
