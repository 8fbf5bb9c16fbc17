"""SoA layout arithmetic against CMSSW's SoATemplate rules, computed by hand."""

import numpy as np
import pytest

import soa


class Hits(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float64)
    detid = soa.column(np.int16)
    p = soa.vector(np.float32, 3)
    cov = soa.matrix(np.float64, 2, 2)
    n_valid = soa.scalar(np.int32)


def _pad(nbytes: int, align: int) -> int:
    return (nbytes + align - 1) // align * align


# Hand-computed for n = 33, alignment 128:
#   x       33*4=132 -> 256        offset 0
#   y       33*8=264 -> 384        offset 256
#   detid   33*2=66  -> 128        offset 640
#   p       3 x 256                offset 768
#   cov     4 x 384                offset 1536
#   n_valid 4 -> 128               offset 3072     total 3200
HAND_33 = {
    "x": (0, 256),
    "y": (256, 384),
    "detid": (640, 128),
    "p": (768, 256),
    "cov": (1536, 384),
    "n_valid": (3072, 128),
}


def test_offsets_by_hand_n33():
    ps = Hits.placements(33)
    assert {k: (p.offset, p.pitch) for k, p in ps.items()} == HAND_33
    assert Hits.byte_size(33) == 3200
    assert ps["x"].padding == 124 and ps["p"].nbytes == 768 and ps["cov"].nbytes == 1536


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000])
@pytest.mark.parametrize("align", [16, 64, 128])
def test_byte_size_rule(n, align):
    class L(soa.Layout, alignment=align):
        a = soa.column(np.float32)
        b = soa.column(np.float64)
        c = soa.column(np.int8)
        v = soa.vector(np.int32, 3)
        m = soa.matrix(np.float32, 3, 2)
        s = soa.scalar(np.float64)

    expected_pitch = {
        "a": _pad(4 * n, align),
        "b": _pad(8 * n, align),
        "c": _pad(n, align),
        "v": _pad(4 * n, align),
        "m": _pad(4 * n, align),
        "s": _pad(8, align),
    }
    comps = {"a": 1, "b": 1, "c": 1, "v": 3, "m": 6, "s": 1}
    offset = 0
    ps = L.placements(n)
    for name in ["a", "b", "c", "v", "m", "s"]:
        assert ps[name].offset == offset, name
        assert ps[name].pitch == expected_pitch[name], name
        assert ps[name].offset % align == 0
        offset += expected_pitch[name] * comps[name]
    assert L.byte_size(n) == offset
    assert L.padded_size(n, np.float32) * 4 == expected_pitch["a"]


def test_n_zero_keeps_scalars():
    assert Hits.byte_size(0) == 128  # only the scalar's padded slot


def test_describe_prints_offsets_and_padding():
    text = Hits.describe(33)
    assert "Hits(33 elements, byte alignment=128" in text
    line = next(l for l in text.splitlines() if l.strip().startswith("detid"))
    assert line.split()[3:7] == ["640", "66", "62", "128"]  # offset, size, padding, pitch
    assert "3200 bytes" in text


@pytest.mark.parametrize("dtype", [object, str, "U4", "S3", [("a", "f4")]])
def test_bad_dtype_names_the_field(dtype):
    with pytest.raises(TypeError, match=r"Bad\.energy"):

        class Bad(soa.Layout):
            energy = soa.column(dtype)


@pytest.mark.parametrize("n", [-1, 2.5, "3", None, True])
def test_bad_sizes(n):
    with pytest.raises((TypeError, ValueError), match="non-negative integer"):
        Hits.byte_size(n)


def test_bad_layout_declarations():
    with pytest.raises(ValueError, match="power of two"):

        class A(soa.Layout, alignment=48):
            x = soa.column(np.float32)

    with pytest.raises(ValueError, match="multiple of the item size"):

        class B(soa.Layout, alignment=4):
            x = soa.column(np.float64)

    with pytest.raises(ValueError, match="positive integer"):
        soa.vector(np.float32, 0)
    with pytest.raises(TypeError, match="reserved"):

        class C(soa.Layout):
            size = soa.column(np.float32)

    with pytest.raises(KeyError, match=r"its fields are \['x', 'y'"):
        Hits.field("z")


def test_enforced_alignment_checks_address():
    class E(soa.Layout, alignment=64, alignment_enforcement="enforced"):
        x = soa.column(np.float32)

    E.check_alignment(128)
    with pytest.raises(ValueError, match="not aligned"):
        E.check_alignment(96)
    Hits.check_alignment(96)  # relaxed: no check


def test_block_offsets_align_each_block():
    class Small(soa.Layout, alignment=16):
        a = soa.column(np.int8)

    offsets, total = soa.block_offsets([(Small, 3), (Hits, 5)])
    assert offsets == [0, 128]
    assert total == 128 + Hits.byte_size(5)


@pytest.mark.parametrize("align", [256, 4096])
def test_alignments_above_128_place_fields_blocks_and_buffers(device, queue, align):
    """Offsets, pitches and block starts are multiples of the layout's alignment, and a
    collection's buffer starts at one (enforced: the collection checks it), on every backend,
    also where the cache holds a block of the same size aligned only to 128 bytes."""
    import gc

    import portable as pk

    class Big(soa.Layout, alignment=align, alignment_enforcement="enforced"):
        x = soa.column(np.float32)
        y = soa.column(np.float64)
        p = soa.vector(np.float32, 3)
        n = soa.scalar(np.int32)

    class Small(soa.Layout, alignment=16):
        a = soa.column(np.int8)

    n = 33
    for name, p in Big.placements(n).items():
        assert p.offset % align == 0 and p.pitch == _pad(p.size, align), name
    assert Big.byte_size(n) == 4 * _pad(4 * n, align) + _pad(8 * n, align) + align  # x, p (3), y, n
    offsets, _ = soa.block_offsets([(Small, 5), (Big, n)])
    assert offsets == [0, align]
    for _ in range(3):
        plain = pk.Buffer(device, (Big.byte_size(n),), np.uint8, queue=queue, alignment=128)
        del plain
        gc.collect()
        one = pk.PortableCollection(Big, n, queue)  # raises where its buffer is not aligned
        two = pk.PortableCollection([Small, Big], [5, n], queue)
        for coll in (one, two):
            assert coll.buffer.ptr % align == 0, (device, hex(coll.buffer.ptr))  # 0: OpenCL shows no address
        if device.is_host_memory:
            assert one.x.ctypes.data % align == 0 and one.p.ctypes.data % align == 0
            assert two["Big"].x.ctypes.data % align == 0 and two["Big"].n.ctypes.data % align == 0
        del one, two
        gc.collect()


@pytest.mark.parametrize("bad", [0, -4096, 3000, 4095, 1.5e3, "4096"])
def test_an_alignment_not_a_power_of_two_is_refused(bad):
    with pytest.raises(ValueError, match="power of two"):

        class L(soa.Layout, alignment=bad):
            x = soa.column(np.float32)


@pytest.mark.parametrize("name", ["fields", "size", "describe", "alignment"])
def test_every_reserved_name_is_refused_as_such(name):
    """a field named ``fields`` failed inside the class machinery ("'Field' object is not iterable")"""
    with pytest.raises(TypeError, match=rf"field name '{name}' is reserved"):
        type("Bad", (soa.Layout,), {name: soa.column(np.float32)})
    with pytest.raises(TypeError, match=rf"field name '{name}' is reserved"):  # below a layout of its own
        type("Bad2", (Hits,), {name: soa.column(np.float32)})
