"""PortableCollection on every backend: round trips, views, copies, multi-layout blocks."""

import numpy as np
import pytest

import portable as pk
import soa


class Tracks(soa.Layout):
    pt = soa.column(np.float32)
    eta = soa.column(np.float64)
    charge = soa.column(np.int8)
    p = soa.vector(np.float32, 3)
    cov = soa.matrix(np.float32, 3, 3)
    n_valid = soa.scalar(np.int32)


class Hits(soa.Layout):
    x = soa.column(np.float32)
    layer = soa.column(np.int16)


def random_tracks(n, rng):
    return {
        "pt": rng.random(n, dtype=np.float32),
        "eta": rng.standard_normal(n),
        "charge": rng.integers(-1, 2, n).astype(np.int8),
        "p": rng.random((n, 3), dtype=np.float32),
        "cov": rng.random((n, 3, 3), dtype=np.float32),
        "n_valid": np.int32(n // 2),
    }


@pytest.mark.parametrize("n", [0, 1, 33, 1000])
def test_dict_roundtrip(queue, n):
    rng = np.random.default_rng()
    data = random_tracks(n, rng)
    coll = pk.PortableCollection.from_dict(Tracks, data, queue)
    assert coll.size == n and coll.layout is Tracks and coll.device is queue.device
    assert coll.nbytes == Tracks.byte_size(n)
    out = coll.to_dict(queue)
    for k, v in data.items():
        np.testing.assert_array_equal(out[k], v, err_msg=k)


def test_to_host_and_back(queue, device):
    rng = np.random.default_rng()
    data = random_tracks(50, rng)
    coll = pk.PortableCollection.from_dict(Tracks, data, queue)
    host = coll.to_host(queue)
    queue.wait()
    assert host.device.is_host_memory
    np.testing.assert_array_equal(host.cov, data["cov"])  # host.x is numpy onto the buffer
    host.pt[:] = 3.0
    back = host.to(device, queue)
    again = back.to_host(queue)
    queue.wait()
    assert (again.pt == 3.0).all() and int(again.n_valid) == 25


def test_host_columns_are_views_onto_the_buffer():
    coll = pk.PortableCollection(Tracks, 10, pk.host())
    base = coll.buffer.ptr
    ps = Tracks.placements(10)
    assert coll.pt.ctypes.data == base + ps["pt"].offset
    assert coll.p.ctypes.data == base + ps["p"].offset
    assert base % 128 == 0
    coll.pt[3] = 7
    assert coll.view().pt[3] == 7
    with pytest.raises(ValueError, match="read-only"):
        coll.const_view().pt[0] = 1


def test_zero(queue):
    coll = pk.PortableCollection.from_dict(Tracks, random_tracks(20, np.random.default_rng()), queue)
    coll.zero(queue)
    out = coll.to_dict(queue)
    assert all(not np.any(v) for v in out.values())


def test_copy_between_different_layouts_or_sizes_is_refused(queue):
    a = pk.PortableCollection(Tracks, 10, queue)
    with pytest.raises(ValueError, match=r"Tracks\[10\] vs Tracks\[11\]"):
        pk.memcpy(queue, a, pk.PortableCollection(Tracks, 11, queue))
    with pytest.raises(ValueError, match="differ in layout"):
        pk.memcpy(queue, a, pk.PortableCollection(Hits, 10, queue))


def test_multi_layout_collection(queue):
    coll = pk.PortableCollection({"tracks": Tracks, "hits": Hits}, {"tracks": 5, "hits": 100}, queue)
    assert coll.block_names == ["tracks", "hits"]
    assert coll.block_offset("hits") == Tracks.byte_size(5)
    assert coll.nbytes == Tracks.byte_size(5) + Hits.byte_size(100)
    assert coll.view("hits").size == 100 and coll["tracks"].layout is Tracks
    host = coll.to_host(queue)
    queue.wait()
    host.view("hits").x[:] = np.arange(100)
    dev = host.to(queue.device, queue)
    back = dev.to_host(queue)
    queue.wait()
    np.testing.assert_array_equal(back.view("hits").x, np.arange(100))
    with pytest.raises(ValueError, match="holds blocks"):
        coll.size
    with pytest.raises(KeyError, match="its blocks are"):
        coll.view("vertices")
    pos = pk.PortableCollection([Tracks, Hits], [1, 2], queue)
    assert pos.sizes == {"Tracks": 1, "Hits": 2}


def test_bad_collection_arguments(queue):
    with pytest.raises(TypeError, match="soa.Layout"):
        pk.PortableCollection(int, 3, queue)
    with pytest.raises(ValueError, match="non-negative"):
        pk.PortableCollection(Tracks, -1, queue)
    with pytest.raises(TypeError, match="non-negative integer"):
        pk.PortableCollection(Tracks, 2.0, queue)
    with pytest.raises(TypeError, match="Queue or pk.Device"):
        pk.PortableCollection(Tracks, 3, "cpu")
    with pytest.raises(KeyError, match=r"missing fields \['eta'"):
        pk.PortableCollection.from_dict(Tracks, {"pt": np.zeros(3)}, queue)
    bad = random_tracks(4, np.random.default_rng())
    bad["pt"] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="differ in length"):
        pk.PortableCollection.from_dict(Tracks, bad, queue)
