"""Exporting a PyTorch module to a file ``Model`` loads: a ``torch.export`` program (``.pt2``,
run without compiling) or an ONNX model (``.onnx``, ONNX Runtime).

    from inference import export
    export(module, (torch.randn(64, 3),), "mlp.pt2")     # torch.export.save; the batch axis dynamic
    export(module, (torch.randn(64, 3),), "mlp.onnx")    # torch.onnx.export(dynamo=True)
    Model("mlp.pt2"), Model("mlp.onnx")

Command line (``alpyka export`` forwards to it)::

    alpyka export mypkg.models:make_mlp --input-shape 64,3 --onnx -o mlp.onnx
    alpyka export path/to/models.py:MLP --input-shape 64,3 --pt2 -o mlp.pt2 [--weights w.pt]

``MODULE`` is ``package.module:attribute`` (importable) or ``file.py:attribute``; the attribute is
an ``nn.Module``, a class or a function returning one (called without arguments). For compiled
AOTInductor packages use ``alpyka aot`` (``inference.aot``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from portable import ArgumentError, ArgumentTypeError
from portable.cli import run

from ._loading import load_state_dict
from .aot import _batch_axis_dynamic, _load_factory, add_input_shape, export_program, make_parent

__all__ = ["export", "main"]

FORMATS = {".pt2": "pt2", ".onnx": "onnx"}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch's exporters warn about their own internals (and log missing torchvision ops)."""
    log = logging.getLogger("torch.onnx")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def export(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    path: str | os.PathLike,
    *,
    dynamic_batch: bool = True,
    fmt: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> str:
    """Export ``module`` traced on ``example_inputs`` to ``path``: a ``torch.export`` program for
    ``.pt2``, an ONNX model for ``.onnx`` (``fmt="pt2"|"onnx"`` overrides the suffix). The first
    axis of every input is dynamic unless ``dynamic_batch=False``. ``input_names``/``output_names``
    name the ONNX model's tensors (``Model`` pairs outputs with blocks by name when they match).
    Returns the path."""
    if not isinstance(module, torch.nn.Module) or isinstance(module, torch.jit.ScriptModule):
        raise ArgumentTypeError(
            f"export needs an eager nn.Module (torch.export cannot trace TorchScript), got {type(module).__name__}"
        )
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    fmt = fmt or FORMATS.get(suffix)
    if fmt not in ("pt2", "onnx"):
        raise ArgumentError(
            f"export writes .pt2 (torch.export) or .onnx files; {path!r} is neither (pass fmt='pt2' or fmt='onnx')"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    inputs = tuple(torch.as_tensor(x) for x in example_inputs)
    dynamic_shapes = None
    if dynamic_batch:
        inputs, dynamic_shapes = _batch_axis_dynamic(inputs)
    module = module.eval()
    make_parent(path)
    root, ext = os.path.splitext(path)
    tmp = f"{root}.{os.getpid()}.tmp{ext or '.' + fmt}"  # torch.export.save wants a .pt2 name
    try:
        with _quiet(), torch.no_grad():
            if fmt == "pt2":
                program = export_program(module, inputs, dynamic_shapes)
                torch.export.save(program, tmp)
            else:
                if dynamic_shapes:  # a batch axis the module fixes is refused as for .pt2: the ONNX
                    export_program(module, inputs, dynamic_shapes)  # export wrote an input [3], no batch
                _onnx(module, inputs, tmp, dynamic_shapes, input_names, output_names)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _onnx(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    path: str,
    dynamic_shapes: Any,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
) -> None:
    try:
        import onnxscript  # noqa: F401 - the dynamo exporter's dependency
    except ImportError:
        raise ImportError("ONNX export needs onnxscript: pip install 'alpyka[onnx]'") from None
    names: dict[str, Any] = {}
    if input_names:
        names["input_names"] = list(input_names)
    if output_names:
        names["output_names"] = list(output_names)
    torch.onnx.export(
        module, inputs, path, dynamo=True, dynamic_shapes=dynamic_shapes, external_data=False, verbose=False, **names
    )


# --------------------------------------------------------------------------- command line
def build_parser(prog: str = "alpyka export") -> argparse.ArgumentParser:
    """The argument parser of ``alpyka export``."""
    p = argparse.ArgumentParser(prog=prog, description="Export a PyTorch module to .pt2 (torch.export) or .onnx.")
    p.add_argument(
        "module",
        help="'package.module:attribute' or 'file.py:attribute' giving the nn.Module "
        "(a module, a class or a factory function)",
    )
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--onnx", action="store_const", const="onnx", dest="fmt", help="write an ONNX model")
    kind.add_argument("--pt2", action="store_const", const="pt2", dest="fmt", help="write a torch.export program")
    p.add_argument("-o", "--output", default=None, help="file to write (default: the attribute's name + suffix)")
    add_input_shape(p)
    p.add_argument(
        "--dtype", action="append", default=None, help="dtype of the example inputs (default float32; repeat per input)"
    )
    p.add_argument("--weights", help="state dict to load first (read with weights_only=True)")
    p.add_argument("--static-batch", action="store_true", help="keep the batch axis fixed to the example's")
    p.add_argument("--input-name", action="append", default=None, help="ONNX input names, in order")
    p.add_argument("--output-name", action="append", default=None, help="ONNX output names, in order")
    return p


def _dtypes(names: list[str] | None, count: int) -> list[torch.dtype]:
    names = names or ["float32"]
    if len(names) not in (1, count):
        raise ArgumentError(f"give one --dtype for all inputs or one per input ({count}), got {len(names)}")
    out = []
    for n in names * (count if len(names) == 1 else 1):
        dtype = getattr(torch, n, None)
        if not isinstance(dtype, torch.dtype):
            raise ArgumentError(f"unknown dtype {n!r}; use a torch dtype name such as float32 or int32")
        out.append(dtype)
    return out


def _example(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.zeros(shape, dtype=dtype)


def command(argv: list[str], prog: str = "alpyka export") -> int:
    """``alpyka export``: export a module to .pt2 (torch.export) or .onnx."""
    args = build_parser(prog).parse_args(argv)
    output = args.output
    fmt = args.fmt or (FORMATS.get(os.path.splitext(output)[1].lower()) if output else None)
    if fmt is None:
        raise ArgumentError("say --onnx or --pt2 (or give -o with a .onnx/.pt2 name)")
    if output is None:
        output = f"{args.module.rsplit(':', 1)[-1].split('.')[-1].lower()}.{fmt}"
    module = _load_factory(args.module)
    if args.weights:
        module.load_state_dict(load_state_dict(args.weights))
    dtypes = _dtypes(args.dtype, len(args.input_shape))
    examples = tuple(_example(s, d) for s, d in zip(args.input_shape, dtypes))
    t0 = time.perf_counter()
    out = export(
        module,
        examples,
        output,
        fmt=fmt,
        dynamic_batch=not args.static_batch,
        input_names=args.input_name,
        output_names=args.output_name,
    )
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {fmt}, exported in {time.perf_counter() - t0:.1f} s)")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "alpyka export") -> int:
    """Run the command line; returns the exit status (errors print one line with the fix)."""
    return run(command, argv, prog)


if __name__ == "__main__":
    sys.exit(main(prog="python -m inference._export"))
