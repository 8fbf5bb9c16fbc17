"""Ahead-of-time compilation of a PyTorch module into an AOTInductor ``.pt2`` package.

    from inference import aot
    aot.compile(module, (torch.randn(64, 3),), "mlp.pt2", device="cpu")   # dynamic batch axis
    Model("mlp.pt2")                                                      # loads it (AOT)

Command line (``alpyka aot`` forwards to it)::

    python -m inference.aot mypkg.models:make_mlp --input-shape 64,3 -o mlp.pt2 \
        [--weights mlp_state.pt] [--dtype float32] [--device cpu] [--static-batch]

The module is exported with ``torch.export`` (the first axis of every input dynamic unless
``dynamic_batch=False``) and compiled by AOTInductor (``torch._inductor.aoti_compile_and_package``).
The package is fixed to the device it was compiled for and to the machine's architecture;
it contains native code, so load only packages you built or trust.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from portable import ArgumentError, ArgumentTypeError
from portable.cli import load_reference, run

from ._loading import ModelFileError, detect_format, load_state_dict, read_file

__all__ = ["compile", "load", "main"]

_MAX_BATCH = 2**31 - 2


class PackageRunner:
    """An AOTInductor package's model called with positional tensors.

    ``aoti_load_package``'s callable reads the package's calling convention on every call (two
    JSON tree specs parsed, the inputs flattened: ~0.1 ms on this project's 2-core machine); here it
    is read once at load. A package whose inputs are not plain positional tensors, or a call with
    another count, goes through the package's own call."""

    __slots__ = ("package", "_run", "_count", "_out_spec")

    def __init__(self, package: Any) -> None:
        self.package = package
        self._run: Any = None
        self._count = -1
        self._out_spec: Any = None
        try:  # the spec of (args, kwargs): a tuple of tensor leaves and no keyword arguments
            in_text, out_text = package.loader.get_call_spec()
            args, kwargs = pytree.treespec_loads(in_text).children()
            if args.type is tuple and all(c.is_leaf() for c in args.children()) and kwargs.num_leaves == 0:
                out_spec = pytree.treespec_loads(out_text)
                self._out_spec = None if out_spec.is_leaf() else out_spec
                self._count = args.num_children
                self._run = package.loader.boxed_run
        except Exception:  # noqa: BLE001 - another torch's package API: its own call serves
            self._run = None

    def __call__(self, *tensors: torch.Tensor) -> Any:
        """The model on ``tensors`` (alpyka passes tensors only; the package's own call would also
        drop non-tensor arguments)."""
        if self._run is None or len(tensors) != self._count:
            return self.package(*tensors)
        outputs = self._run(list(tensors))  # a fresh list: the boxed call clears it
        return outputs[0] if self._out_spec is None else pytree.tree_unflatten(outputs, self._out_spec)

    def __getattr__(self, name: str) -> Any:  # get_metadata, load_constants, ...: the package's own
        if name == "package" or name.startswith("__"):  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.package, name)


def load(path: str | os.PathLike, device_index: int = -1) -> PackageRunner:
    """The AOTInductor package at ``path`` as a callable taking positional tensors (runs its native
    code: load only packages you built or trust). A missing file, one that is not an
    AOTInductor package, one that torch's zip reader could read otherwise than alpyka's scan, or
    one from which torch would unpickle anything (see :func:`inference._loading.check_pt2_pickles`),
    is refused by name (``FileNotFoundError``, ``ModelFileError``) before torch opens it; the file
    is read once and torch is given the bytes that were checked."""
    data = read_file(path)  # read once: torch is given the bytes that were checked
    fmt = detect_format(path, data)
    if fmt != "aot":
        raise ModelFileError(
            f"{os.fspath(path)} is not an AOTInductor package (it is {fmt!r}); load it with "
            "inference.Model(path), or compile one with inference.aot.compile"
        )
    try:
        # torch documents AOTInductor's API under torch._inductor (the name is torch's)
        package = torch._inductor.aoti_load_package(io.BytesIO(data), device_index=device_index)  # noqa: SLF001
    except RuntimeError as exc:
        raise ModelFileError(f"{os.fspath(path)}: AOTInductor package could not be loaded ({exc})") from None
    return PackageRunner(package)


def _batch_axis_dynamic(
    example_inputs: tuple[torch.Tensor, ...],
) -> tuple[tuple[torch.Tensor, ...], tuple[dict[int, Any], ...]]:
    batch = torch.export.Dim("batch", min=1, max=_MAX_BATCH)
    widened = []
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            raise ArgumentError(f"example input {i} must be a tensor with a batch axis, got {type(x).__name__}")
        if x.shape[0] != example_inputs[0].shape[0]:
            raise ArgumentError(
                f"example inputs disagree on the batch size: {[tuple(t.shape) for t in example_inputs]}"
            )
        # torch.export specialises axes of size 0 or 1: trace with at least two rows
        widened.append(x if x.shape[0] >= 2 else x.expand(2, *x.shape[1:]).contiguous())
    return tuple(widened), tuple({0: batch} for _ in widened)


def export_program(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any) -> Any:
    """``torch.export.export(module, inputs, dynamic_shapes=...)``. Where the module fixes the batch
    axis :func:`_batch_axis_dynamic` made dynamic (an example given without its batch axis:
    ``Linear(3, 2)`` traced on ``torch.randn(3)``, ``--input-shape 3``), an ArgumentError naming the
    fix, not torch's 20 lines of ConstraintViolation ending in "batch = 3" (a traceback from
    ``alpyka export`` and ``alpyka aot``, which print a user's error as one line)."""
    try:
        return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    except RuntimeError as exc:  # torch's UserError of a violated constraint
        if dynamic_shapes is None or "Constraints violated (batch)" not in str(exc):
            raise
        shapes = ", ".join(str(tuple(x.shape)) for x in inputs)
        raise ArgumentError(
            f"the module fixes the first axis of the example input(s) {shapes}, which is the batch axis: give "
            "examples with the batch axis first (torch.randn(64, 3) for rows of 3 values; --input-shape 64,3), "
            "or keep the batch fixed (dynamic_batch=False; --static-batch)"
        ) from exc


def make_parent(path: str) -> None:
    """Make the folder ``path`` goes in, before the work; an ArgumentError naming ``path`` where it
    cannot be made (a file on the way, no permission): it was OSError's "File exists: '/etc/passwd'"
    for ``/etc/passwd/x.pt2``, or, for a package, after minutes of compiling."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ArgumentError(
            f"cannot write {path!r}: its folder {parent!r} cannot be made ({exc.strerror or exc}); "
            "give a path in a folder this user can write"
        ) from None


def compile(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dynamic_batch: bool = True,
    inductor_configs: dict[str, Any] | None = None,
) -> str:
    """Export ``module`` on ``example_inputs`` and compile it into the ``.pt2`` package ``path``
    for ``device``; the first axis of every input is dynamic unless ``dynamic_batch=False``.
    Returns the package path (load it with ``inference.Model(path)``)."""
    if not isinstance(module, torch.nn.Module) or isinstance(module, torch.jit.ScriptModule):
        raise ArgumentTypeError(
            f"aot.compile needs an eager nn.Module (torch.export cannot trace TorchScript), got {type(module).__name__}"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    dev = torch.device(device)
    path = os.fspath(path)
    if not path.endswith(".pt2"):
        raise ArgumentError(
            f"AOTInductor packages end in .pt2 (Model() recognises them by content, other tools by name), got {path!r}"
        )
    module = module.to(dev).eval()
    inputs = tuple(torch.as_tensor(x).to(dev) for x in example_inputs)
    dynamic_shapes = None
    if dynamic_batch:
        inputs, dynamic_shapes = _batch_axis_dynamic(inputs)
    make_parent(path)
    with torch.no_grad():
        exported = export_program(module, inputs, dynamic_shapes)
    # torch documents AOTInductor's API under torch._inductor (the name is torch's)
    compile_and_package = torch._inductor.aoti_compile_and_package  # noqa: SLF001
    return compile_and_package(exported, package_path=path, inductor_configs=inductor_configs)


# --------------------------------------------------------------------------- command line
def _load_factory(spec: str) -> torch.nn.Module:
    """The nn.Module ``spec`` (``package.module:callable`` or ``file.py:callable``) names: a
    module object, or a class or function called with no arguments to make one."""
    obj = load_reference(spec, "model factory")
    module = obj() if callable(obj) and not isinstance(obj, torch.nn.Module) else obj
    if not isinstance(module, torch.nn.Module):
        raise ArgumentError(f"{spec} gave {type(module).__name__}, not an nn.Module")
    return module


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} must be comma-separated integers, e.g. 64,3") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"shape {text!r} must be positive integers, e.g. 64,3")
    return dims


def add_input_shape(p: argparse.ArgumentParser) -> None:
    """The ``--input-shape`` option of ``alpyka aot`` and ``alpyka export`` (a list of shapes)."""
    p.add_argument(
        "--input-shape",
        type=_shape,
        action="append",
        required=True,
        help="shape of one example input, batch axis first (repeat for several inputs)",
    )


def build_parser(prog: str = "python -m inference.aot") -> argparse.ArgumentParser:
    """The argument parser of the ``aot`` command (``alpyka aot`` reuses it)."""
    p = argparse.ArgumentParser(prog=prog, description="Compile a PyTorch module into an AOTInductor .pt2 package.")
    p.add_argument(
        "module",
        help="'package.module:callable' or 'file.py:callable' giving the nn.Module (a class or a factory function)",
    )
    p.add_argument("-o", "--output", required=True, help="package path (ends in .pt2)")
    add_input_shape(p)
    p.add_argument("--dtype", default="float32", help="dtype of the example inputs (default float32)")
    p.add_argument("--weights", help="state dict to load first (read with weights_only=True)")
    p.add_argument("--device", default="cpu", help="device to compile for: cpu, cuda, cuda:1 (default cpu)")
    p.add_argument("--static-batch", action="store_true", help="keep the batch axis fixed to the example's")
    return p


def command(argv: list[str], prog: str = "alpyka aot") -> int:
    """``alpyka aot``: compile a model ahead of time into a .pt2 package."""
    args = build_parser(prog).parse_args(argv)
    module = _load_factory(args.module)
    if args.weights:
        module.load_state_dict(load_state_dict(args.weights))
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ArgumentError(f"unknown dtype {args.dtype!r}; use a torch dtype name such as float32")
    examples = tuple(torch.randn(s).to(dtype) for s in args.input_shape)
    t0 = time.perf_counter()
    out = compile(module, examples, args.output, device=args.device, dynamic_batch=not args.static_batch)
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {args.device}, compiled in {time.perf_counter() - t0:.1f} s)")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m inference.aot") -> int:
    """Run the command line; returns the exit status (errors print one line with the fix)."""
    return run(command, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
