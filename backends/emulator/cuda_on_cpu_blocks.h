// cuda_on_cpu_blocks.h: one block's run: the rounds that resume its fibers, the rendezvous of a warp's
// lanes at warp operations, and the checks of its barriers.
// Part of cuda_on_cpu.h, which includes it in order (it relies on the parts before it).
#pragma once

namespace alpyka_host {

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

}  // namespace alpyka_host
