"""The garbage collector may run inside any of alpyka's locks: what it runs must take none.

A buffer collected while the allocator's lock was held used to re-enter that lock from its
finalizer (a deadlock seen in CI). Finalizers now only hand the block over
(portable/_deferred.py); the allocator takes it back at its next safe point.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import portable as pk
from portable import _deferred
from portable._allocator import CachingAllocator
from portable._queue import Queue

DEADLOCK_S = 20.0


def _native_stacks() -> str:
    """Every thread's stack with its C frames (py-spy, where installed and allowed to attach to
    this process; else a line saying why not): a thread stuck inside ``gc.collect()`` shows no
    Python frame below it."""
    import os
    import shutil
    import subprocess

    spy = shutil.which("py-spy")
    if spy is None:
        return "(py-spy is not installed: no native frames)"
    try:
        done = subprocess.run(
            [spy, "dump", "--native", "--pid", str(os.getpid())], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(py-spy failed: {exc})"
    return done.stdout + done.stderr


def _run_bounded(fn, seconds: float = DEADLOCK_S):
    """Run ``fn()`` on a daemon thread; fail (instead of hanging) if it does not finish."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=body, daemon=True, name="gc-safety")
    t.start()
    t.join(seconds)
    if t.is_alive():
        import sys
        import traceback

        stack = "".join(traceback.format_stack(sys._current_frames()[t.ident]))
        raise AssertionError(
            f"deadlock: {fn} did not finish in {seconds} s; where it waits:\n{stack}\n"
            f"every thread, native frames included:\n{_native_stacks()}"
        )
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _buffer_in_cycle(device, queue, nbytes: int = 100):
    """A buffer reachable only through a reference cycle (only the cyclic collector frees it)."""
    holder: dict = {"buffer": pk.Buffer(device, (nbytes,), np.uint8, queue=queue)}
    holder["self"] = holder
    return weakref.ref(holder["buffer"])


class _CollectOnQuery:
    """An event stand-in whose first ``is_complete()`` runs a collection, as an allocation inside
    it could (deterministically, instead of by chance). Only the first: the scan asks every block
    cached in the bin, and after a few hundred tests in one process that is many blocks, each full
    collection of a large heap taking a good fraction of a second (20 s of them looked like a hang)."""

    def __init__(self) -> None:
        self.queried = 0

    def is_complete(self) -> bool:
        self.queried += 1
        if self.queried == 1:
            gc.collect()
        return False


def test_collection_inside_the_allocators_lock(device):
    """The stack of the CI hang: allocate() holds its lock, asks a cached block's event, the
    collector frees a buffer of another queue whose finalizer used to call free()."""
    alloc = device.backend.allocator(device)
    if not isinstance(alloc, CachingAllocator):
        pytest.skip(f"{device.backend_name} memory comes from the device API's own pool")
    q1, q2 = pk.Queue(device), pk.Queue(device)
    nbytes = 1 << 16
    gc.collect()
    gc.disable()
    try:
        block = alloc.allocate(nbytes, queue=q1)
        alloc.free(block)  # cached; last used on q1
        ref = _buffer_in_cycle(device, q1)
        stand_in = _CollectOnQuery()
        # the allocator is shared: every block cached in this bin (ours and other tests') asks
        # the stand-in, so the scan meets it whichever it looks at first
        bin_, _ = alloc.bin_for(nbytes)
        saved = [(b, b.event) for b in alloc._cache.get(bin_, [])]
        for b, _ in saved:
            b.event = stand_in
        live = alloc.stats.live_blocks
        got = _run_bounded(lambda: alloc.allocate(nbytes, queue=q2))  # q2 is not q1: asks the event
    finally:
        gc.enable()
        for b, event in locals().get("saved", []):
            b.event = event  # leave no stand-in in the shared cache
    assert stand_in.queried >= 1, "the scenario did not reach the cached block's event"
    assert ref() is None, "the collection did not free the buffer in the cycle"
    assert got is not block  # its event said "pending": a fresh block
    assert alloc.stats.live_blocks == live  # one block more, the collected buffer's one less
    alloc.free(got)
    q1.wait()
    q2.wait()


def test_finalizers_do_no_queue_or_allocator_work(device, monkeypatch):
    """While the collector runs, nothing calls into an allocator or a queue (any lock there may
    be held by the interrupted code); the work happens at the next safe point."""
    in_collection = threading.Event()
    violations: list[str] = []

    def on_gc(phase, info):
        (in_collection.set if phase == "start" else in_collection.clear)()

    def watch(cls, name):
        original = getattr(cls, name)

        def wrapper(*args, **kwargs):
            if in_collection.is_set() and threading.current_thread() is threading.main_thread():
                violations.append(f"{cls.__name__}.{name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    alloc = device.backend.allocator(device)
    watch(type(alloc), "free")
    watch(Queue, "record")
    watch(type(pk.Queue(device)._impl), "record")
    q = pk.Queue(device)
    gc.collect()
    base = alloc.stats.live_blocks  # a safe point: earlier garbage's blocks taken back first
    refs = [_buffer_in_cycle(device, q) for _ in range(5)]
    assert alloc.stats.live_blocks == base + len(refs)
    dropped_queue = pk.Queue(device)  # a queue in a cycle too: its finalizer stops its worker
    dropped_queue.enqueue_host(lambda: None)
    cycle = {"q": dropped_queue}
    cycle["self"] = cycle
    del cycle, dropped_queue
    gc.callbacks.append(on_gc)
    try:
        before = _deferred.pending()
        gc.collect()
    finally:
        gc.callbacks.remove(on_gc)
    assert all(r() is None for r in refs)
    assert not violations, f"called from inside a collection: {violations}"
    assert _deferred.pending() >= before + len(refs)  # handed over, not yet freed
    live = alloc.stats.live_blocks  # a safe point: the blocks are taken back now
    assert _deferred.pending() == 0
    q.wait()
    assert live == base, f"{live - base} of the collected buffers' blocks were not taken back"


def test_a_failing_deferred_cleanup_warns_and_does_not_stop_the_others():
    ran = []
    _deferred.defer(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    _deferred.defer(ran.append, 1)
    with pytest.warns(RuntimeWarning, match="boom"):
        _deferred.run_deferred()
    assert ran == [1]


def test_stress_threads_queues_and_cycles(device):
    """Threads x queues x buffers in reference cycles with the collector running all the time
    (threshold 1), bounded in time: no deadlock, the data right, every block taken back."""
    alloc = device.backend.allocator(device)
    gc.collect()
    baseline = alloc.stats.live_blocks
    deadline = time.monotonic() + 3.0
    errors: list[BaseException] = []
    rounds = [0] * 4

    def worker(t: int) -> None:
        try:
            queues = [pk.Queue(device) for _ in range(2)]
            i = 0
            while time.monotonic() < deadline:
                q = queues[i % 2]
                if i % 7 == 0:  # queues come and go too (their workers stop from finalizers)
                    queues[i % 2] = q = pk.Queue(device)
                value = (t * 31 + i) % 251
                holder: dict = {"dev": pk.Buffer(device, (257 + i % 5000,), np.uint8, queue=q)}
                holder["self"] = holder
                pk.memset(q, holder["dev"], value)
                out = np.empty(holder["dev"].shape, np.uint8)
                pk.memcpy(q, out, holder["dev"])
                ev = pk.Event(device)
                q.record(ev)
                other = queues[(i + 1) % 2]
                other.wait_for(ev)
                other.wait()
                q.wait()
                assert (out == value).all(), f"thread {t} round {i}: wrong data"
                del holder
                i += 1
            rounds[t] = i
        except BaseException as exc:
            errors.append(exc)

    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(DEADLOCK_S + 3.0)
        assert not any(th.is_alive() for th in threads), "deadlock under collection pressure"
    finally:
        gc.set_threshold(*old)
    assert not errors, errors[0]
    assert all(r > 0 for r in rounds), rounds
    gc.collect()
    assert alloc.stats.live_blocks == baseline  # every collected buffer's block came back
