"""pk.from_awkward / pk.to_awkward on every backend: round trips, copies counted, clear errors."""

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_name, raises_value

ak = pytest.importorskip("awkward", reason="the data extra: pip install 'alpyka[data]'")


class Muons(soa.Layout):
    pt = soa.column(np.float32)
    eta = soa.column(np.float64)
    charge = soa.column(np.int32)
    p = soa.vector(np.float32, 3)
    n_valid = soa.scalar(np.int32)


def jagged(counts, seed=0):
    rng = np.random.default_rng(seed)
    n = int(sum(counts))
    flat = ak.Array(
        {
            "pt": rng.random(n, dtype=np.float32),
            "eta": rng.standard_normal(n),
            "charge": rng.choice(np.array([-1, 1], dtype=np.int32), n),
            "px": rng.random(n, dtype=np.float32),
            "py": rng.random(n, dtype=np.float32),
            "pz": rng.random(n, dtype=np.float32),
        }
    )
    return ak.unflatten(flat, np.asarray(counts, dtype=np.int64))


MAP = {"p": ("px", "py", "pz")}


def host_of(coll, queue):
    return coll if coll.device.is_host_memory else coll.to_host(queue)


@pytest.mark.parametrize("counts", [[2, 0, 3, 1], [], [0, 0], [5]])
def test_roundtrip(queue, counts):
    arr = jagged(counts)
    coll, offsets = pk.from_awkward(Muons, arr, queue, fields=MAP)
    assert coll.device is queue.device and coll.size == sum(counts)
    off = pk.offsets_to_host(offsets, queue)
    assert off.dtype == np.int64 and off.tolist() == [0, *np.cumsum(counts).tolist()]
    back = pk.to_awkward(coll, offsets, fields=MAP, queue=queue)
    assert ak.to_list(back[["pt", "eta", "charge", "px", "py", "pz"]]) == ak.to_list(arr)
    assert str(back.type).endswith(
        "var * {pt: float32, eta: float64, charge: int32, px: float32, py: float32, pz: float32}"
    )


def test_vector_from_one_regular_field(queue):
    arr = jagged([3, 1])
    vec = ak.Array(
        {
            "pt": arr.pt,
            "eta": arr.eta,
            "charge": arr.charge,
            "p": ak.unflatten(
                ak.to_regular(
                    ak.Array(
                        np.stack(
                            [
                                ak.flatten(arr.px).to_numpy(),
                                ak.flatten(arr.py).to_numpy(),
                                ak.flatten(arr.pz).to_numpy(),
                            ],
                            1,
                        )
                    ),
                    axis=1,
                ),
                [3, 1],
            ),
        }
    )
    coll, offsets = pk.from_awkward(Muons, vec, queue)
    h = host_of(coll, queue)
    queue.wait()
    np.testing.assert_array_equal(h.p[:, 1], ak.flatten(arr.py).to_numpy())
    back = pk.to_awkward(coll, offsets, queue=queue)
    assert ak.to_list(back.p) == ak.to_list(vec.p)


def test_flat_records(queue):
    arr = ak.flatten(jagged([2, 3]))  # one row per "event"
    coll, offsets = pk.from_awkward(Muons, arr, queue, fields=MAP)
    assert pk.offsets_to_host(offsets, queue).tolist() == list(range(6))
    assert ak.to_list(pk.to_awkward(coll, None, fields=MAP, queue=queue)) == ak.to_list(arr)


def test_host_copies_counted_and_zero_copy_where_possible():
    """Host: awkward's buffers are read without a copy; each column is one memcpy into the
    padded SoA buffer (it cannot alias awkward's separate buffers); offsets are awkward's own;
    to_awkward wraps the collection's columns without copying."""
    q = pk.Queue(pk.device("cpu_serial"))
    arr = jagged([2, 0, 3])
    report = {}
    coll, offsets = pk.from_awkward(Muons, arr, q, fields=MAP, report=report)
    assert report["converted_bytes"] == 0 and report["to_device_bytes"] == 0
    assert report["filled_bytes"] == 5 * (4 + 8 + 4 + 3 * 4)  # exactly one copy of every value
    assert report["offsets_shared"]
    assert np.shares_memory(offsets, ak.to_layout(arr).offsets.data)
    back = pk.to_awkward(coll, offsets)
    assert np.shares_memory(ak.to_layout(back).content["pt"].data, coll.pt)
    assert np.shares_memory(ak.to_layout(back).offsets.data, offsets)
    # a dtype that differs is converted once, and counted
    report = {}
    pk.from_awkward(
        Muons,
        ak.Array(
            {
                "pt": arr.pt,
                "eta": ak.values_astype(arr.eta, np.float32),
                "charge": arr.charge,
                "px": arr.px,
                "py": arr.py,
                "pz": arr.pz,
            }
        ),
        q,
        fields=MAP,
        report=report,
    )
    assert report["converted_bytes"] == 5 * 8


def test_device_copy_counted(queue):
    report = {}
    coll, _ = pk.from_awkward(Muons, jagged([1, 2]), queue, fields=MAP, report=report)
    queue.wait()
    assert report["to_device_bytes"] == (0 if queue.device.is_host_memory else coll.nbytes + 3 * 8)


# ---------------------------------------------------------------------- errors
def test_missing_field_named(queue):
    with raises_name(r"no field 'p' \(for column 'p'\); its fields are \['pt'.*map the column to one of them"):
        pk.from_awkward(Muons, jagged([1]), queue)
    with raises_name("does not have"):
        pk.from_awkward(Muons, jagged([1]), queue, fields={"nope": "pt", **MAP})


def test_unsafe_cast_refused(queue):
    arr = jagged([2])
    bad = ak.Array(
        {
            "pt": arr.pt,
            "eta": arr.eta,
            "charge": ak.values_astype(arr.charge, np.float64) + 0.5,
            "px": arr.px,
            "py": arr.py,
            "pz": arr.pz,
        }
    )
    with pytest.raises(ValueError, match=r"column 'charge'.*not a whole number"):
        pk.from_awkward(Muons, bad, queue, fields=MAP)
    with pytest.raises(TypeError, match=r"column 'pt'.*cannot cast float64 to float32"):
        pk.from_awkward(
            Muons,
            ak.Array({**{k: arr[k] for k in arr.fields}, "pt": ak.values_astype(arr.pt, np.float64)}),
            queue,
            fields=MAP,
            casting="safe",
        )


def test_jagged_field_for_flat_column(queue):
    arr = jagged([2, 1])
    nested = ak.Array({**{k: arr[k] for k in arr.fields}, "pt": ak.Array([[[1.0], [2.0, 3.0]], [[]]])})
    with raises_value(r"'pt'.*nested more than one list.*flatten it first"):
        pk.from_awkward(Muons, nested, queue, fields=MAP)
    regular = ak.Array({**{k: arr[k] for k in arr.fields}, "pt": ak.unflatten(arr.pt, 1, axis=1)})
    with raises_value(r"column 'pt'.*rows hold shape \(1,\).*jagged field for a flat column"):
        pk.from_awkward(Muons, regular, queue, fields=MAP)
    mixed = ak.Array({**{k: arr[k] for k in arr.fields}, "eta": np.zeros(2)})
    with raises_value(r"'eta'.*one value per event.*jagged.*into two collections"):
        pk.from_awkward(Muons, mixed, queue, fields=MAP)


def test_mismatched_offsets(queue):
    a, b = jagged([2, 1, 3]), jagged([2, 2, 2])
    rec = ak.zip({"pt": a.pt, "eta": a.eta, "charge": a.charge, "px": b.px, "py": b.py, "pz": b.pz}, depth_limit=1)
    with raises_value(r"offsets do not match: event 1 has 1 rows in field 'pt' but 2 in 'px'"):
        pk.from_awkward(Muons, rec, queue, fields=MAP)


def test_missing_values_refused(queue):
    arr = jagged([2])
    opt = ak.Array({**{k: arr[k] for k in arr.fields}, "pt": ak.Array([[1.0, None]])})
    with raises_value(r"'pt'.*missing values.*ak\.fill_none"):
        pk.from_awkward(Muons, opt, queue, fields=MAP)


def test_to_awkward_offsets_checked(queue):
    coll, offsets = pk.from_awkward(Muons, jagged([2, 1]), queue, fields=MAP)
    queue.wait()
    with raises_value("do not match the collection.*start at 0 and end at its size"):
        pk.to_awkward(coll, np.array([0, 1, 2], dtype=np.int64), queue=queue)
    with raises_value("decrease at event 1.*must never decrease"):
        pk.to_awkward(coll, np.array([0, 3, 1, 3], dtype=np.int64), queue=queue)
    for dtype in (np.uint32, np.uint64, np.uint8):  # np.diff wraps around on unsigned integers
        with raises_value(r"decrease at event 1 \(2 -> 1\)"):
            pk.to_awkward(coll, np.array([0, 2, 1, 3], dtype=dtype), queue=queue)
    ok = pk.to_awkward(coll, np.array([0, 2, 3], dtype=np.uint32), queue=queue)
    assert ak.to_list(ak.num(ok)) == [2, 1]


@pytest.mark.parametrize("rows", [slice(2, None), slice(None, 2), slice(1, 3)], ids=["tail", "head", "middle"])
def test_sliced_array_is_rebased(queue, rows):
    """A slice's offsets start past 0 (tail), end before the content's end (head: ``arr[:2]``
    shares the whole content buffer), or both: only the sliced rows are taken."""
    arr = jagged([1, 2, 3, 4])[rows]
    coll, offsets = pk.from_awkward(Muons, arr, queue, fields=MAP)
    queue.wait()
    assert coll.size == int(ak.sum(ak.num(arr)))
    assert ak.to_list(pk.to_awkward(coll, offsets, fields=MAP, queue=queue)) == ak.to_list(arr)
