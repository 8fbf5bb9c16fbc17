"""A layout declared or used wrongly raises alpyka's error root (``pk.ArgumentError``, a
``ValueError``; ``pk.ArgumentTypeError``, a ``TypeError``; ``pk.NameNotFound``, a ``KeyError``)
with a message naming what was wrong and the fix; ``except ValueError`` and the like keep working."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_name, raises_type, raises_value


class Hits(soa.Layout):
    x = soa.column(np.float32)
    p = soa.vector(np.float32, 3)


class Enforced(soa.Layout, alignment=64, alignment_enforcement="enforced"):
    x = soa.column(np.float32)


def _declare(alignment=None, enforcement=None, **fields):
    kw = {k: v for k, v in (("alignment", alignment), ("alignment_enforcement", enforcement)) if v is not None}
    return type("Bad", (soa.Layout,), dict(fields), **kw)


FIELDS = {
    "not a dtype": (dict(x=soa.column("flaot32")), r"'flaot32' is not a numpy dtype.*such as np\.float32"),
    "object dtype": (dict(x=soa.column(object)), r"dtype object is not supported in a SoA layout; use a fixed-size"),
    "field name": ({"x-y": soa.column(np.float32)}, r"'x-y' is not a Python identifier.*e\.g\. to 'x_y'"),
    "reserved": (dict(size=soa.column(np.float32)), r"'size' is reserved.*rename the field, e\.g\. to 'size_'"),
    "pitch suffix": (
        dict(a=soa.vector(np.float32, 2), a_pitch=soa.column(np.float32)),
        r"'a_pitch' is field 'a' followed by '_pitch'.*rename it, e\.g\. to 'apitch'",
    ),
}


@pytest.mark.parametrize("what", FIELDS)
def test_bad_field_declarations(what):
    fields, match = FIELDS[what]
    with raises_type(match):
        _declare(**fields)


def test_bad_vector_and_matrix_sizes():
    with raises_value(r"soa\.vector size must be a positive integer \(1, 2, 3, \.\.\.\), got 0"):
        soa.vector(np.float32, 0)
    with raises_value(r"soa\.matrix cols must be a positive integer.*got 2\.0"):
        soa.matrix(np.float32, 2, 2.0)


def test_bad_alignment_settings():
    with raises_value(r"alignment must be a power of two in bytes \(e\.g\. 64 or 128, the default\), got 48"):
        _declare(alignment=48, x=soa.column(np.float32))
    with raises_value(r"alignment_enforcement must be 'relaxed' or 'enforced', got 'strict'"):
        _declare(enforcement="strict", x=soa.column(np.float32))
    with raises_value(r"alignment 4 is not a multiple of the item size 8.*declare the layout with alignment=8 or more"):
        _declare(alignment=4, x=soa.column(np.float64))


def test_a_field_declared_twice():
    with raises_type(r"field 'x' is declared twice \(here and in a base layout.*give each field its own name"):
        type("Twice", (Hits,), {"x": soa.column(np.int32)})


def test_a_layout_is_not_instantiated():
    with raises_type(r"Hits is a layout description, not a value; .*pk\.PortableCollection\(Hits, n, q\)"):
        Hits()


def test_sizes():
    with raises_type(r"size must be a non-negative integer, got 2\.5 \(float\); pass a Python or numpy int"):
        Hits.byte_size(2.5)
    with raises_value(r"size must be a non-negative integer \(0 or more elements\), got -1"):
        Hits.placements(-1)


def test_unknown_field_lists_the_fields():
    with raises_name(r"^Hits has no field 'z'; its fields are \['x', 'p'\]$") as info:
        Hits.field("z")
    assert str(info.value) == "Hits has no field 'z'; its fields are ['x', 'p']"  # not the repr


def test_enforced_alignment_of_a_buffer(device):
    Enforced.check_alignment(128)
    with raises_value(r"buffer at 0x44 is not aligned to 64 bytes.*allocate it with pk\.Buffer"):
        Enforced.check_alignment(0x44)
    pk.PortableCollection(Enforced, 5, device)  # its buffer is aligned


def test_as_const_of_device_memory(device):
    """``View.as_const`` makes a const view of host memory; a view of device memory (OpenCL's
    buffers) is refused, pointing to the collection's own ``const_view``."""
    coll = pk.PortableCollection(Hits, 4, device)
    view = coll.view()
    if isinstance(view.memory, np.ndarray):
        assert view.as_const().const
    else:
        with raises_type(r"as_const\(\) works on views of host \(numpy\) memory, .*collection\.const_view\(\)"):
            view.as_const()
    with raises_type(r"this one's is object; use collection\.const_view\(\)"):
        soa.View(Hits, 4, object(), None).as_const()
    assert coll.const_view().const
