"""PortableCollection on every backend: round trips, views, copies, multi-layout blocks."""

import re

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_name, raises_type


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
    with raises_name(r"no block 'vertices'; its blocks are \['tracks', 'hits'\]: name one, its layout or its index"):
        coll.view("vertices")
    pos = pk.PortableCollection([Tracks, Hits], [1, 2], queue)
    assert pos.sizes == {"Tracks": 1, "Hits": 2}


def test_bad_collection_arguments(queue):
    with pytest.raises(TypeError, match="soa.Layout"):
        pk.PortableCollection(int, 3, queue)
    with pytest.raises(ValueError, match="non-negative"):
        pk.PortableCollection(Tracks, -1, queue)
    with raises_type("non-negative integer.*pass a Python or numpy int"):
        pk.PortableCollection(Tracks, 2.0, queue)
    with pytest.raises(TypeError, match="Queue or pk.Device"):
        pk.PortableCollection(Tracks, 3, "cpu")
    with raises_name(r"missing fields \['eta'.*give exactly the layout's fields \['pt'"):
        pk.PortableCollection.from_dict(Tracks, {"pt": np.zeros(3)}, queue)
    bad = random_tracks(4, np.random.default_rng())
    bad["pt"] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="differ in length"):
        pk.PortableCollection.from_dict(Tracks, bad, queue)


# ---------------------------------------------------------------------- sizes the device cannot hold
@pytest.mark.parametrize("n", [2**62, 10**13])
def test_too_large_collection_is_refused_before_allocating(queue, device, n):
    with pytest.raises(MemoryError, match=rf"Hits\[{n}\] needs {Hits.byte_size(n)} bytes") as err:
        pk.PortableCollection(Hits, n, queue)
    assert isinstance(err.value, ValueError)  # either catches it
    assert "at most" in str(err.value) or "address" in str(err.value)


def test_allocation_limit_names_the_device_limit(device):
    from portable._collection import allocation_limit

    limit = allocation_limit(device)
    if limit is None:
        pytest.skip(f"{device} reports no memory size")
    nbytes, what = limit
    assert nbytes > 0
    if device.backend_name == "opencl":
        assert nbytes == device.native.device.max_mem_alloc_size and "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in what
    n = nbytes // 4 + 1  # one float32 column past the limit
    with pytest.raises(MemoryError, match=rf"needs {Hits.byte_size(n)} bytes .*at most {nbytes} bytes"):
        pk.PortableCollection(Hits, n, device)


def test_a_buffer_past_the_allocation_limit_names_it(device, monkeypatch):
    """``pk.Buffer(dev, huge, ...)`` was numpy's bare MemoryError ("Unable to allocate 36.4 TiB")
    on the host and pyopencl's ``LogicError: create_buffer failed: INVALID_BUFFER_SIZE`` on
    opencl; it is checked against the device's limit as a collection is."""
    from portable._collection import allocation_limit

    with pytest.raises(pk.BufferTooLarge, match=r"more than a device can address \(2\*\*48\)"):
        pk.Buffer(device, (2**50,), np.float32)
    limit = allocation_limit(device)
    if limit is not None:
        nbytes = limit[0]
        n = nbytes // 4 + 1  # one float32 past the limit
        want = rf"needs {4 * n} bytes .*{re.escape(str(device))} allows at most {nbytes} bytes"
        with pytest.raises(pk.BufferTooLarge, match=want):
            pk.Buffer(device, (n,), np.float32)
    allocator = device.backend.allocator(device)

    def exhausted(*args, **kwargs):
        raise MemoryError("out of memory")

    monkeypatch.setattr(allocator, "allocate", exhausted)  # below the limit, but nothing is free
    with pytest.raises(pk.OutOfMemory, match=r"could not be allocated \(MemoryError: out of memory\)") as err:
        pk.Buffer(device, (16,), np.float32)
    assert isinstance(err.value, MemoryError) and isinstance(err.value, pk.AlpykaError)
    assert not isinstance(err.value, pk.BufferTooLarge)  # (not too large: nothing is free now)


# ---------------------------------------------------------------------- from_dict: shapes and kinds
def test_from_dict_names_the_field_of_a_bad_value(queue):
    good = random_tracks(3, np.random.default_rng(0))
    cases = [
        ({"pt": 1.0}, ValueError, r"field 'pt' \(float32 column\) got a scalar 1.0; it needs an array of shape \(n,\)"),
        ({"p": 2.0}, ValueError, r"field 'p' \(float32 vector\[3\]\) got a scalar 2.0; .*shape \(n, 3\)"),
        ({"pt": ["a", "b", "c"]}, TypeError, r"field 'pt' \(float32 column\) got strings \(dtype <U1, e.g. 'a'\)"),
        ({"n_valid": "3"}, TypeError, r"field 'n_valid' \(int32 scalar\) got strings"),
        ({"n_valid": None}, TypeError, r"field 'n_valid' \(int32 scalar\) got a non-numeric value None"),
        ({"pt": [1.0, [2.0], 3.0]}, ValueError, r"field 'pt' \(float32 column\): cannot make a numpy array"),
        (
            {"cov": np.zeros((3, 3))},
            ValueError,
            r"field 'cov' \(float32 matrix\[3x3\]\) has shape \(3, 3\), "
            r"the layout needs \(3, 3, 3\)",
        ),
    ]
    for change, exc, text in cases:
        with pytest.raises(exc, match=text):
            pk.PortableCollection.from_dict(Tracks, {**good, **change}, queue)


# ---------------------------------------------------------------------- from_dict: casting
class Narrow(soa.Layout):
    i8 = soa.column(np.int8)
    u16 = soa.column(np.uint16)
    f32 = soa.column(np.float32)
    flag = soa.column(np.bool_)
    count = soa.scalar(np.int32)


def _narrow(**change):
    data = {
        "i8": np.array([1, -2], np.int8),
        "u16": np.array([3, 4], np.uint16),
        "f32": np.array([0.5, 1.5], np.float32),
        "flag": np.array([True, False]),
        "count": np.int32(2),
    }
    data.update(change)
    return data


@pytest.mark.parametrize(
    "change, exc, text",
    [
        ({"i8": [300, 1]}, ValueError, r"field 'i8' \(int8 column\): value 300 is out of range for int8 \[-128, 127\]"),
        ({"i8": np.array([1, 300])}, ValueError, r"'i8'.*value 300 is out of range"),
        (
            {"u16": [-1, 0]},
            ValueError,
            r"field 'u16' \(uint16 column\): value -1 is out of range for uint16 \[0, 65535\]",
        ),
        ({"count": 2**40 + 7}, ValueError, r"field 'count' \(int32 scalar\): value 1099511627783 is out of range"),
        ({"count": 2**70}, ValueError, r"field 'count' .*value 1180591620717411303424 is out of range"),
        ({"i8": np.array([np.nan, 1.0])}, ValueError, r"field 'i8' .*value nan is not a finite number"),
        ({"i8": [1.5, 2.0]}, ValueError, r"field 'i8' .*value 1.5 is not a whole number"),
        ({"u16": np.array([70000.0, 1.0])}, ValueError, r"field 'u16' .*value 70000.0 is out of range"),
        ({"f32": np.array([1 + 2j, 0])}, TypeError, r"field 'f32' \(float32 column\) got complex values"),
        ({"f32": [1e300, 0.0]}, ValueError, r"field 'f32' .*value 1e\+300 overflows float32"),
        (
            {"f32": np.array([1, 16777217])},
            ValueError,
            r"field 'f32' \(float32 column\): integer 16777217 is not exactly representable in float32 "
            r"\(it would become 16777216.0\); convert explicitly",
        ),
        ({"f32": [2**70 + 1, 0]}, ValueError, r"'f32' .*integer 1180591620717411303425 is not exactly"),
        ({"flag": [2, 0]}, ValueError, r"field 'flag' \(bool column\): value 2 is not a bool"),
    ],
)
def test_from_dict_refuses_values_that_do_not_fit(queue, change, exc, text):
    with pytest.raises(exc, match=text):
        pk.PortableCollection.from_dict(Narrow, _narrow(**change), queue)


def test_from_dict_converts_values_that_fit(queue):
    rng = np.random.default_rng(3)
    f64 = rng.standard_normal(2)
    data = _narrow(i8=np.array([-128, 127], np.int64), u16=[65535, 0], f32=f64, flag=[1, 0], count=np.float64(7.0))
    got = pk.PortableCollection.from_dict(Narrow, data, queue).to_dict(queue)
    np.testing.assert_array_equal(got["i8"], [-128, 127])
    np.testing.assert_array_equal(got["u16"], [65535, 0])
    np.testing.assert_array_equal(got["f32"], f64.astype(np.float32))  # float64 -> float32 rounds
    np.testing.assert_array_equal(got["flag"], [True, False])
    assert got["count"] == 7 and got["count"].dtype == np.int32
    exact = _narrow(f32=np.array([2**24, -(2**40)]))  # integers beyond 2**24 that float32 holds exactly
    got = pk.PortableCollection.from_dict(Narrow, exact, queue).to_dict(queue)
    np.testing.assert_array_equal(got["f32"], [2.0**24, -(2.0**40)])
    nan = pk.PortableCollection.from_dict(Narrow, _narrow(f32=[np.nan, np.inf]), queue).to_dict(queue)
    assert np.isnan(nan["f32"][0]) and np.isinf(nan["f32"][1])  # non-finite floats stay as they are


def test_from_dict_casting_names(queue):
    wrap = pk.PortableCollection.from_dict(
        Narrow, _narrow(i8=np.array([300, 1]), u16=np.array([-1, 1]), count=2**40 + 7), queue, casting="unsafe"
    )
    got = wrap.to_dict(queue)
    assert got["i8"][0] == 44 and got["u16"][0] == 65535 and got["count"] == 7  # numpy's astype, as asked
    with pytest.raises(TypeError, match=r"field 'f32' .*cannot cast float64 to float32 with casting='safe'"):
        pk.PortableCollection.from_dict(Narrow, _narrow(f32=np.zeros(2)), queue, casting="safe")
    with pytest.raises(TypeError, match=r"field 'count' .*cannot cast float64 to int32 with casting='same_kind'"):
        pk.PortableCollection.from_dict(Narrow, _narrow(count=np.float64(1)), queue, casting="same_kind")
    # Python numbers and lists have no dtype of their own: checked by value under every casting
    ok = pk.PortableCollection.from_dict(Narrow, _narrow(count=5, u16=[1, 2]), queue, casting="safe")
    assert ok.to_dict(queue)["count"] == 5
    with pytest.raises(ValueError, match="casting must be one of 'same_value', 'no', 'equiv'"):
        pk.PortableCollection.from_dict(Narrow, _narrow(), queue, casting="sometimes")


def test_a_failed_allocation_is_out_of_memory_whatever_error_the_runtime_raises(device, monkeypatch):
    """The runtime's own out-of-memory errors (the allocator's ``oom_errors``: pyopencl's
    ``cl.MemoryError``, which is not a builtin MemoryError, cupy's OutOfMemoryError) become
    ``pk.OutOfMemory`` too, with the runtime's error as the cause."""
    allocator = device.backend.allocator(device)
    oom = getattr(allocator, "oom_errors", (MemoryError,))
    kinds = [k for k in oom if k is not MemoryError and k is not BaseException] or [MemoryError]

    def exhausted(*args, **kwargs):
        raise kinds[0]("MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(allocator, "allocate", exhausted)
    with pytest.raises(pk.OutOfMemory, match="could not be allocated") as err:
        pk.Buffer(device, (16,), np.float32)
    assert type(err.value.__cause__) is kinds[0]


def test_the_emulated_gpu_takes_buffers_of_more_than_a_gib(monkeypatch):
    """The GPU emulator's device memory is the host's: it reports the host's memory, so a buffer
    over 1 GiB (its old placeholder) is not refused as too large."""
    from backends.emulator.fake_cupy import make_fake_cupy

    props = make_fake_cupy(n_devices=1).cuda.runtime.getDeviceProperties(0)
    assert props["totalGlobalMem"] > 1 << 30


def test_an_unknown_attribute_names_the_fields():
    """``coll.nope`` (a typo of a column, on a device collection or its host copy) said only
    "PortableCollection has no attribute 'nope'", where a view's error lists its fields: the
    collection's names them too, and a collection of several blocks says how to reach a field."""
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    one = pk.PortableCollection(Hits, 3, q)
    for coll in (one, one.to_host(q)):
        with pytest.raises(AttributeError, match=r"has no attribute 'lyer'; its field\(s\) are \['x', 'layer'\]"):
            coll.lyer
    two = pk.PortableCollection([Tracks, Hits], [1, 2], q)
    with pytest.raises(AttributeError, match=r"2 blocks has no fields of its own: block 1 has it, coll\[1\]\.x"):
        two.x
    with pytest.raises(AttributeError, match=r"no block of this collection of 2 has it \(Tracks: .*Hits: \['x'"):
        two.lyer  # (a typo no block has: no coll[i].lyer advice)
    assert not hasattr(one, "_private") and hasattr(one, "layer")
