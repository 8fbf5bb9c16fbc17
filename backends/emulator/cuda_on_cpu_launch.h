// cuda_on_cpu_launch.h: a kernel launch: the OS threads that claim blocks, the barrier and warp operation
// entry points of the running fiber, and run() (cuda_on_cpu.py's alpyka_cpu_launch calls it).
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

namespace alpyka_host {

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
