"""Recognising and safely loading model files: TorchScript (JIT, legacy), ``torch.export``
programs and AOTInductor packages (both ``.pt2``, told apart by their zip entries), ONNX models,
and state dicts (weights only).

Nothing here unpickles arbitrary Python objects:

- TorchScript archives are read by ``torch.jit.load``, whose unpickler rebuilds TorchScript
  types and tensors only (it imports no Python globals);
- ``.pt2`` ``torch.export`` programs (``torch.export.save``) hold a JSON graph and raw weights,
  read by ``torch.export.load`` and run without compiling. ``torch.export.load`` (and
  ``aoti_load_package``, which loads the programs a package holds) would unpickle with
  ``weights_only=False`` any weight or constant its payload configs mark ``use_pickle``, custom
  objects, legacy ``.pt`` entries and example inputs the weights-only loader refuses: an archive
  holding any of them is refused before torch reads it (:func:`check_pt2_pickles`);
- ONNX files are protobuf, read by ONNX Runtime (no pickle); external data only from files in
  the model's folder (``inference._onnx_files.external_data_files``);
- ``.pt2`` AOTInductor packages hold compiled native code, metadata and raw weights and are
  read by ``torch._inductor.aoti_load_package`` (checked as programs are: it loads the programs
  a package holds). Loading one runs its native code: load packages you built or trust, as with
  any shared library;
- a ``torch.save`` file is read only with ``torch.load(weights_only=True)``: a state dict is
  accepted by :func:`load_state_dict`; a pickled ``nn.Module`` is refused as a Model source.

Every zip archive (``.pt2``, TorchScript, ``torch.save``) is read only when its layout leaves
torch's zip reader and Python's ``zipfile`` no room to see different entries
(``inference._zip_layout``: no prefix, no trailing bytes, the directory and zip64 records where
the end record and the locator say, no gaps, no duplicate names); loaders read a file once and
give torch the bytes they checked.
"""

from __future__ import annotations

import contextlib
import io
import json
import mmap
import os
import pickle
import struct
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portable import AlpykaError, FileNotFound

from ._zip_layout import Entry, ZipLayoutError, read_entry, read_layout

if TYPE_CHECKING:
    import torch


class ModelFileError(AlpykaError, ValueError):
    """A model file that is truncated or of a format alpyka does not load (a missing one is a
    ``pk.FileNotFound``)."""


_GIVE_A_MODEL = "give the path of a .pt2, .onnx or TorchScript file"


_PICKLED_MODULE_HINT = (
    "loading it would unpickle arbitrary Python objects (running code from the file). Save the "
    "model with inference.export(module, example_inputs, 'model.pt2') (or 'model.onnx'), compile it with "
    "inference.aot.compile(module, example_inputs, 'model.pt2'), or build the module in Python and "
    "pass it to Model(module) after module.load_state_dict(inference.load_state_dict(path))"
)


_AS_WRITTEN = (
    "load the file exactly as torch wrote it (inference.export, inference.aot.compile, "
    "torch.export.save, torch.jit.save): nothing put in front of it, appended to it or edited in it"
)


class _Archive:
    """A zip archive whose layout both zip readers read alike (:func:`_open_archive`)."""

    def __init__(self, buf: Any, entries: list[Entry]) -> None:
        self._buf, self._by_name = buf, {e.name: e for e in entries}
        self.names = [e.name for e in entries]

    def read(self, name: str) -> bytes:
        return read_entry(self._buf, self._by_name[name])


def _zipfile_agrees(buf: Any, entries: list[Entry]) -> None:
    """Python's zipfile sees the entries :func:`read_layout` read, at the same places."""
    fp = io.BytesIO(buf) if isinstance(buf, bytes) else buf
    with zipfile.ZipFile(fp) as zf:
        theirs = [(i.filename, i.header_offset, i.compress_size, i.file_size) for i in zf.infolist()]
    if theirs != [(e.name, e.header, e.compressed, e.size) for e in entries]:
        raise ZipLayoutError("Python's zipfile reads other entries from it than torch's reader would")


def _checked_entries(path: Path, buf: Any) -> list[Entry]:
    try:
        entries = read_layout(buf)
        for e in entries:
            read_entry(buf, e, keep=False)
        _zipfile_agrees(buf, entries)
    except ZipLayoutError as exc:
        if exc.damaged:
            raise ModelFileError(f"{path}: {exc}; the file is truncated or corrupt") from None
        raise ModelFileError(
            f"{path}: {exc}. torch's zip reader and Python's zipfile could read different "
            f"entries from such an archive, so it is refused before torch opens it: {_AS_WRITTEN}"
        ) from None
    except (zipfile.BadZipFile, struct.error, EOFError) as exc:
        raise ModelFileError(f"{path}: not a complete zip archive ({exc}); the file is truncated or damaged") from None
    return entries


@contextlib.contextmanager
def _open_archive(path: Path, data: bytes | None = None) -> Iterator[_Archive]:
    """The zip archive at ``path`` (or its bytes ``data``, read once by the caller), refused with a
    :class:`ModelFileError` unless torch's zip reader and Python's zipfile would read the same
    entries from it (``inference._zip_layout``); every entry's CRC is checked."""
    with contextlib.ExitStack() as stack:
        buf: Any = data
        if buf is None:
            try:
                fh = stack.enter_context(open(path, "rb"))
                buf = stack.enter_context(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
            except (OSError, ValueError) as exc:
                raise ModelFileError(f"{path}: cannot be read as a zip archive ({exc})") from None
        yield _Archive(buf, _checked_entries(path, buf))


def _looks_like_onnx(p: Path, head: bytes) -> bool:
    """An ONNX ModelProto starts with field 1 (ir_version, a varint: byte 0x08); the suffix counts too."""
    return p.suffix.lower() == ".onnx" or head[:1] == b"\x08"


def detect_format(path: str | os.PathLike, data: bytes | None = None) -> str:
    """``"jit"``, ``"aot"``, ``"exported"`` (torch.export.save), ``"onnx"``, ``"torch.save"`` or
    ``"pickle"``, by content (``data``: the file's bytes, read once by a caller that hands those
    same bytes to torch); raises ``pk.FileNotFound`` for a missing file, :class:`ModelFileError` for empty, truncated or
    unknown files, for zip archives torch's reader and Python's zipfile could read differently and for
    ``.pt2`` archives from which torch would unpickle anything (:func:`check_pt2_pickles`)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFound(f"model file {str(p)!r} does not exist; {_GIVE_A_MODEL}")
    if p.is_dir():
        raise ModelFileError(f"{p} is a directory; give a .pt2, .onnx or TorchScript file")
    if data is None:
        with open(p, "rb") as fh:
            head = fh.read(4)
    else:
        head = data[:4]
    if not head:
        raise ModelFileError(f"{p} is empty")
    if head[:1] == b"\x80":  # a pickle stream (the legacy torch.save format)
        return "pickle"
    if head[:2] != b"PK":
        if _looks_like_onnx(p, head):
            return "onnx"  # ONNX Runtime validates it (a corrupt file fails there, named)
        raise ModelFileError(
            f"{p} is neither a zip archive (.pt2, TorchScript, torch.save), an ONNX model nor a "
            f"pickle (starts with {head!r}); is it a TensorFlow file?"
        )
    with _open_archive(p, data) as archive:
        return _zip_format(p, archive)


def _zip_format(p: Path, archive: _Archive) -> str:
    names = archive.names
    if any("/aotinductor/" in n or n.startswith("aotinductor/") for n in names):
        check_pt2_pickles(p, archive)
        return "aot"
    if any(n.endswith("/archive_format") for n in names) or any("/models/" in n and n.endswith(".json") for n in names):
        check_pt2_pickles(p, archive)
        return "exported"
    if any("/code/" in n for n in names) and any(n.endswith("constants.pkl") for n in names):
        return "jit"
    if any(n.endswith("data.pkl") for n in names):
        return "torch.save"
    if p.suffix.lower() == ".pt2":
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ModelFileError(
            f"{p}: a zip archive that is neither a torch.export program (torch.export.save: "
            f"models/*.json) nor an AOTInductor package (aotinductor/...); its entries: {shown}"
        )
    raise ModelFileError(f"{p}: a zip archive that is neither TorchScript, a .pt2 package nor a torch.save file")


# --------------------------------------------------------------------------- .pt2 archives: no pickles
#: where torch.export.save puts things in a .pt2 archive (torch.export.pt2_archive.constants)
_PT2_LAYOUT = {
    "models": "models/{}.json",
    "weights_config": "data/weights/{}_weights_config.json",
    "constants_config": "data/constants/{}_constants_config.json",
    "sample_inputs": "data/sample_inputs/{}.pt",
    "tensor_constant": "tensor_",
}
#: entries torch reads as pickles by their name (legacy weights/constants, the torch 2.7 zip layout)
_PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle")
_REEXPORT = (
    "re-export the model with plain tensors as weights: inference.export(module, example_inputs, "
    "'model.pt2') (torch.export.save) or inference.aot.compile(...) write weights as raw bytes "
    "and nothing torch unpickles"
)


def _pt2_layout() -> dict[str, str]:
    """The installed torch's .pt2 entry names (the defaults above where torch does not say)."""
    try:
        from torch.export.pt2_archive import constants as c
    except ImportError:  # an older torch
        return _PT2_LAYOUT
    return {
        "models": c.MODELS_FILENAME_FORMAT,
        "weights_config": c.WEIGHTS_CONFIG_FILENAME_FORMAT,
        "constants_config": c.CONSTANTS_CONFIG_FILENAME_FORMAT,
        "sample_inputs": c.SAMPLE_INPUTS_FILENAME_FORMAT,
        "tensor_constant": c.TENSOR_CONSTANT_FILENAME_PREFIX,
    }


def _pickled(path: Path, entry: str, what: str) -> ModelFileError:
    return ModelFileError(
        f"{path}: archive entry {entry!r} {what}; torch would unpickle it (weights_only=False), "
        f"running any code it holds, so the archive is refused: {_REEXPORT}"
    )


def _fits(rel: str, fmt: str) -> bool:
    """Whether the lower-cased entry name ``rel`` is ``fmt`` (``"dir/{}.json"``) for some model name."""
    head, tail = fmt.lower().split("{}")
    return rel.startswith(head) and rel.endswith(tail) and len(rel) > len(head) + len(tail)


def _check_payload_config(path: Path, zf: _Archive, entry: str, constants: bool, tensor_prefix: str) -> None:
    """Refuse a weights/constants config with an entry torch unpickles: ``use_pickle`` set (any
    true value, as torch tests it), or a constant that is not a raw tensor (custom objects)."""
    try:
        config = json.loads(zf.read(entry))["config"]
        items = [(str(fqn), meta, str(meta.get("path_name", ""))) for fqn, meta in config.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelFileError(
            f"{path}: archive entry {entry!r} is not a payload config ({type(exc).__name__}: "
            f"{exc}); the file is damaged or not written by torch.export.save"
        ) from None
    for fqn, meta, name in items:
        if meta.get("use_pickle"):
            raise _pickled(path, entry, f"marks {fqn!r} ({name}) use_pickle")
        if constants and not name.startswith(tensor_prefix):
            raise _pickled(path, entry, f"makes constant {fqn!r} a pickled object ({name!r}, not a raw tensor)")


def _check_sample_inputs(path: Path, zf: _Archive, entry: str) -> None:
    """The example inputs (a torch.save of tensors that torch.export.save always writes) must load
    with the weights-only loader, torch's first try; where it fails torch unpickles them fully."""
    data = zf.read(entry)
    if not data:  # torch reads an empty entry as no inputs
        return
    import torch

    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the weights-only loader raises many kinds
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _pickled(path, entry, f"holds example inputs that are not plain tensors ({text[:200]})") from None


def check_pt2_pickles(path: str | os.PathLike, archive: _Archive) -> None:
    """Refuse (:class:`ModelFileError`, naming the entry) a ``.pt2`` archive from which
    ``torch.export.load`` or ``aoti_load_package`` would unpickle anything with
    ``weights_only=False``: weights or constants marked ``use_pickle`` in a payload config,
    custom-object constants, legacy ``.pt``/``.pkl`` entries, example inputs the weights-only
    loader refuses. Entry names are compared without the archive's root folder and without case
    (torch's zip reader looks names up ignoring case): two entries differing only so are refused."""
    p, lay = Path(path), _pt2_layout()
    seen: dict[str, str] = {}
    for name in archive.names:
        rel = name.replace("\\", "/").split("/", 1)[-1].lower()
        if rel in seen:
            raise ModelFileError(
                f"{p}: archive entries {seen[rel]!r} and {name!r} name the same file for torch; "
                f"the archive was not written by torch.export.save: {_REEXPORT}"
            )
        seen[rel] = name
    head, tail = lay["models"].lower().split("{}")
    samples = {lay["sample_inputs"].lower().format(r[len(head) : -len(tail)]) for r in seen if _fits(r, lay["models"])}
    for rel, name in seen.items():
        if rel in samples:
            _check_sample_inputs(p, archive, name)
        elif rel.endswith(_PICKLE_SUFFIXES):
            raise _pickled(p, name, "is a pickle (a legacy torch.export layout)")
        elif _fits(rel, lay["weights_config"]) or _fits(rel, lay["constants_config"]):
            _check_payload_config(p, archive, name, _fits(rel, lay["constants_config"]), lay["tensor_constant"])


def load_state_dict(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, torch.Tensor]:
    """A state dict (``{name: tensor}``) saved with ``torch.save``, loaded with
    ``weights_only=True`` (no arbitrary objects are unpickled)."""
    fmt = detect_format(path)
    if fmt in ("jit", "aot", "exported", "onnx"):
        raise ModelFileError(f"{path} is a {fmt} model, not a state dict; load it with inference.Model")
    import torch

    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ModelFileError(f"{path} holds objects other than tensors: {_PICKLED_MODULE_HINT} ({exc})") from None
    except (EOFError, RuntimeError) as exc:
        raise ModelFileError(f"{path} could not be read ({exc}); the file is truncated or damaged") from None
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ModelFileError(f"{path} does not hold a state dict ({{name: tensor}}), got {type(obj).__name__}")
    return obj


def read_checked(path: str | os.PathLike) -> bytes:
    """A model file's bytes, read once; a zip archive is refused unless torch's zip reader and
    Python's zipfile read it alike (:func:`_open_archive`). Give torch these bytes, not the path."""
    data = read_file(path)
    if data[:2] == b"PK":
        with _open_archive(Path(path), data):
            pass
    return data


def read_torchscript(path: str | os.PathLike) -> bytes:
    """The bytes of a TorchScript archive (:func:`read_checked`), checked by loading it once on the CPU."""
    data = read_checked(path)
    try:
        jit_load(data, "cpu")
    except RuntimeError as exc:
        raise ModelFileError(f"{path}: TorchScript archive could not be loaded ({exc})") from None
    return data


def refuse(path: str | os.PathLike, fmt: str) -> ModelFileError:
    """The error for a file a Model cannot be made from."""
    if fmt == "torch.save":
        try:
            load_state_dict(path)
        except ModelFileError as exc:
            return ModelFileError(
                f"{path} is a pickled Python object (torch.save of a module?): {_PICKLED_MODULE_HINT} [{exc}]"
            )
        return ModelFileError(
            f"{path} is a state dict (weights only, no architecture): build the module "
            "in Python, module.load_state_dict(inference.load_state_dict(path)), then Model(module)"
        )
    return ModelFileError(f"{path} is a plain pickle file: {_PICKLED_MODULE_HINT}")


def jit_load(data: bytes | str | os.PathLike, map_location: Any, **kwargs: Any) -> Any:
    """``torch.jit.load`` from bytes or a path, without torch's TorchScript deprecation warning
    (the user chose a TorchScript file; the warning would repeat at every deployment)."""
    import torch

    source = io.BytesIO(data) if isinstance(data, bytes) else os.fspath(data)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
        return torch.jit.load(source, map_location=map_location, **kwargs)


def jit_save_bytes(module: Any) -> bytes:
    """A ScriptModule serialised to bytes (no deprecation warning, see :func:`jit_load`)."""
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
        torch.jit.save(module, buf)
    return buf.getvalue()


def read_file(path: str | os.PathLike) -> bytes:
    """The bytes of a model file, read once: what alpyka checks is what torch is given."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFound(f"model file {os.fspath(path)!r} does not exist; {_GIVE_A_MODEL}") from None
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot be read ({exc})") from None


def read_exported(path: str | os.PathLike) -> Any:
    """The ``torch.export`` program saved at ``path`` (``torch.export.load``), checked on load:
    the file is read once, and an archive that torch's zip reader could read otherwise than the
    scan, or from which torch would unpickle anything, is refused before torch is given those
    same bytes (:func:`check_pt2_pickles`)."""
    data = read_file(path)
    fmt = detect_format(path, data)
    if fmt != "exported":
        raise ModelFileError(f"{path}: not a torch.export program (it is {fmt!r}); load it with inference.Model")
    import torch

    try:
        return torch.export.load(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged archive
        raise ModelFileError(
            f"{path}: torch.export program could not be loaded ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}); the file is "
            "damaged or written by an incompatible torch"
        ) from None


def exported_module(program: Any, device: torch.device | str) -> torch.nn.Module:
    """A ``torch.export`` program as a module on ``device`` (the graph run as is: nothing compiled).

    ``program.module().to(device)`` moves the weights but not the devices burnt into the graph
    (``aten._assert_tensor_metadata(device=cpu)`` of a ``.to(dtype)``, factory calls'
    ``device=``): on CUDA that fails with "Tensor device mismatch! Expected: cpu, Got: cuda:0".
    torch's ``move_to_device_pass`` moves both, in place: it is given a copy (a save/load round
    trip; ``copy.deepcopy`` of a program warns on recent torch), so ``program`` serves every
    device. A torch without the pass gets ``module().to(device)``."""
    import torch

    device = torch.device(device)
    try:
        from torch.export.passes import move_to_device_pass
    except ImportError:  # an older torch
        module = program.module()
        return module if device.type == "cpu" else module.to(device)
    buf = io.BytesIO()
    torch.export.save(program, buf)
    buf.seek(0)
    return move_to_device_pass(torch.export.load(buf), device).module()
