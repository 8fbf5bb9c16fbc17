"""Packing a launch's Python arguments into the C arguments of a generated kernel.

Built once per launch plan from :attr:`CSource.args`: a list of small functions, each taking
``(args, workdiv, dynamic_shared_bytes)`` and giving the values of one IR parameter (two for an
array on OpenCL: buffer and byte offset). Backends pass ``array_values(memory, byte_offset)``,
which turns an allocation plus offset into their C argument(s). Devices of the arguments are
checked before (``_gpu_launch.check_devices``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._c_source import CSource

Getter = Callable[[tuple, Any, int], tuple]

_I64: dict[int, np.int64] = {}


def i64(value: int) -> np.int64:
    """``np.int64(value)``, interned for the small set of offsets, sizes and extents a program
    uses: repeated launches pass the very same objects (cheap to make, cheap to compare)."""
    got = _I64.get(value)
    if got is None:
        got = np.int64(value)
        if len(_I64) < 4096:
            _I64[value] = got
    return got


def _array_getter(p: Any, device: Any, label: str, array_values: Callable[[Any, int], tuple]) -> Getter:
    k, fld = p.arg_index, p.field
    if not fld:  # a pk.Buffer

        def get_buffer(args: tuple, wd: Any, dyn: int) -> tuple:
            return array_values(args[k].handle, 0)

        return get_buffer

    def get_field(args: tuple, wd: Any, dyn: int) -> tuple:
        v = args[k]
        return array_values(v.memory, v.offset + v.layout.placements(v.size)[fld].offset)

    return get_field


def _scalar_getter(p: Any) -> Getter:
    k, fld, role = p.arg_index, p.field, p.role
    if role == "size":
        return lambda args, wd, dyn: (i64(args[k].size),)
    if role == "pitch":

        def pitch(args: tuple, wd: Any, dyn: int) -> tuple:
            v = args[k]
            pl = v.layout.placements(v.size)[fld]
            return (i64(pl.pitch // pl.field.itemsize),)

        return pitch
    if role == "extent":
        d = int(fld)
        return lambda args, wd, dyn: (i64(args[k].shape[d]),)
    ctor = np.uint8 if p.type.is_bool else np.dtype(p.type.name).type

    def value(args: tuple, wd: Any, dyn: int) -> tuple:
        a = args[k]
        return (a if type(a) is ctor else ctor(a),)

    return value


def make_packer(
    src: CSource,
    device: Any,
    names: list[str],
    array_values: Callable[[Any, int], tuple],
    dyn_local: Callable[[int], Any] | None = None,
) -> Callable[[tuple, Any, int], list]:
    """``pack(args, workdiv, dynamic_shared_bytes) -> [C argument values]`` for ``src``."""
    getters: list[Getter] = []
    for what, item in src.args:
        if what == "param":
            if item.role == "array":
                label = repr(names[item.arg_index]) if item.arg_index < len(names) else str(item.arg_index)
                getters.append(_array_getter(item, device, label, array_values))
            else:
                getters.append(_scalar_getter(item))
        elif what == "elements":
            d = item
            getters.append(lambda args, wd, dyn, d=d: (i64(wd.elements[d]),))
        elif what == "dyn_bytes":
            getters.append(lambda args, wd, dyn: (i64(dyn),))
        elif what == "dyn_local":
            assert dyn_local is not None
            getters.append(lambda args, wd, dyn: (dyn_local(max(dyn, 1)),))
        elif what == "err":
            getters.append(lambda args, wd, dyn: ())  # filled by the launcher
        else:  # pragma: no cover - CSource.args only holds the kinds above
            raise ValueError(what)

    def pack(args: tuple, wd: Any, dyn: int) -> list:
        out: list = []
        for g in getters:
            out.extend(g(args, wd, dyn))
        return out

    return pack
