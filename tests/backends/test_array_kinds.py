"""The CPU backends tell shared memory by what the IR says (the array's ``ArrayType.kind``),
never by its name: an IR is the contract between front-end and emitters (docs/kernels.md), and
the ``sh_``/``dsh_`` prefixes are only the front-end's naming habit. Each kernel here is built by
the front-end, then its arrays renamed: a global array named like a shared one, a shared array
named like a global one."""

from __future__ import annotations

import dataclasses

import numpy as np

import portable as pk
from backends._numba_emit import emit_numba
from portable.compiler import ir
from portable.compiler.passes import flat_grid_loop


@pk.kernel
def scale_and_count(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = x[i] * 2.0
        acc.atomic_add(out, 0, 1.0)  # every block of the grid: an atomic on cpu_threads


@pk.kernel
def count_in_block(acc, out, n):
    tile = acc.shared_array(4, np.int32)
    for _i in acc.uniform_elements(n):
        acc.atomic_add(tile, 0, 1)  # the block's own memory: a plain read-modify-write on the CPU
    acc.sync_block_threads()
    out[0] = tile[0]


@pk.kernel
def dynamic_tile(acc, out, n):
    tile = acc.dynamic_shared_array(np.float32)
    for i in acc.uniform_elements(n):
        tile[0] = np.float32(i)
        out[i] = tile[0]


def _buf(n: int, dtype) -> pk.Buffer:
    return pk.Buffer(pk.host(), n, dtype)


def _ir(kernel, *args) -> ir.KernelDef:
    return kernel.ir(kernel.signature(args), 1, False)


def _renamed(x, names: dict[str, str]):
    """``x`` (IR) with the arrays and parameters of ``names`` renamed."""
    if isinstance(x, (list, tuple)):
        return type(x)(_renamed(y, names) for y in x)
    if isinstance(x, dict):
        return {k: _renamed(v, names) for k, v in x.items()}
    if not (dataclasses.is_dataclass(x) and type(x).__module__ == ir.__name__):
        return x
    changes = {f.name: _renamed(getattr(x, f.name), names) for f in dataclasses.fields(x) if f.init}
    if isinstance(x, (ir.ArrayRef, ir.Param, ir.SharedArray)) and x.name in names:
        changes["name"] = names[x.name]
    return dataclasses.replace(x, **changes)


def _arrays(k: ir.KernelDef) -> set[str]:
    return {y.name for y in ir.nodes(k.body) if isinstance(y, ir.ArrayRef)}


def test_a_global_array_named_like_a_shared_one_is_global():
    """Before: an array named ``sh_*`` was taken for shared memory: the kernel lost its flat
    grid loop, and cpu_threads added to it with a plain read-modify-write (blocks running at
    once could lose updates)."""
    k = _ir(scale_and_count, _buf(8, np.float64), _buf(8, np.float64), 8)
    renamed = _renamed(k, {"a0": "sh_out"})
    assert _arrays(renamed) == {"sh_out", "a1"}
    assert flat_grid_loop(k) is not None
    assert flat_grid_loop(renamed) is not None, "a global array named sh_* cost the kernel its flat loop"
    for serial in (False, True):  # grid atomics: kernels on two queues may share the buffer
        src = emit_numba(renamed, serial=serial).source
        assert "atomic_add(sh_out" in src, src


def test_a_shared_array_named_like_a_global_one_is_shared():
    k = _ir(count_in_block, _buf(8, np.int32), 8)
    assert _arrays(k) == {"a0", "sh_tile"}
    renamed = _renamed(k, {"sh_tile": "tile_of_block"})
    for serial in (False, True):  # one thread per block: nothing contends on a block's own array
        src = emit_numba(renamed, serial=serial).source
        assert "plain_add(tile_of_block" in src, src


def test_a_dynamic_shared_array_with_any_name_gets_its_memory():
    """Before: the numba emitter found dynamic shared arrays by their ``dsh_`` prefix and read
    the dtype from the rest of the name: another name was never given its memory."""
    k = _ir(dynamic_tile, _buf(8, np.float32), 8)
    (dyn,) = _arrays(k) - {"a0"}
    renamed = _renamed(k, {dyn: "scratch"})
    src = emit_numba(renamed).source
    assert "scratch = _dsh.view(np.float32)[:dynamic_shared_bytes // 4]" in src, src
