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

    why = {"prefix": "not where its end record says", "comment": "bytes follow its end", "zip64_locator": "zip64"}
    text = _refused(Model, path, why[variant])
    assert "torch's zip reader and Python's zipfile" in text and "nothing put in front of it" in text, text
    _refused(lambda p: load_model(p, "cpu"), path, why[variant])  # alpyka serve's loader (the child)
    _refused(aot.load, path, why[variant])
    decls, reason = inputs_from_model(str(path), batching=True)  # alpyka serve's parent
    assert decls == [] and why[variant] in reason, reason
    assert not marker.exists(), "the archive's pickle ran"
    _torch_runs(path, aot=kind == "aot")
    assert marker.exists(), f"{variant}: torch did not run the payload; the test archive is not an attack"


def _standard(entries) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
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
    return _standard(evil + [(name, config)])  # zipfile keeps the last one, torch may take either


def _duplicate_case(benign, marker):
    config = next(d for n, d in benign if n.endswith("model_weights_config.json"))
    name = next(n for n, _ in benign if n.endswith("model_weights_config.json"))
    return _standard(_evil(benign, marker) + [(name.replace("/data/weights/", "/DATA/WEIGHTS/"), config)])


def _trailing(benign, marker):
    return _standard(benign) + b"\0" * 64


def _uncounted(benign, marker):
    data = bytearray(_standard(benign))
    count, _, _ = _locate(bytes(data))
    struct.pack_into("<2H", data, len(data) - 22 + 8, count - 1, count - 1)  # torch reads one entry less
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


LAYOUTS = {
    "duplicate_name": (_duplicate, "name the same file for torch"),
    "duplicate_name_other_case": (_duplicate_case, "name the same file for torch"),
    "trailing_bytes": (_trailing, "64 bytes follow its end-of-central-directory record"),
    "entries_not_counted": (_uncounted, "its end record counts"),
    "gap_before_the_directory": (_gap, "32 bytes after entry"),
    "local_header_name": (_renamed_local, "local header disagrees with the central directory"),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_archives_laid_out_otherwise_than_torch_writes_are_refused(tmp_path, exported_files, case):
    make, why = LAYOUTS[case]
    marker = tmp_path / "ran"
    path = tmp_path / f"{case}.pt2"
    path.write_bytes(make(_entries(exported_files["mlp.pt2"]), marker))
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
    script = tmp_path / "mlp.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(3, 2)), script)
    assert Model(str(script)).kind == "jit"
    rewritten = tmp_path / "rewritten.pt2"
    rewritten.write_bytes(_standard(_entries(exported_files["mlp.pt2"])))
    assert Model(str(rewritten)).kind == "exported"
