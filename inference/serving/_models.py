"""The server's models: each loaded by its format (checked before torch or ONNX Runtime reads
it), run once on zeros where its outputs are not declared, and called per request.

Used by the server process (:mod:`._child`). torch is imported only by a model that needs it:
TorchScript, ``torch.export`` programs and AOTInductor packages run on torch tensors, an ONNX
model on a GPU too; an ONNX model on the CPU is an :class:`ArrayModel`, run by ONNX Runtime on
the request's numpy arrays (the server then loads no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from portable import AlpykaError, ArgumentError, NameNotFound

from .._loading import detect_format, exported_module, jit_load, read_checked
from .._onnx import HOST, OnnxProgram
from .._tensor_desc import TensorDesc
from ._spec import ModelSpec, declare_hint, read_program


class StartupError(AlpykaError, RuntimeError):
    """A failure with a one-line message that says what to fix."""


def model_format(path: str) -> str:
    """``"jit"``, ``"aot"``, ``"exported"`` or ``"onnx"`` (by content, not by suffix)."""
    try:
        return detect_format(path)
    except Exception:  # noqa: BLE001 - fall back on the suffix; loading reports the real error
        return "onnx" if path.endswith(".onnx") else "aot" if path.endswith(".pt2") else "jit"


class ArrayModel:
    """A model run on numpy arrays, not torch tensors (an ONNX model on the CPU: no torch loaded)."""

    def __init__(self, run: Callable[..., list[np.ndarray]]) -> None:
        self.run = run

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return self.run(*arrays)


def load_model(path: str, device: str, threads: int | None = None) -> Callable[..., Any]:
    """A callable on torch tensors: TorchScript (.pt), an AOTInductor package or a
    torch.export program (.pt2), or an ONNX model (ONNX Runtime, loaded and run as
    ``Model("x.onnx")`` does: :class:`inference._onnx.OnnxProgram`); on the CPU an ONNX model is
    an :class:`ArrayModel` instead, and torch is not imported. ``threads``: its ONNX Runtime
    session's intra-op threads there (None: ONNX Runtime's default, a thread per physical core,
    as torch's own default)."""
    fmt = model_format(path)
    if fmt == "onnx":
        if device == "cpu":
            return ArrayModel(OnnxProgram(path, threads or 0).runner(HOST).run_arrays)
        import torch

        return OnnxProgram(path).runner(torch.device(device)).run_tensors
    if fmt == "aot":
        from .. import aot

        return aot.load(path)
    if fmt == "exported":
        return exported_module(read_program(path), device)  # checked; the bytes checked are the bytes torch is given
    module = jit_load(read_checked(path), device)  # a zip torch could read otherwise is refused
    module.eval()
    return module


def _as_list(out: Any, names: list[str]) -> list[Any]:
    if isinstance(out, dict):
        missing = [n for n in names if n not in out]
        if missing:
            raise NameNotFound(
                f"the model returned outputs {list(out)}, not the declared {missing}; return a dict with keys "
                f"{names} or a tuple in that order (or declare serve(outputs=...) by the names it returns)"
            )
        return [out[n] for n in names] if names else list(out.values())
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def _decl_text(spec: ModelSpec) -> str:
    return ", ".join(f"{t.name} {t.dtype} {list(t.dims)}" for t in spec.inputs)


def probe_outputs(model: Callable[..., Any], spec: ModelSpec, device: str) -> list[TensorDesc]:
    """Output declarations found by running the model once on zeros (two samples when it
    batches). A failure raises :class:`StartupError` saying what to declare."""
    batch = (2,) if spec.max_batch_size > 0 else ()
    shapes = [(*batch, *[max(d, 1) for d in t.dims]) for t in spec.inputs]
    try:
        if isinstance(model, ArrayModel):
            outs = model(*[np.zeros(s, dtype=t.dtype) for s, t in zip(shapes, spec.inputs)])
        else:
            import torch

            args = [
                torch.zeros(s, dtype=getattr(torch, t.dtype.name), device=device) for s, t in zip(shapes, spec.inputs)
            ]
            with torch.inference_mode():
                outs = _as_list(model(*args), [])
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()
        src = spec.inputs_from
        if src == "declared":
            where = "as declared"
        elif src == "file":
            where = "as declared in its .json/extra file"
        elif src.startswith("default"):
            where = f"not declared and not readable from the model: {src[len('default') :].strip(' ()')}"
        else:
            where = f"read from the model: {src}"
        shown = ", ".join(f"{list(s)}" for s in shapes)
        raise StartupError(
            f"model {spec.name!r}: a trial run on zeros of shape {shown} (inputs {_decl_text(spec)}, {where}) "
            f"failed: {reason}; {declare_hint(spec)}"
        ) from exc
    variable = any(d < 0 for t in spec.inputs for d in t.dims)  # output extents may follow inputs
    decls = []
    for i, o in enumerate(outs):
        shape = o.shape[1:] if batch else o.shape
        dims = tuple(-1 if variable else int(d) for d in shape)
        dtype = o.dtype if isinstance(o, np.ndarray) else o.detach().cpu().numpy().dtype
        decls.append(TensorDesc(f"output__{i}", dtype, dims))
    return decls


def make_infer(model: Callable[..., Any], spec: ModelSpec, device: str) -> Callable[..., Any]:
    """The PyTriton inference callable: numpy in, the model on torch tensors (or on the arrays
    themselves: :class:`ArrayModel`), numpy out."""
    in_names = [t.name for t in spec.inputs]
    out_names = [t.name for t in spec.outputs]
    out_dtypes = [t.dtype for t in spec.outputs]

    def checked(outs: list[Any]) -> list[Any]:
        if len(outs) != len(out_names):
            raise ArgumentError(
                f"model {spec.name!r} returned {len(outs)} outputs, {len(out_names)} declared {out_names}; "
                "declare as many outputs as it returns (serve(outputs=...))"
            )
        return outs

    if isinstance(model, ArrayModel):

        def run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            outs = checked(model(*[np.ascontiguousarray(arrays[n]) for n in in_names]))
            return {n: o.astype(dt, copy=False) for n, o, dt in zip(out_names, outs, out_dtypes)}

    else:
        import torch

        def run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            args = [torch.from_numpy(np.ascontiguousarray(arrays[n])).to(device) for n in in_names]
            with torch.inference_mode():
                outs = checked(_as_list(model(*args), out_names))
            return {n: o.detach().cpu().numpy().astype(dt, copy=False) for n, o, dt in zip(out_names, outs, out_dtypes)}

    if spec.max_batch_size > 0:  # pytriton (optional: the triton extra) loads in main's try, which reports it
        from pytriton.decorators import batch

        @batch
        def infer_batched(**arrays: np.ndarray) -> dict[str, np.ndarray]:
            return run(arrays)

        return infer_batched

    def infer_requests(requests: list[Any]) -> list[dict[str, np.ndarray]]:
        return [run({n: r[n] for n in in_names}) for r in requests]

    return infer_requests
