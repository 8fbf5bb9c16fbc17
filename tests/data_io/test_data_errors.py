"""Wrong input to pk.read_root, pk.root_chunks, pk.event_workdiv, pk.from_awkward/pk.to_awkward and
pk.distributed raises alpyka's error root (and the builtin it refines) with the fix named; the
sites the other data tests already cover are checked there (test_awkward_interop.py,
test_read_root.py, test_distributed.py)."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_type, raises_value

ak = pytest.importorskip("awkward", reason="the data extra: pip install 'alpyka[data]'")


class Hits(soa.Layout):
    pt = soa.column(np.float32)
    p = soa.vector(np.float32, 3)


def _events(counts=(2, 1)):
    n = sum(counts)
    flat = ak.Array({"pt": np.arange(n, dtype=np.float32), "px": np.ones(n, np.float32), "py": np.ones(n, np.float32)})
    return ak.unflatten(ak.with_field(flat, np.ones(n, np.float32), "pz"), np.asarray(counts, np.int64))


MAP = {"p": ("px", "py", "pz")}


def test_from_awkward_arguments(queue):
    with raises_type(r"from_awkward needs a soa\.Layout subclass first \(the class, not an instance\)"):
        pk.from_awkward(int, _events(), queue, fields=MAP)
    with raises_type(r"expected a pk\.Queue or pk\.Device, got str"):
        pk.from_awkward(Hits, _events(), "cpu_serial", fields=MAP)
    with raises_value(r"Hits\.p \(.*\) takes one field or 3 \(one per component\), got \['px', 'py'\]"):
        pk.from_awkward(Hits, _events(), queue, fields={"p": ("px", "py")})


def test_from_awkward_field_kinds(queue):
    ev = _events()
    record = ak.with_field(ev, ak.zip({"a": ev.pt, "b": ev.pt}), "pt")
    with raises_type(r"field 'pt' \(column 'pt'\) is .*not numbers; map the column to a numeric field"):
        pk.from_awkward(Hits, record, queue, fields=MAP)
    pairs = ak.to_regular(ak.Array([[[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0]]]), axis=2)
    rows_of_two = ak.with_field(ev, pairs, "px")
    with raises_value(r"'px': one value per row expected \(one field per component\), got rows of shape \(2,\)"):
        pk.from_awkward(Hits, rows_of_two, queue, fields=MAP)


def test_to_awkward_arguments(queue):
    coll, offsets = pk.from_awkward(Hits, _events(), queue, fields=MAP)
    queue.wait()
    with raises_type(r"to_awkward needs a PortableCollection, got dict"):
        pk.to_awkward({"pt": [1.0]})
    with raises_value(r"offsets must be a 1D integer array of n_events \+ 1 values, got shape \(2, 2\)"):
        pk.to_awkward(coll, np.zeros((2, 2), np.int64), queue=queue)
    assert ak.to_list(ak.num(pk.to_awkward(coll, offsets, queue=queue))) == [2, 1]


def test_event_workdiv_rows_per_block(device):
    with raises_value(r"rows_per_block must be at least 1, got 0"):
        pk.event_workdiv(device, 4, rows_per_block=0)


def test_root_tree_kind_and_chunk_size(tmp_path):
    uproot = pytest.importorskip("uproot", reason="the data extra: pip install 'alpyka[data]'")
    path = tmp_path / "h.root"
    with uproot.recreate(path) as f:
        f["h"] = np.histogram(np.arange(10.0), bins=5)
        f["events"] = {"pt": np.arange(4, dtype=np.float32)}
    with raises_type(r"'h' is a .*, not a TTree or RNTuple; name a tree of the file"):
        pk.read_root(path, "h", Hits, pk.host(), branches={"p": "pt"})
    with raises_value(r"entries_per_chunk must be at least 1, got 0"):
        pk.root_chunks(path, "events", 0)


def test_distributed_workers():
    pytest.importorskip("distributed", reason="the data extra: pip install 'alpyka[data]'")
    for bad in (0, 1.5):
        with raises_value(r"workers must be a positive integer \(1, 2, \.\.\.\), got"):
            pk.distributed.run(abs, [1], workers=bad)
