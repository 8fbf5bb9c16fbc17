"""Every piece of code the garbage collector runs (``weakref.finalize`` callbacks, ``__del__``,
weakref callbacks) in portable/, backends/, inference/ and soa/ is one reviewed to take no lock,
call into no queue and block on nothing: it runs inside whatever the collected object's last
user was doing, maybe holding that very lock (portable/_deferred.py). A new one fails
:func:`test_the_code_the_collector_runs_is_the_reviewed_lock_free_code` until it is reviewed
(hand the work to ``portable._deferred.defer`` or a ``SimpleQueue``) and listed here."""

from __future__ import annotations

import ast
import gc
import threading
from pathlib import Path

from alpyka_testing.threads import run_threads

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portable", "backends", "inference", "soa")

#: (file, what the collector runs) -> why it takes no lock and never blocks
REVIEWED = {
    ("portable/_buffer.py", "finalize: _on_collect"): "portable._deferred.defer: SimpleQueue.put",
    ("portable/_hostqueue.py", "finalize: stop_worker"): "SimpleQueue.put (reentrant, lock-free)",
    ("backends/_cupy_queue.py", "finalize: stop_worker"): "SimpleQueue.put",
    ("backends/_gpu_queue.py", "finalize: stop_worker"): "SimpleQueue.put",
    ("backends/_retention.py", "finalize: _graveyard.append"): "deque.append; the reaper thread does the rest",
    ("backends/_host_launch.py", "weakref callback: lambda"): "dict.pop of an int key",
    ("backends/emulator/fake_cupy.py", "finalize: rt.unregister"): "SimpleQueue.put; dropped under ranges_lock later",
    ("backends/emulator/fake_cupy_memory.py", "finalize: rt.unregister"): "SimpleQueue.put",
    ("backends/emulator/fake_cupy_memory.py", "PooledMemory.__del__"): "list.append to its arena",
    ("backends/emulator/fake_cupy_runtime.py", "finalize: self.ex.stop"): "SimpleQueue.put",
    ("inference/remote/_shm.py", "finalize: _unlink_all"): "shm_unlink by name: system calls, no lock",
}


def _collector_code(path: Path) -> list[str]:
    """What the collector may run that ``path`` defines: finalize callbacks, weakref callbacks
    and ``__del__`` methods, by name."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            dels = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__del__"]
            found += [f"{node.name}.__del__" for _ in dels]
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in ("weakref.finalize", "finalize") and len(node.args) >= 2:
            found.append(f"finalize: {ast.unparse(node.args[1])}")
        elif name in ("weakref.ref", "ref") and len(node.args) == 2:
            callback = node.args[1]
            what = "lambda" if isinstance(callback, ast.Lambda) else ast.unparse(callback)
            found.append(f"weakref callback: {what}")
    return found


def test_the_code_the_collector_runs_is_the_reviewed_lock_free_code():
    found = {
        (str(path.relative_to(ROOT)), what)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for what in _collector_code(path)
    }
    new, gone = found - REVIEWED.keys(), REVIEWED.keys() - found
    assert not new, (
        f"code the garbage collector runs, not reviewed yet: {sorted(new)}; it must take no lock, call "
        "into no queue and block on nothing (portable._deferred.defer the work), then list it in REVIEWED"
    )
    assert not gone, f"REVIEWED lists code that is gone or renamed: {sorted(gone)}"


def _collected_under_its_lock(make) -> None:
    """``make()`` leaves garbage in a reference cycle and returns a lock its finalizer could want;
    another thread holds that lock while the garbage is collected: the collection must not wait
    for it (a collection still running after 20 s fails the test)."""
    held, release = threading.Event(), threading.Event()
    gc.collect()
    gc.disable()
    try:
        lock = make()

        def hold() -> None:
            with lock:
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        try:
            assert held.wait(30)
            run_threads(lambda _: gc.collect(), 1, timeout=20)
        finally:
            release.set()
            holder.join(30)
    finally:
        gc.enable()


def test_a_queue_owner_collected_while_the_reaper_starts_does_not_wait():
    """backends/_retention: the owner's finalizer buries its objects without the start lock."""
    from backends import _retention

    class Owner:
        pass

    settled = [False]
    buried = _retention.Retained(lambda _marker: settled[0])
    buried.inflight.append((object(), []))  # a command not yet complete: the reaper keeps it

    def make() -> threading.Lock:
        owner = Owner()
        owner.self = owner
        _retention.track(buried, owner)
        return _retention._start_lock

    try:
        _collected_under_its_lock(make)
        assert buried in _retention._graveyard  # buried by the finalizer
    finally:
        settled[0] = True  # the reaper drops it at its next look


def test_a_shared_memory_pool_collected_while_its_lock_is_held_does_not_wait():
    """inference/remote/_shm: the pool's finalizer unlinks its segments by name, lock-free, even
    while its own lock is held."""
    import numpy as np

    from inference.remote._shm import ShmPool
    from inference.serving._leftovers import SHM_DIR

    keys: list[str] = []

    def make() -> threading.Lock:
        pool = ShmPool(lambda name, key, size: keys.append(key), lambda name: None)
        pool.self = pool
        pool.lease({"x": np.zeros(4, np.float32)}, {}).release()
        return pool._lock

    _collected_under_its_lock(make)
    assert keys and not (Path(SHM_DIR) / keys[0].lstrip("/")).exists()  # unlinked by the finalizer
