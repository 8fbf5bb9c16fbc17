"""The C dialects are traits (backends/_c_dialect.py): one class per dialect, HIP a refinement of
CUDA, and no method deciding by a dialect's name (alpaka's one trait specialisation per backend)."""

from __future__ import annotations

import ast
import inspect

import pytest

from backends import _c_dialect, _c_emit, _c_helpers, _c_messages, _c_statements, _gpu_launch
from backends._c_dialect import DIALECTS, Cuda, Dialect, Hip, OpenCL
from portable.compiler.ir import ATOMIC_OPS
from portable.compiler.types import scalar_type

NAMES = ("opencl", "cuda", "hip")
TYPES = [scalar_type(t) for t in ("int32", "uint32", "int64", "uint64", "float32", "float64")]


def test_one_class_per_dialect_hip_refines_cuda():
    assert {n: type(d) for n, d in DIALECTS.items()} == {"opencl": OpenCL, "cuda": Cuda, "hip": Hip}
    assert issubclass(Hip, Cuda) and issubclass(OpenCL, Dialect) and not issubclass(OpenCL, Cuda)
    assert all(d.name == n for n, d in DIALECTS.items())


@pytest.mark.parametrize(
    "module", [_c_dialect, _c_emit, _c_helpers, _c_messages, _c_statements, _gpu_launch], ids=lambda m: m.__name__
)
def test_no_code_decides_by_a_dialects_name(module):
    """No comparison with a dialect's name and no ``is_opencl`` test in the dialects, the C
    emitter or the GPU launch path: what differs is a method or attribute of the dialect's own
    class, so a new dialect is one class."""
    tree = ast.parse(inspect.getsource(module))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
            if any(c in NAMES for c in consts) or ".name" in ast.unparse(node).replace("t.name", ""):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and node.attr == "is_opencl" and isinstance(node.ctx, ast.Load):
            found.append(f"line {node.lineno}: reads is_opencl")
    assert not found, found


@pytest.mark.parametrize("t", TYPES, ids=str)
@pytest.mark.parametrize("op", ATOMIC_OPS)
def test_hip_has_cudas_atomics_but_those_amd_gpus_lack(op, t):
    cuda, hip = DIALECTS["cuda"].native_atomic(op, t, ""), DIALECTS["hip"].native_atomic(op, t, "")
    lacking = (t.name == "int64" and op in ("min", "max")) or (t.name == "float64" and op == "add")
    assert hip == (None if lacking else cuda)


def test_the_prologue_adds_hips_warp_macros_to_cudas():
    cuda, hip = DIALECTS["cuda"], DIALECTS["hip"]
    assert hip.prologue() == cuda.prologue()
    assert hip.prologue(warps=True).startswith(cuda.prologue(warps=True))
    assert "ALPYKA_SHFL_MASK" in hip.prologue(warps=True) and "ALPYKA_SHFL_MASK" not in cuda.prologue(warps=True)
