"""pk.read_root on the CMS samples of scikit-hep-testdata 0.3.12 (HZZ, Zmumu) and a written RNTuple."""

from pathlib import Path

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_name, raises_root, raises_type

ak = pytest.importorskip("awkward", reason="the data extra: pip install 'alpyka[data]'")
uproot = pytest.importorskip("uproot", reason="the data extra: pip install 'alpyka[data]'")
skhep = pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.3.12")

HZZ = skhep.data_path("uproot-HZZ.root")
ZMUMU = skhep.data_path("uproot-Zmumu.root")


def _arrays(path, *args, **kwargs):
    """uproot's arrays of ``path``'s tree ``events``, the file closed after (warnings are errors:
    a file left open is a ResourceWarning where the garbage collector finds it)."""
    with uproot.open(path) as f:
        return f["events"].arrays(*args, **kwargs)


class Muons(soa.Layout):
    p = soa.vector(np.float32, 3)
    E = soa.column(np.float32)
    charge = soa.column(np.int8)  # int32 in the file: values checked on the way in


MUON_BRANCHES = {"p": ("Muon_Px", "Muon_Py", "Muon_Pz"), "E": "Muon_E", "charge": "Muon_Charge"}


class Dimuon(soa.Layout):
    px1 = soa.column(np.float64)
    E1 = soa.column(np.float64)
    Q1 = soa.column(np.int32)


def host_of(coll, offsets, queue):
    queue.wait()
    if coll.device.is_host_memory:
        return coll, offsets
    h = coll.to_host(queue)
    queue.wait()
    return h, pk.offsets_to_host(offsets, queue)


def test_hzz_muons(queue):
    coll, offsets = pk.read_root(HZZ, "events", Muons, queue, branches=MUON_BRANCHES)
    h, off = host_of(coll, offsets, queue)
    ref = _arrays(HZZ, ["Muon_Px", "Muon_Pz", "Muon_E", "Muon_Charge"])
    assert len(off) == 2421 + 1 and off[-1] == coll.size == ak.sum(ak.num(ref.Muon_Px))
    np.testing.assert_array_equal(off, np.concatenate([[0], np.cumsum(ak.num(ref.Muon_Px))]))
    np.testing.assert_array_equal(h.p[:, 0], ak.flatten(ref.Muon_Px).to_numpy())
    np.testing.assert_array_equal(h.p[:, 2], ak.flatten(ref.Muon_Pz).to_numpy())
    np.testing.assert_array_equal(h.charge, ak.flatten(ref.Muon_Charge).to_numpy())


def test_zmumu_flat(queue):
    coll, offsets = pk.read_root(
        ZMUMU, "events", Dimuon, queue, branches={"px1": "px1", "E1": "E1", "Q1": "Q1"}, entry_start=100, entry_stop=300
    )
    h, off = host_of(coll, offsets, queue)
    ref = _arrays(ZMUMU, ["px1", "Q1"], entry_start=100, entry_stop=300, library="np")
    assert coll.size == 200 and off.tolist() == list(range(201))
    np.testing.assert_array_equal(h.px1, ref["px1"])
    np.testing.assert_array_equal(h.Q1, ref["Q1"])


def test_chunks_cover_the_file():
    q = pk.Queue(pk.device("cpu_serial"))
    chunks = pk.root_chunks(HZZ, "events", 1000)
    assert [(c.entry_start, c.entry_stop) for c in chunks] == [(0, 1000), (1000, 2000), (2000, 2421)]
    parts = [
        ak.to_list(pk.to_awkward(c, o, fields=MUON_BRANCHES))
        for c, o, _ in pk.iterate_root(HZZ, "events", Muons, q, entries_per_chunk=1000, branches=MUON_BRANCHES)
    ]
    whole = pk.to_awkward(*pk.read_root(HZZ, "events", Muons, q, branches=MUON_BRANCHES), fields=MUON_BRANCHES)
    assert sum(parts, []) == ak.to_list(whole)


def test_chunks_end_at_entry_stop():
    """The last chunk ends at ``entry_stop``, not at the file's end (nor a whole chunk past it)."""
    chunks = pk.root_chunks(HZZ, "events", 1000, entry_start=500, entry_stop=2100)
    assert [(c.entry_start, c.entry_stop) for c in chunks] == [(500, 1500), (1500, 2100)]
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    _, offsets = chunks[-1].read(Muons, q, MUON_BRANCHES)
    assert len(offsets) - 1 == 600


def test_rntuple(tmp_path, queue):
    path = tmp_path / "muons.root"
    data = ak.Array({"pt": [[1.0, 2.0], [], [3.0]], "q": [[1, -1], [], [1]]})
    with uproot.recreate(path) as f:
        f.mkrntuple("ntuple", data)

    class PtQ(soa.Layout):
        pt = soa.column(np.float32)
        q = soa.column(np.int8)

    coll, offsets = pk.read_root(path, "ntuple", PtQ, queue)
    assert ak.to_list(pk.to_awkward(coll, offsets, queue=queue)) == ak.to_list(ak.zip({"pt": data.pt, "q": data.q}))


# ---------------------------------------------------------------------- errors
def test_missing_branch_named():
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with raises_name(r"no branch 'Muon_Pt' \(column 'E', did you mean 'Muon_P[xyz]'\?\)"):
        pk.read_root(HZZ, "events", Muons, q, branches={**MUON_BRANCHES, "E": "Muon_Pt"})


def test_missing_tree_named():
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with raises_name(r"no tree 'Events' \(did you mean 'events'\?\); it holds \['events'\]"):
        pk.read_root(HZZ, "Events", Muons, q, branches=MUON_BRANCHES)


def test_not_a_root_file(tmp_path):
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    bad = tmp_path / "events.root"
    bad.write_text("run,event\n1,2\n")
    with pytest.raises(pk.NotARootFile, match="is not a ROOT file"):
        pk.read_root(bad, "events", Muons, q)
    with raises_root(pk.FileNotFound, FileNotFoundError, r"no such ROOT file: .*absent\.root; give the path of a ROOT"):
        pk.read_root(tmp_path / "absent.root", "events", Muons, q)
    # a directory (``alpyka demo --input /data``) was open()'s bare "[Errno 21] Is a directory"
    with pytest.raises(pk.NotARootFile, match=r"is a directory, not a ROOT file; give the path of a ROOT file"):
        pk.read_root(tmp_path, "events", Muons, q)
    # starts like a ROOT file (/etc/passwd does: "root:x:0:0"), but uproot cannot read it: the
    # error is still one line (the command line prints it as it is)
    fake = tmp_path / "passwd.root"
    fake.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(pk.NotARootFile, match="uproot cannot read it as a ROOT file") as info:
        pk.read_root(fake, "events", Muons, q)
    assert "\n" not in str(info.value)


def test_unsafe_dtype_from_file():
    class Narrow(soa.Layout):
        E = soa.column(np.int16)  # energies are fractional floats in the file

    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with pytest.raises(ValueError, match=r"column 'E'.*field 'Muon_E'.*not a whole number"):
        pk.read_root(HZZ, "events", Narrow, q, branches={"E": "Muon_E"})


def test_branches_of_different_objects_refused():
    class Mixed(soa.Layout):
        mu = soa.column(np.float32)
        jet = soa.column(np.float32)

    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with pytest.raises(
        ValueError,
        match=r"offsets do not match: event \d+ has \d+ rows in field 'Muon_E' but \d+ "
        r"in 'Jet_E'",
    ):
        pk.read_root(HZZ, "events", Mixed, q, branches={"mu": "Muon_E", "jet": "Jet_E"})


# ---------------------------------------------------------------------- entry ranges
@pytest.mark.parametrize(
    "start, stop, want",
    [
        (-100, None, (2321, 2421)),  # negative counts from the end, as uproot
        (None, -20, (0, 2401)),
        (-100, -50, (2321, 2371)),
        (2000, 10_000, (2000, 2421)),  # clamped to the file
        (-10_000, 5, (0, 5)),
        (300, 100, (300, 300)),  # stop before start: nothing
    ],
)
def test_entry_bounds_follow_uproot(start, stop, want):
    chunks = pk.root_chunks(HZZ, "events", 50, entry_start=start if start is not None else 0, entry_stop=stop)
    got = (chunks[0].entry_start, chunks[-1].entry_stop) if chunks else (want[0], want[0])
    assert got == want
    assert sum(c.entry_stop - c.entry_start for c in chunks) == want[1] - want[0]
    arrays = _arrays(HZZ, ["Muon_E"], entry_start=start, entry_stop=stop)
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    coll, off = pk.read_root(HZZ, "events", Muons, q, branches=MUON_BRANCHES, entry_start=start, entry_stop=stop)
    assert len(off) - 1 == len(arrays) == want[1] - want[0]


@pytest.mark.parametrize("bad", [1.5, "10", True, np.float64(3)])
def test_entry_bounds_must_be_integers(bad):
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with raises_type("entry_start must be an integer"):
        pk.read_root(HZZ, "events", Muons, q, branches=MUON_BRANCHES, entry_start=bad)
    with raises_type("entry_stop must be an integer"):
        pk.root_chunks(HZZ, "events", 10, entry_stop=bad)


# ---------------------------------------------------------------------- damaged files
def _damaged(tmp_path, how):
    data = bytearray(Path(HZZ).read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:  # overwrite the header of Muon_E's first basket (this file's baskets are not
        # compressed: damage inside their numbers cannot be told from data, ROOT has no checksums)
        with uproot.open(HZZ) as f:
            seek = int(f["events"]["Muon_E"].member("fBasketSeek")[0])
        data[seek : seek + 64] = b"\xff" * 64
    path = tmp_path / f"{how}.root"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how", ["truncated", "corrupt"])
def test_a_damaged_file_names_the_file_and_the_branch(tmp_path, how):
    path = _damaged(tmp_path, how)
    q = pk.Queue(pk.device("cpu_serial"), blocking=True)
    with pytest.raises(pk.NotARootFile) as info:
        pk.read_root(path, "events", Muons, q, branches=MUON_BRANCHES)
    msg = str(info.value)
    assert str(path) in msg and "truncated or corrupt" in msg and "\n" not in msg, msg
    if isinstance(info.value, pk.CorruptRootFile) and "branch" in msg:
        assert any(f"'{b}'" in msg for b in ("Muon_Px", "Muon_Py", "Muon_Pz", "Muon_E", "Muon_Charge")), msg


def test_split_branches_with_dots(tmp_path, queue):
    """Delphes-style branches (Jet.PT, Jet.Eta), which uproot's arrays() nests as records."""
    path = tmp_path / "delphes.root"
    jets = ak.zip({"PT": ak.Array([[40.0, 25.5], [], [31.0]]), "Eta": ak.Array([[0.5, -1.0], [], [2.0]])})
    with uproot.recreate(path) as f:
        f["Delphes"] = {"Jet": jets}
    with uproot.open(path) as f:
        assert "Jet.PT" in f["Delphes"].keys()

    class Jets(soa.Layout):
        pt = soa.column(np.float32)
        eta = soa.column(np.float32)

    coll, offsets = pk.read_root(
        path, "Delphes", Jets, queue, branches={"pt": "Jet.PT", "eta": "Jet.Eta"}, entry_start=1
    )
    h, off = host_of(coll, offsets, queue)
    assert off.tolist() == [0, 0, 1]
    np.testing.assert_array_equal(h.pt, [31.0])
    np.testing.assert_array_equal(h.eta, [2.0])
