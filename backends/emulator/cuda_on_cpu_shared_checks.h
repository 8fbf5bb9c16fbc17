// cuda_on_cpu_shared_checks.h: the checks of shared memory accesses (ALPYKA_SH_*): a shadow entry per element
// for the block's races and reads of unwritten elements.
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

namespace alpyka_host {

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

}  // namespace alpyka_host
