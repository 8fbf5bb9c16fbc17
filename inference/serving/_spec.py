"""What ``serve`` hosts: model files with named, typed tensors and batching settings."""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from portable import ArgumentError, ArgumentTypeError, FileNotFound

from .._loading import ModelFileError, detect_format, jit_load, read_checked, read_exported
from .._onnx import OnnxProgram
from .._pipeline import PipelineDeclaration, as_pipeline, derive_config
from .._tensor_desc import TensorDesc
from ._pipelines import load_reference

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
IO_EXTRA_FILE = "alpyka_io.json"  # optional TorchScript extra file: {"inputs": [...], "outputs": [...]}
MODEL_SUFFIXES = (".pt", ".pt2", ".ts", ".jit", ".onnx")  # the model files serve hosts


#: the server's name of a tensor description (public: ``inference.serving.TensorDecl``)
TensorDecl = TensorDesc


@dataclass
class ModelSpec:
    """One hosted model. ``outputs`` empty: found by running the model once on zeros."""

    name: str
    path: str
    inputs: list[TensorDesc] = field(default_factory=list)
    outputs: list[TensorDesc] = field(default_factory=list)
    max_batch_size: int = 1024  # serve() sets it (auto_batch_size unless given)
    dynamic_batching: bool = True
    preferred_batch_sizes: list[int] = field(default_factory=list)
    max_queue_delay_us: int = 0
    instances: int = 1
    # where the inputs come from: "declared", "file" (<file>.json / extra file), "default (why
    # not read)" (one input__0 float32 [-1]) or what was read from the model ("first Linear ...")
    inputs_from: str = "declared"
    # "model" (``path`` is a model file) or "pipeline" (``path`` is its module:attribute reference)
    kind: str = "model"
    device: str = ""  # a pipeline's own device (alpyka backend[:N]); "" -> the server's

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["inputs"] = [t.to_json() for t in self.inputs]
        d["outputs"] = [t.to_json() for t in self.outputs]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelSpec:
        d = dict(d)
        d["inputs"] = [TensorDesc.parse(t) for t in d.get("inputs", [])]
        d["outputs"] = [TensorDesc.parse(t) for t in d.get("outputs", [])]
        return cls(**d)


def _decls(values: Iterable[Any] | None) -> list[TensorDesc]:
    return [TensorDesc.parse(v) for v in (values or [])]


def _io_from_file(path: str) -> tuple[list[TensorDesc], list[TensorDesc]]:
    """Declarations stored with a TorchScript file (extra file) or beside it (``<file>.json``)."""
    side = Path(path + ".json")
    if side.is_file():
        d = json.loads(side.read_text())
        return _decls(d.get("inputs")), _decls(d.get("outputs"))
    if path.endswith(".pt"):
        try:
            extra = {IO_EXTRA_FILE: ""}
            jit_load(read_checked(path), "cpu", _extra_files=extra)
            if extra[IO_EXTRA_FILE]:
                d = json.loads(extra[IO_EXTRA_FILE])
                return _decls(d.get("inputs")), _decls(d.get("outputs"))
        except Exception:  # noqa: BLE001 - not TorchScript, or no declarations
            pass
    return [], []


def declare_hint(spec: ModelSpec) -> str:
    """How to declare the inputs of ``spec`` (one line, CLI and Python forms)."""
    if spec.inputs_from in ("declared", "file"):
        return (
            "check the input declarations (NAME:DTYPE:DIMS, dims per sample without the batch axis), "
            "or declare the outputs too (--output NAME:DTYPE:DIMS; Python: outputs=[...]) to skip this run"
        )
    n = "D0,D1" if any(len(t.dims) > 1 for t in spec.inputs) else "N"
    first = spec.inputs[0] if spec.inputs else TensorDesc("input__0")
    example = f"{first.name}:{first.dtype}:{n}"
    return (
        f"declare the inputs, e.g. --input {example} (dims per sample without the batch axis; "
        f"one --input per input; Python: inputs=[{example!r}])"
    )


class _Held(logging.Handler):
    """Keeps the records of one logger instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def read_program(path: str) -> Any:
    """The ``torch.export`` program of ``path`` (:func:`inference._loading.read_exported`: the
    archive checked first), loaded without torch's log of a damaged archive: ``torch.export.load``
    logs the whole traceback of the deserializer's error as a warning and then raises something
    vaguer ("check the warnings above"). A damaged file raises one :class:`ModelFileError` line
    naming the file and the deserializer's error; a program that loads gets its warnings logged
    as usual."""
    logger = logging.getLogger("torch.export")  # torch gives it its own stderr handler
    held, propagate, handlers = _Held(), logger.propagate, list(logger.handlers)
    for h in handlers:
        logger.removeHandler(h)
    logger.addHandler(held)
    logger.propagate = False
    try:
        program = read_exported(path)
    except ModelFileError:
        causes = [r.exc_info[1] for r in held.records if r.exc_info and r.exc_info[1] is not None]
        if not causes:
            raise
        cause = causes[0]
        first = (str(cause).strip().splitlines() or [""])[0].strip()
        raise ModelFileError(
            f"{path}: torch.export program could not be loaded ({type(cause).__name__}: {first}); the file is "
            "damaged or written by an incompatible torch"
        ) from None
    finally:
        logger.removeHandler(held)
        for h in handlers:
            logger.addHandler(h)
        logger.propagate = propagate
    for record in held.records:
        logger.handle(record)
    return program


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def inputs_from_model(path: str, batching: bool) -> tuple[list[TensorDesc], str]:
    """Input declarations read from the model file itself, and where they come from; ``([], why)``
    when they cannot be read.

    - TorchScript: one input whose features are the ``in_features`` of the first layer with
      parameters, when it is a ``Linear`` (dtype: its weight's);
    - a ``torch.export`` program: its user inputs' dtypes and shapes (symbolic extents -> -1;
      the first axis is the batch axis when the model batches); a program that cannot be loaded
      raises :class:`ModelFileError` (one line: :func:`read_program`);
    - an ONNX model: its declared inputs (see :func:`onnx_declarations`);
    - AOTInductor packages do not say: declare them.
    """
    try:
        fmt = detect_format(path)
    except Exception as exc:  # noqa: BLE001 - loading will report it
        return [], f"its format could not be read ({exc})"
    if fmt == "jit":
        module = jit_load(read_checked(path), "cpu")
        try:
            args = [a.name for a in module.forward.schema.arguments][1:]
        except Exception:  # noqa: BLE001
            args = []
        if len(args) > 1:
            return [], f"its forward takes {len(args)} inputs {args}"
        for name, sub in module.named_modules():
            own = dict(sub.named_parameters(recurse=False))
            if not own:
                continue
            kind = getattr(sub, "original_name", type(sub).__name__)
            weight = own.get("weight")
            if kind == "Linear" and weight is not None and weight.dim() == 2:
                features = int(weight.shape[1])
                where = (
                    f"first Linear {name!r} (in_features {features})" if name else f"Linear (in_features {features})"
                )
                return [TensorDesc("input__0", _dtype_name(weight.dtype), (features,))], where
            return [], f"its first layer with parameters is a {kind} ({name or 'the model'}), not a Linear"
        return [], "it has no parameters to read the input size from"
    if fmt == "exported":
        import torch  # (only where a model needs torch: a served ONNX model or pipeline loads none)
        from torch.export.graph_signature import InputKind

        ep = read_program(path)  # the archive checked first; a damaged one: ModelFileError, one line
        nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        decls = []
        for i, spec in enumerate(s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT):
            val = nodes.get(getattr(spec.arg, "name", ""), None)
            val = val.meta.get("val") if val is not None else None
            if not isinstance(val, torch.Tensor):
                return [], f"its input {i} is not a tensor"
            dims = [int(d) if isinstance(d, int) else -1 for d in val.shape]
            if batching:
                if not dims:
                    return [], f"its input {i} is a scalar, it cannot batch"
                dims = dims[1:]
            decls.append(TensorDesc(f"input__{i}", _dtype_name(val.dtype), tuple(dims)))
        if not decls:
            return [], "it takes no tensor inputs"
        return decls, "the exported program's input specs"
    if fmt == "onnx":
        return onnx_declarations(path, batching)[0], "the ONNX model's declared inputs"
    if fmt == "aot":
        return [], "an AOTInductor package does not record its input shapes"
    return [], f"it is a {fmt} file"


def onnx_declarations(path: str, batching: bool) -> tuple[list[TensorDesc], list[TensorDesc]]:
    """An ONNX model's declared inputs and outputs as served tensors, read as ``Model`` reads
    them (:class:`inference._onnx.OnnxProgram`): names and dtypes as declared, dims per sample
    with symbolic extents -1; when the model batches, the first axis is the batch axis and must
    be symbolic (a clear error says how to fix a fixed one)."""
    program = OnnxProgram(path, 1)  # a session read for its declarations only (and no torch for its threads)
    name = Path(path).name

    def served(decls: Sequence[Any], what: str) -> list[TensorDesc]:
        out = []
        for d in decls:
            if d.dtype is None:
                raise ArgumentError(
                    f"{name}: {what} {d.name!r} is a {d.type_name}, which serve cannot carry; "
                    "export the model with tensor inputs and outputs of numeric types"
                )
            dims = [-1 if x is None else int(x) for x in d.dims]
            if batching:
                if not dims or dims[0] != -1:
                    first = "is a scalar" if not dims else f"has a fixed first axis of {dims[0]}"
                    raise ArgumentError(
                        f"{name}: {what} {d} {first}, and Triton batches along the first axis: "
                        "export it with a dynamic batch axis (inference.export does) or serve "
                        "it with max_batch_size=0 (--max-batch-size 0)"
                    )
                dims = dims[1:]
            out.append(TensorDesc(d.name, d.dtype.name, tuple(dims)))
        return out

    return served(program.inputs, "input"), served(program.outputs, "output")


def outputs_from_model(path: str, batching: bool) -> list[TensorDesc]:
    """Output declarations the model file itself holds (ONNX); ``[]`` otherwise (then found by a
    trial run in the server)."""
    try:
        fmt = detect_format(path)
    except Exception:  # noqa: BLE001 - loading will report it
        return []
    return onnx_declarations(path, batching)[1] if fmt == "onnx" else []


#: what one request of a model served with the default max_batch_size may carry, and its bounds
AUTO_BATCH_BYTES = 32 << 20
AUTO_BATCH_ROWS = (1024, 1 << 20)


def auto_batch_size(inputs: Sequence[TensorDesc], outputs: Sequence[TensorDesc]) -> int:
    """The default ``max_batch_size``: as many rows as fit in :data:`AUTO_BATCH_BYTES` of one row's
    inputs and outputs (a -1 dim counts as 1; outputs not declared yet as large as the inputs),
    within :data:`AUTO_BATCH_ROWS`. Rows are cheap, requests are not: a 64-row cap sent a
    16384-row forward as 256 requests, 190x slower than one."""

    def row_bytes(decls: Sequence[TensorDesc]) -> int:
        total = 0
        for d in decls:
            n = 1
            for x in d.dims:
                n *= max(int(x), 1)
            total += n * d.dtype.itemsize
        return total

    ins = row_bytes(inputs)
    per_row = ins + (row_bytes(outputs) if outputs else ins)
    lo, hi = AUTO_BATCH_ROWS
    return int(min(hi, max(lo, AUTO_BATCH_BYTES // max(per_row, 1))))


def model_specs(
    models: Any,
    *,
    name: str | None,
    workdir: Path,
    inputs: Sequence[Any] | None,
    outputs: Sequence[Any] | None,
    **settings: Any,
) -> list[ModelSpec]:
    """Normalise ``serve``'s ``models`` argument (a path, an nn.Module, a list, or a mapping
    ``{name: path | module | dict}``) into specs; modules are scripted to ``workdir``."""
    if isinstance(models, Mapping):
        items = list(models.items())
    else:
        seq = list(models) if isinstance(models, (list, tuple)) else [models]
        if name is not None and len(seq) != 1:
            raise ArgumentError(f"name= names one model; {len(seq)} were given (use a mapping {{name: model}})")
        items = [(name or _default_name(m, i), m) for i, m in enumerate(seq)]
    if not items:
        raise ArgumentError("serve needs at least one model: a path, an nn.Module or {name: model}")
    specs = []
    for mname, model in items:
        if not _NAME.match(str(mname)):
            raise ArgumentError(f"model name {mname!r}: use letters, digits, '_', '.', '-'")
        per_pipe = dict(model) if isinstance(model, Mapping) and "pipeline" in model else {"pipeline": model}
        pipe = _pipeline_of(per_pipe.pop("pipeline"))
        if pipe is not None:
            specs.append(pipeline_spec(str(mname), pipe, {**settings, **per_pipe}))
            continue
        per = dict(model) if isinstance(model, Mapping) else {"path": model}
        path = _as_path(per.pop("path"), str(mname), workdir)
        ins = _decls(per.pop("inputs", None) or inputs)
        outs = _decls(per.pop("outputs", None) or outputs)
        opts = {**settings, **per}
        source = "declared"
        if not ins:
            ins, file_outs = _io_from_file(path)
            outs = outs or file_outs
            source = "file"
        batching = opts.get("max_batch_size") is None or int(opts["max_batch_size"]) > 0
        if not ins:
            ins, source = inputs_from_model(path, batching)
            if not ins:
                ins, source = [TensorDesc("input__0")], f"default ({source})"
        if not outs:
            outs = outputs_from_model(path, batching)
        if opts.get("max_batch_size") is None:
            opts["max_batch_size"] = auto_batch_size(ins, outs)
        opts["inputs_from"] = source
        specs.append(ModelSpec(str(mname), path, ins, outs, **opts))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ArgumentError(f"model names must be unique, got {names}; name them with a mapping {{name: model}}")
    return specs


def is_reference(model: Any) -> bool:
    """True for a ``module:attribute`` pipeline reference (not an existing file)."""
    return (
        isinstance(model, str)
        and ":" in model
        and not Path(model).is_file()
        and Path(model).suffix not in MODEL_SUFFIXES
    )


def _pipeline_of(model: Any) -> Any:
    """The pipeline ``model`` is (an object or a ``module:attribute`` reference), else None; a
    plain function is a clear error."""
    if isinstance(model, PipelineDeclaration):
        return model
    if is_reference(model):
        return load_reference(model)
    if inspect.isfunction(model) or inspect.ismethod(model):
        as_pipeline(model)  # raises: how to make it a pipeline
    return None


def pipeline_spec(name: str, pipe: Any, settings: Mapping[str, Any]) -> ModelSpec:
    """A pipeline's spec: tensors derived from its layouts, no batching (see ``_pipeline._wire``)."""
    cfg = derive_config(pipe)
    return ModelSpec(
        name,
        pipe.reference,
        cfg["inputs"],
        cfg["outputs"],
        max_batch_size=0,
        dynamic_batching=False,
        instances=int(settings.get("instances", 1)),
        inputs_from="layouts",
        kind="pipeline",
        device=str(settings.get("device", "")),
    )


def _default_name(model: Any, i: int) -> str:
    if isinstance(model, PipelineDeclaration):
        return model.name
    if is_reference(model):
        return str(model).rpartition(":")[2].rpartition(".")[2]
    if isinstance(model, (str, os.PathLike)):
        return Path(model).name.split(".")[0]
    return f"model{i}" if i else "model"


def _as_path(model: Any, name: str, workdir: Path) -> str:
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if not p.is_file():
            raise FileNotFound(f"model file {str(p)!r} does not exist; give the path of a model file to serve")
        if p.suffix not in MODEL_SUFFIXES:
            raise ArgumentError(
                f"model file {str(p)!r}: serve hosts TorchScript (.pt), torch.export or "
                "AOTInductor (.pt2) and ONNX (.onnx) files"
            )
        return str(p.resolve())
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        scripted = model
    elif isinstance(model, torch.nn.Module):
        try:
            scripted = torch.jit.script(model.eval().cpu())
        except Exception as exc:
            raise ArgumentTypeError(
                f"model {name!r}: an nn.Module is served as TorchScript and "
                f"torch.jit.script failed ({exc}); save it as .pt or .pt2 first"
            ) from exc
    else:
        raise ArgumentTypeError(
            f"model {name!r}: serve takes a .pt/.pt2/.onnx path or a torch.nn.Module, got {type(model).__name__}"
        )
    path = workdir / f"{name}.pt"
    scripted.save(str(path))
    return str(path)
