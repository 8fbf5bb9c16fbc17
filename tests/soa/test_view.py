"""Views over host memory: shapes, strides, writes, const views."""

import numpy as np
import pytest

import soa


class P(soa.Layout):
    x = soa.column(np.float32)
    mom = soa.vector(np.float64, 3)
    cov = soa.matrix(np.float32, 2, 3)
    n = soa.scalar(np.int32)


def make_view(n, const=False):
    mem = np.zeros(P.byte_size(n), np.uint8)
    return mem, soa.View(P, n, mem, soa.host_array_factory(mem, const), const=const)


def test_field_geometry_matches_layout():
    n = 37
    mem, v = make_view(n)
    ps = P.placements(n)
    assert v.x.shape == (n,) and v.x.strides == (4,)
    assert v.mom.shape == (n, 3) and v.mom.strides == (8, ps["mom"].pitch)
    assert v.cov.shape == (n, 2, 3) and v.cov.strides == (4, ps["cov"].pitch, 2 * ps["cov"].pitch)
    assert v.n.shape == ()
    # writes land where the layout says: component (r, c) is column c*R + r
    v.cov[5, 1, 2] = 42
    col = 2 * 2 + 1
    raw = mem[ps["cov"].offset + col * ps["cov"].pitch :].view(np.float32)
    assert raw[5] == 42
    v.mom[:, 2] = np.arange(n)
    raw = mem[ps["mom"].offset + 2 * ps["mom"].pitch :].view(np.float64)
    np.testing.assert_array_equal(raw[:n], np.arange(n))


def test_assignment_and_scalars():
    _, v = make_view(4)
    v.x = [1, 2, 3, 4]
    v.n = 3
    assert v.x.tolist() == [1, 2, 3, 4] and int(v.n) == 3
    with pytest.raises(AttributeError, match="no field 'y'"):
        v.y


def test_const_view_refuses_writes():
    mem, v = make_view(4)
    v.x = 7
    c = v.as_const()
    assert c.x[0] == 7
    with pytest.raises(ValueError, match="read-only"):
        c.x[0] = 1
    with pytest.raises(AttributeError, match="const view"):
        c.n = 1
    assert "ConstView" in repr(c)


def test_to_dict_copies():
    _, v = make_view(3)
    v.x = [1, 2, 3]
    d = v.to_dict()
    d["x"][0] = 100
    assert v.x[0] == 1 and set(d) == {"x", "mom", "cov", "n"}
