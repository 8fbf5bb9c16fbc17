"""The caching allocator: reuse in loops, queue-ordered reuse, no memory growth."""

import gc
import threading

import numpy as np

import portable as pk
import soa
from portable.spi import CachingAllocator


class L(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)


def test_collections_in_a_loop_do_not_grow_memory(queue, device):
    alloc = device.backend.allocator(device)
    for _ in range(3):  # warm the cache
        pk.PortableCollection(L, 10_000, queue)
    queue.wait()
    gc.collect()
    before = (alloc.stats.live_bytes + alloc.stats.cached_bytes, alloc.stats.hits)
    for _ in range(200):  # one event per iteration, as a framework module would
        c = pk.PortableCollection(L, 10_000, queue)
        c.zero(queue)
        del c
        queue.wait()
    gc.collect()
    after = (alloc.stats.live_bytes + alloc.stats.cached_bytes, alloc.stats.hits)
    assert after[0] <= before[0] + 2 * L.byte_size(10_000) * 2  # bounded, not 200 x
    assert after[1] - before[1] >= 190  # nearly every allocation came from the cache


def _fake(sizes=None):
    freed = []
    counter = iter(range(1, 10**9))

    def raw_alloc(n, align):
        return ("mem", next(counter), n), 4096 * next(counter)

    class Ev:
        def __init__(self):
            self.done = False

        def is_complete(self):
            return self.done

    events = []

    def make_event(q):
        e = Ev()
        events.append(e)
        return e

    return CachingAllocator(raw_alloc, freed.append, make_event), freed, events


def test_bins_are_geometric():
    a, _, _ = _fake()
    assert a.bin_for(1) == (8, 256)
    assert a.bin_for(257) == (9, 512)
    assert a.bin_for(2**30) == (30, 2**30)
    assert a.bin_for(2**30 + 1) == (None, 2**30 + 1)


def test_reuse_is_gated_by_queue_and_event():
    a, _, events = _fake()
    q1, q2 = object(), object()
    b = a.allocate(1000, queue=q1)
    a.free(b)
    # another queue must wait for the event recorded at free time
    other = a.allocate(1000, queue=q2)
    assert other.handle != b.handle and a.stats.misses == 2
    # the same queue gets it back at once (queue order makes it safe)
    same = a.allocate(1000, queue=q1)
    assert same.handle == b.handle and a.stats.hits == 1
    a.free(same)
    events[-1].done = True  # the work finished: any queue may reuse it
    third = a.allocate(900, queue=q2)
    assert third.handle == b.handle


def test_the_block_freed_last_is_handed_out_first():
    """Most recently freed first (a stack per bin: warm memory is reused first):
    with older blocks of the bin cached, an event's freed block comes back to the next event."""
    a, _, events = _fake()
    q = object()
    old = [a.allocate(1000, queue=q) for _ in range(3)]
    for b in old:
        a.free(b)
    for e in events:
        e.done = True
    handles = []
    for _ in range(4):
        b = a.allocate(1000, queue=q)
        handles.append(b.handle)
        a.free(b)
    assert len(set(handles)) == 1 and handles[0] == old[-1].handle, handles


def test_a_cached_block_is_reused_only_at_an_alignment_it_has():
    asked = []

    def raw_alloc(n, align):  # aligned as asked, and no more (an odd multiple)
        asked.append(align)
        return ("mem", len(asked)), align * (2 * len(asked) - 1)

    a = CachingAllocator(raw_alloc, lambda h: None)
    small = a.allocate(1000, alignment=64)
    assert small.address % 128
    a.free(small)
    big = a.allocate(1000, alignment=4096)  # the cached block (address 64) does not do
    assert big.handle != small.handle and big.address % 4096 == 0 and asked == [64, 4096]
    a.free(big)
    again = a.allocate(1000, alignment=64)  # either cached block does: one of them, no new one
    assert again.handle in (small.handle, big.handle) and a.stats.hits == 1 and len(asked) == 2


def test_oom_releases_cache_and_retries_once():
    calls = {"n": 0}
    freed = []

    def raw_alloc(n, align):
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("device full")
        return ("m", calls["n"]), 128 * calls["n"]

    a = CachingAllocator(raw_alloc, freed.append)
    a.free(a.allocate(100))
    a.free(a.allocate(5000))
    assert a.stats.cached_blocks == 2
    a.allocate(10_000)
    assert a.stats.retries == 1 and len(freed) == 2 and a.stats.cached_blocks == 0


def test_cache_limit():
    freed = []
    a = CachingAllocator(lambda n, al: (object(), 128), freed.append, max_cached_bytes=1024)
    blocks = [a.allocate(512) for _ in range(3)]
    for b in blocks:
        a.free(b)
    assert a.stats.cached_bytes == 1024 and len(freed) == 1


def test_memory_in_use_by_numpy_views_is_not_reused():
    coll = pk.PortableCollection(L, 1000, pk.host())
    keep = coll.x
    keep[:] = 1.0
    del coll
    gc.collect()
    for _ in range(5):
        other = pk.PortableCollection(L, 1000, pk.host())
        other.x[:] = 5.0
    assert (keep == 1.0).all()


def test_allocator_is_thread_safe():
    a, _, _ = _fake()

    def worker():
        for _ in range(500):
            a.free(a.allocate(300))

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert a.stats.live_blocks == 0 and a.stats.live_bytes == 0


def test_cached_blocks_do_not_keep_their_queue_alive(device):
    """A block in the cache remembers its last queue only weakly: dropping the queue frees it
    (and its worker thread) even while the block waits in the cache."""
    import weakref

    q = pk.Queue(device)
    buf = pk.Buffer(device, (3000,), np.uint8, queue=q)
    pk.memset(q, buf, 7)
    q.wait()
    ref = weakref.ref(q)
    del buf, q
    gc.collect()
    device.backend.allocator(device).stats  # a safe point: the allocator takes the block back
    assert ref() is None
    # a dead queue's block is reused once its free-time event completed, never before
    a, _, events = _fake()

    class Q:
        pass

    q1, q3 = Q(), Q()
    b = a.allocate(1000, queue=q1)
    a.free(b)
    del q1
    gc.collect()
    assert a.allocate(1000, queue=q3).handle != b.handle  # event pending: a fresh block
    events[0].done = True
    assert a.allocate(1000, queue=q3).handle == b.handle


def test_a_block_freed_on_a_dropped_queue_waits_for_that_queues_work():
    """A cached block whose queue is gone matches no queue, not even 'no queue' (an allocation
    without one): only its free-time event, once complete, lets it out again."""
    a, _, events = _fake()

    class Q:
        pass

    q = Q()
    b = a.allocate(1000, queue=q)
    a.free(b)
    del q
    gc.collect()
    assert a.allocate(1000).handle != b.handle  # no queue: the dead queue's work may still run
    assert a.allocate(1000, queue=Q()).handle != b.handle
    assert a.stats.hits == 0 and a.stats.cached_blocks == 1
    events[0].done = True
    assert a.allocate(1000).handle == b.handle and a.stats.hits == 1
