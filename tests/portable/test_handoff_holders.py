"""Which objects hold a buffer for the interchange bookkeeping (portable/_handoff.py's
``register_holder``): a type uses the getter of the nearest registered type in its MRO, a
subclass's before its base's, whatever the order of registration and whatever was looked up
before a registration."""

from __future__ import annotations

import pytest

from portable import _handoff


class _Queue:
    """What ``note_queue`` needs of a queue: non-blocking, weakly referenceable, a ``__dict__``."""

    blocking = False


class _Obj:
    def __init__(self) -> None:
        self.base_last = _handoff.LastQueue()
        self.sub_last = _handoff.LastQueue()


class _Base(_Obj):
    pass


class _Sub(_Base):
    pass


class _SubSub(_Sub):
    pass


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    """The test's registrations stay in the test (the real ones, Buffer, views, collections, kept)."""
    monkeypatch.setattr(_handoff, "_REGISTERED", dict(_handoff._REGISTERED))
    monkeypatch.setattr(_handoff, "_HOLDERS", {})


def _noted(obj: _Obj, q: _Queue) -> str | None:
    """Which getter ``note_queue`` used: the one whose LastQueue now names ``q``."""
    obj.base_last.ref = obj.sub_last.ref = None
    _handoff.note_queue(q, (obj,))
    if obj.sub_last.queue() is q:
        return "sub"
    if obj.base_last.queue() is q:
        return "base"
    return None


def _register_base() -> None:
    _handoff.register_holder(_Base, lambda o: o.base_last)


def _register_sub() -> None:
    _handoff.register_holder(_Sub, lambda o: o.sub_last)


@pytest.mark.parametrize("order", ["base_first", "sub_first"])
def test_the_nearest_registered_type_wins_whatever_the_order(order):
    q = _Queue()
    for register in (_register_base, _register_sub) if order == "base_first" else (_register_sub, _register_base):
        register()
    assert _noted(_Base(), q) == "base"
    assert _noted(_Sub(), q) == "sub"
    assert _noted(_SubSub(), q) == "sub", "a subclass of _Sub took its base's getter"


def test_a_type_seen_before_its_base_registered_is_a_holder_after():
    q = _Queue()
    assert _noted(_Sub(), q) is None  # looked up (and cached) while nothing is registered
    _register_base()
    assert _noted(_Sub(), q) == "base", "the cached 'no buffer' outlived the registration"


def test_a_type_seen_before_a_nearer_base_registered_uses_that_base_after():
    q = _Queue()
    _register_base()
    assert _noted(_SubSub(), q) == "base"  # cached with _Base's getter
    _register_sub()
    assert _noted(_SubSub(), q) == "sub", "the cached farther base's getter outlived the registration"


def test_the_fast_paths_noter_uses_the_same_lookup():
    q = _Queue()
    _register_base()
    _register_sub()
    prepared = _handoff.noter(q, (1.0, _SubSub()))
    assert prepared is not None
    _ref, getters = prepared
    obj = _SubSub()
    assert [i for i, _ in getters] == [1] and getters[0][1](obj) is obj.sub_last
