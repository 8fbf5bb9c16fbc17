"""portable.caches: the bounded caches of the launch paths and the inference model drop the
least recently used entry first, key by identity without handing a new object an old one's
entry, and may be shared between threads."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

import portable as pk
from alpyka_testing.errors import raises_root
from portable.caches import IdentityCache, LRUCache


def test_the_least_recently_used_entry_is_dropped_first():
    cache = LRUCache(3)
    for k in "abc":
        cache[k] = k.upper()
    assert cache.get("a") == "A"  # a is used again: b is now the oldest
    cache["d"] = "D"
    assert "b" not in cache and [cache.peek(k) for k in "acd"] == ["A", "C", "D"]
    assert len(cache) == 3
    cache["c"] = "C2"  # set again: used again
    cache["e"] = "E"
    assert "a" not in cache and cache["c"] == "C2"
    with pytest.raises(KeyError):
        cache["a"]


def test_peek_reads_without_using():
    cache = LRUCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.peek("a") == 1 and cache.peek("zz", 0) == 0
    cache["c"] = 3  # a was only peeked at: it is still the oldest
    assert "a" not in cache and cache.values() == [2, 3]


def test_size_must_be_positive():
    with raises_root(pk.ArgumentError, ValueError, "at least 1"):
        LRUCache(0)


class _Key:
    """Equal to every other _Key (as a frozen dataclass of equal fields is)."""

    def __eq__(self, other):
        return isinstance(other, _Key)

    def __hash__(self):
        return 0


def test_identity_cache_tells_equal_objects_apart():
    a, b = _Key(), _Key()
    cache = IdentityCache(4)
    cache[a] = "a"
    assert cache.get(a) == "a" and cache.peek(a) == "a" and a in cache
    assert cache.get(b) is None and cache.peek(b) is None and b not in cache
    cache[b] = "b"
    assert cache.values() == ["a", "b"]


def test_identity_cache_keeps_its_keys_alive_until_dropped():
    """An entry holds its key object, so no new object can get that id while the entry is
    kept (and find the old object's value); dropped, the object is freed."""
    cache = IdentityCache(1)
    key = _Key()
    ref = weakref.ref(key)
    cache[key] = "old"
    del key
    gc.collect()
    assert ref() is not None  # held by the cache: its id is not reused
    cache[_Key()] = "new"  # drops the first entry
    gc.collect()
    assert ref() is None


def test_identity_cache_never_answers_for_a_new_object_at_an_old_id():
    """Objects made and freed in turn often share one address: each must miss."""
    cache = IdentityCache(8)
    cache[_Key()] = "first"  # the cache keeps this one alive
    for _ in range(100):
        assert cache.get(_Key()) is None  # a fresh object (often at a freed id): never "first"


def test_a_cache_shared_by_threads_stays_bounded_and_consistent():
    cache = IdentityCache(16)
    keys = [_Key() for _ in range(64)]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(4000):
                k = keys[(i * 7 + seed) % len(keys)]
                got = cache.get(k)
                assert got is None or got == id(k)
                cache[k] = id(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) <= 16
