"""A ``.pt2`` (or any model zip) that torch's zip reader would read otherwise than alpyka's scan is
refused before torch opens it: an evil archive (a weight torch unpickles, the payload makes a
directory) hidden in front of a benign one, in the end record's comment, or behind a zip64
locator that points past the record Python reads; duplicate names, trailing bytes, entries the
end record does not count, gaps and local headers that disagree with the directory. The control
of each attack: Python's zipfile sees only the benign archive and torch itself runs the payload.
Benign files (torch.export programs, AOTInductor packages, TorchScript, Python-written zips)
still load."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from alpyka_testing import zip_attacks
from inference import Model, ModelFileError


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _entries(path: str) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(n, zf.read(n)) for n in zf.namelist()]


def _evil(benign: list[tuple[str, bytes]], marker: Path) -> list[tuple[str, bytes]]:
    """The benign entries with the first weight marked ``use_pickle`` and pointed at the payload."""
    root, out = benign[0][0].split("/", 1)[0], []
    for name, data in benign:
        if name.endswith("/data/weights/model_weights_config.json"):
            config = json.loads(data)
            next(iter(config["config"].values())).update(use_pickle=True, path_name="weight_evil")
            data = json.dumps(config).encode()
            out.append((f"{root}/data/weights/weight_evil", pickle.dumps(_Payload(marker))))
        out.append((name, data))
    return out


def _torch_runs(path: Path, aot: bool) -> None:
    """The control: what torch itself does with the file."""
    try:
        (torch._inductor.aoti_load_package if aot else torch.export.load)(str(path))
    except Exception:
        pass


def _refused(call, path: Path, why: str) -> str:
    with pytest.raises(ModelFileError) as err:
        call(str(path))
    text = str(err.value)
    assert str(path) in text and why in text, text
    return text


@pytest.mark.parametrize("variant", sorted(zip_attacks.VARIANTS))
@pytest.mark.parametrize("kind", ["exported", "aot"])
def test_an_archive_torch_reads_otherwise_is_refused(tmp_path, exported_files, aot_package, variant, kind):
    from inference import aot
    from inference.serving._child import load_model
    from inference.serving._spec import inputs_from_model

    marker = tmp_path / "ran"
    program = _entries(exported_files["mlp.pt2"])
    evil = _evil(program, marker)
    if kind == "aot":  # torch's package loader loads the programs a package holds, unpickling as they say
        root, meta = evil[0][0].split("/", 1)[0], json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
        evil.append((f"{root}/data/aotinductor/model/x.wrapper_metadata.json", meta))
    benign = program if kind == "exported" else _entries(aot_package)
    path = tmp_path / f"{variant}.pt2"
    path.write_bytes(zip_attacks.VARIANTS[variant](evil, benign))
    with zipfile.ZipFile(path) as zf:  # what the scan used to read: the benign archive, whole
        assert not any("weight_evil" in n for n in zf.namelist()) and zf.testzip() is None

    why = {
        "prefix": "its central directory is not where its end record says",
        "comment": "bytes follow its end-of-central-directory record",
        "zip64_locator": "its zip64 locator points at offset",
    }
    text = _refused(Model, path, why[variant])
    assert "torch's zip reader and Python's zipfile" in text and "nothing put in front of it" in text, text
    _refused(lambda p: load_model(p, "cpu"), path, why[variant])  # alpyka serve's loader (the child)
    _refused(aot.load, path, why[variant])
    decls, reason = inputs_from_model(str(path), batching=True)  # alpyka serve's parent
    assert decls == [] and why[variant] in reason, reason
    assert not marker.exists(), "the archive's pickle ran"
    _torch_runs(path, aot=kind == "aot")
    assert marker.exists(), f"{variant}: torch did not run the payload; the test archive is not an attack"


def _standard(entries, compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def _locate(data: bytes) -> tuple[int, int, int]:
    """(entries, central directory size, its offset) of a plain archive."""
    _, _, _, _, count, size, offset, _ = struct.unpack_from("<4s4H2LH", data, len(data) - 22)
    return count, size, offset


def _duplicate(benign, marker):
    evil = _evil(benign, marker)
    config = next(d for n, d in benign if n.endswith("model_weights_config.json"))
    name = next(n for n, _ in benign if n.endswith("model_weights_config.json"))
    with pytest.warns(UserWarning, match="Duplicate name"):  # the point: zipfile says so, and writes it
        return _standard(evil + [(name, config)])  # zipfile keeps the last one, torch may take either


def _duplicate_case(benign, marker):
    config = next(d for n, d in benign if n.endswith("model_weights_config.json"))
    name = next(n for n, _ in benign if n.endswith("model_weights_config.json"))
    return _standard(_evil(benign, marker) + [(name.replace("/data/weights/", "/DATA/WEIGHTS/"), config)])


def _trailing(benign, marker):
    return _standard(benign) + b"\0" * 64


def _counted(delta):
    def change(benign, marker):
        """The end record counts ``delta`` entries more than the directory holds (torch reads
        as many as it counts, Python's zipfile as many as the directory's size holds)."""
        data = bytearray(_standard(benign))
        count, _, _ = _locate(bytes(data))
        struct.pack_into("<2H", data, len(data) - 22 + 8, count + delta, count + delta)
        return bytes(data)

    return change


def _prefix_absolute(benign, marker):
    """Bytes in front of an archive whose offsets all count from the start of the file (both
    readers agree here; the layout still has bytes no entry owns)."""
    local, central = zip_attacks.records(benign, base=64)
    cd = b"".join(central)
    return b"PK" + b"\0" * 62 + local + cd + zip_attacks.end(len(central), len(cd), 64 + len(local))


def _two_roots(benign, marker):
    """One entry again under another root folder: torch drops the root when it looks names up."""
    name, data = next((n, d) for n, d in benign if n.endswith("model_weights_config.json"))
    return _standard(benign + [("other/" + name.split("/", 1)[1], data)])


def _flipped_byte(benign, marker):
    data = bytearray(_standard(benign))
    data[data.index(b'"config"') + 2] ^= 0x20  # a byte of the weights config's data
    return bytes(data)


def _gap(benign, marker):
    """Bytes between the entries and the central directory that no entry owns."""
    data = _standard(benign)
    count, size, offset = _locate(data)
    head, cd = data[:offset], data[offset : offset + size]
    return head + b"\0" * 32 + cd + zip_attacks.end(count, size, offset + 32)


def _renamed_local(benign, marker):
    """A local header whose name is not its directory record's."""
    data = bytearray(_standard(benign))
    at = data.index(b"data/weights/model_weights_config.json")
    data[at : at + 4] = b"DATA"
    return bytes(data)


def _bad_descriptor(benign, marker, torch_written=None):
    """torch writes each entry's CRC and sizes after its data (a data descriptor): one that says
    otherwise than the directory."""
    data = bytearray(torch_written)
    data[data.index(b"PK\x07\x08") + 4] ^= 0xFF
    return bytes(data)


def _climbing_name(benign, marker):
    """An entry named to climb out of the folder a package is unpacked into."""
    root = benign[0][0].split("/", 1)[0]
    return _standard(benign + [(f"{root}/data/aotinductor/../../../escaped.so", b"\x7fELF")])


LAYOUTS = {
    "duplicate_name": (_duplicate, "name the same file for torch"),
    "duplicate_name_other_case": (_duplicate_case, "name the same file for torch"),  # also for TorchScript below
    "trailing_bytes": (_trailing, "64 bytes follow its end-of-central-directory record"),
    "entries_not_counted": (_counted(-1), "its central directory holds more than the"),
    "entries_counted_twice": (_counted(+1), "entries, its end record counts"),
    "bytes_in_front": (_prefix_absolute, "64 bytes in front of its first entry belong to no entry"),
    "same_entry_under_two_roots": (_two_roots, "the archive was not written by torch.export.save"),
    "data_descriptor": (_bad_descriptor, "data descriptor disagrees with the central directory"),
    "name_with_dot_dot": (_climbing_name, "is empty, absolute, has '..', a backslash or control characters"),
    "damaged_entry": (_flipped_byte, "is damaged (CRC or size mismatch); the file is truncated or corrupt"),
    "gap_before_the_directory": (_gap, "32 bytes after entry"),
    "local_header_name": (_renamed_local, "local header disagrees with the central directory"),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_archives_laid_out_otherwise_than_torch_writes_are_refused(tmp_path, exported_files, case):
    make, why = LAYOUTS[case]
    marker = tmp_path / "ran"
    path = tmp_path / f"{case}.pt2"
    torch_written = Path(exported_files["mlp.pt2"]).read_bytes()
    benign = _entries(exported_files["mlp.pt2"])
    path.write_bytes(make(benign, marker, torch_written) if make is _bad_descriptor else make(benign, marker))
    _refused(Model, path, why)
    assert not marker.exists(), "the archive's pickle ran"


def test_torch_written_and_python_written_archives_still_load(tmp_path, exported_files, aot_package):
    """torch.export.save (data descriptors, zip64 end records), AOTInductor packages (through
    aot.load: the bytes checked are the bytes torch loads), TorchScript, a zipfile rewrite."""
    from inference import aot
    from inference._loading import read_exported

    assert Model(exported_files["mlp.pt2"]).kind == "exported"
    assert isinstance(read_exported(exported_files["mlp.pt2"]), torch.export.ExportedProgram)
    x = torch.randn(4, 3)
    assert aot.load(aot_package)(x).shape == (4, 2)
    script = tmp_path / "modèle à 1.pt"  # torch names the archive's root folder after the file (UTF-8)
    torch.jit.save(torch.jit.script(torch.nn.Linear(3, 2)), script)
    assert Model(str(script)).kind == "jit"
    program = tmp_path / "modèle à 1.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(3, 2), (x,)), program)
    assert Model(str(program)).kind == "exported"
    for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):  # the configs are read inflated
        rewritten = tmp_path / f"rewritten{compression}.pt2"
        rewritten.write_bytes(_standard(_entries(exported_files["mlp.pt2"]), compression))
        assert Model(str(rewritten)).kind == "exported"


@pytest.mark.parametrize("kind", ["exported", "aot"])
def test_a_file_swapped_after_the_check_is_not_what_torch_loads(
    tmp_path, monkeypatch, exported_files, aot_package, kind
):
    """The loaders read a file once and give torch those bytes: an evil archive written over the
    file right after the check (here: by the check's own return) is never read."""
    import inference._loading as loading
    from inference import aot

    marker = tmp_path / "ran"
    program = _entries(exported_files["mlp.pt2"])
    evil = _evil(program, marker)
    if kind == "aot":
        root, meta = evil[0][0].split("/", 1)[0], json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
        evil.append((f"{root}/data/aotinductor/model/x.wrapper_metadata.json", meta))
    path = tmp_path / "model.pt2"
    path.write_bytes(Path(exported_files["mlp.pt2"] if kind == "exported" else aot_package).read_bytes())
    checked = loading.check_pt2_pickles

    def check_then_swap(*args):
        checked(*args)
        path.write_bytes(_standard(evil))

    monkeypatch.setattr(loading, "check_pt2_pickles", check_then_swap)
    if kind == "exported":
        assert isinstance(loading.read_exported(path), torch.export.ExportedProgram)
    else:
        assert aot.load(path)(torch.randn(4, 3)).shape == (4, 2)
    assert not marker.exists(), "torch read the file again after the check"
    _torch_runs(path, aot=kind == "aot")
    assert marker.exists(), "the swapped-in archive is not an attack"


def test_duplicate_names_are_refused_in_torchscript_too(tmp_path):
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(3, 2)), buf)
    entries = _entries(buf)
    code = next(n for n, _ in entries if "/code/" in n)
    path = tmp_path / "twice.pt"
    path.write_bytes(_standard(entries + [(code.upper(), b"")]))
    text = _refused(Model, path, "name the same file for torch")
    assert "torch's zip reader and Python's zipfile" in text, text


def test_a_parse_that_zipfile_disagrees_with_is_refused(tmp_path, monkeypatch, exported_files):
    """The backstop behind the layout parse: were it to miss an entry, Python's zipfile (which
    lists every entry) would not agree and the archive is refused."""
    import inference._loading as loading

    parse = loading.read_layout
    monkeypatch.setattr(loading, "read_layout", lambda buf: parse(buf)[:-1])
    _refused(Model, Path(exported_files["mlp.pt2"]), "Python's zipfile reads other entries from it")


def test_torchscript_that_torch_reads_otherwise_is_refused(tmp_path):
    """TorchScript runs no pickle on load, but the scan's reading still decides what is served:
    a benign-looking file whose other module torch would load is refused by Model and by serve."""
    from inference.serving._child import load_model

    def script(scale: float) -> list[tuple[str, bytes]]:
        layer = torch.nn.Linear(3, 2)
        with torch.no_grad():
            layer.weight.fill_(scale)
        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(layer), buf)
        return _entries(buf)

    path = tmp_path / "model.pt"
    path.write_bytes(zip_attacks.prefixed(script(-1.0), script(1.0)))
    seen = torch.jit.load(io.BytesIO(_standard(_entries(path))))  # the scan's reading: the benign module
    assert float(seen.weight[0, 0].detach()) == 1.0  # detached: a scalar of a grad tensor warns
    why = "its central directory is not where its end record says"
    _refused(Model, path, why)
    _refused(lambda p: load_model(p, "cpu"), path, why)
    assert float(torch.jit.load(str(path)).weight[0, 0].detach()) == -1.0  # the control: torch reads the other one
