// cuda_on_cpu_global_checks.h: the checks of device memory accesses (ALPYKA_GL_*): reads of bytes nothing
// wrote since their allocation, and races within and between blocks (grid fences included).
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

namespace alpyka_host {

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

}  // namespace alpyka_host
