"""Kernel arguments: what each Python argument is (its :class:`ArgSpec`), the signature key of a
launch, and the flattened :class:`~portable.compiler.ir.Param` list the IR uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import soa

from .._buffer import Buffer
from ._errors import KernelArgumentError, KernelDeviceMismatch
from .ir import Param
from .types import INDEX, ArrayType, ScalarType, literal_type, scalar_type

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ArgSpec:
    """One Python argument of a launch: ``kind`` is ``view``, ``buffer``, ``array`` (numpy) or
    ``scalar``; ``dtype``/``ndim`` for buffers, arrays and scalars; ``layout`` for views."""

    index: int
    name: str
    kind: str
    dtype: ScalarType | None = None
    ndim: int = 0
    const: bool = False
    layout: Any = None

    def describe(self) -> str:
        if self.kind == "view":
            return f"{'const ' if self.const else ''}{self.layout.__name__} view"
        if self.kind == "scalar":
            return f"{self.dtype} scalar"
        return f"{self.ndim}-d {self.dtype} {self.kind}"


# ----------------------------------------------------------------------------- keys
def _key_view(a: Any) -> tuple:
    return ("view", a.layout, a.const)


def _key_buffer(a: Any) -> tuple:
    return ("buffer", a.dtype, len(a.shape))


def _key_ndarray(a: Any) -> tuple:
    f = a.flags  # (contiguity is checked per signature: a strided array after a contiguous one is one)
    return ("array", a.dtype, a.ndim, not f.writeable, f.c_contiguous)


_BOOL_KEY = ("scalar", "bool")
_INT_KEY = ("scalar", "int64")
_UINT_KEY = ("scalar", "uint64")
_FLOAT_KEY = ("scalar", "float64")


def _key_bool(a: Any) -> tuple:
    return _BOOL_KEY


def _key_int(a: Any, where: str = "") -> tuple:
    """int64, or uint64 for ``[2**63, 2**64)`` (numpy's rule: ``np.asarray(2**63)`` is uint64,
    so a 64-bit seed passes as it is)."""
    if _INT64_MIN <= a <= _INT64_MAX:
        return _INT_KEY
    if 0 <= a < 2**64:
        return _UINT_KEY
    raise KernelArgumentError(f"{where}the integer {a} fits neither int64 nor uint64 (kernels take 64-bit integers)")


def _key_float(a: Any) -> tuple:
    return _FLOAT_KEY


def _key_npscalar(a: Any) -> tuple:
    return _NP_SCALAR_KEYS[type(a)]


_KEYS: dict[type, Callable[[Any], tuple]] = {
    soa.View: _key_view,
    Buffer: _key_buffer,
    np.ndarray: _key_ndarray,
    bool: _key_bool,
    np.bool_: _key_bool,
    int: _key_int,
    float: _key_float,
}
_NP_SCALAR_KEYS: dict[type, tuple] = {}
for _t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32, np.float64):
    _KEYS[_t] = _key_npscalar
    _NP_SCALAR_KEYS[_t] = ("scalar", np.dtype(_t).name)


def arg_label(index: int, name: str = "") -> str:
    """How messages name argument ``index`` after acc: ``argument 'a' (#2 after acc)``, as the
    kernel's use of an argument is named (``#0`` the first after acc), or by number alone where
    the name is not at hand (they said ``argument 2`` and ``argument #3 after acc`` of one argument)."""
    return f"argument {name!r} (#{index} after acc)" if name else f"argument #{index} after acc"


def arg_key(a: Any, kernel_name: str = "", index: int = 0, name: str = "") -> tuple:
    """The signature key of one argument (what the compiled code depends on); ``name`` is its
    parameter's, for the messages."""
    fn = _KEYS.get(type(a))
    if fn is None:
        fn = next((f for t, f in _KEYS.items() if isinstance(a, t)), None)
    if fn is _key_int:
        return _key_int(a, f"kernel {kernel_name!r}: {arg_label(index, name)}: ")
    if fn is not None:
        return fn(a)
    fix = _ARG_FIX.get(type(a).__name__, "")
    raise KernelArgumentError(
        f"kernel {kernel_name!r}: {arg_label(index, name)} is a {type(a).__name__}; {fix}kernel arguments are "
        "soa views (coll.view()), pk.Buffer, numpy arrays (CPU backends), numpy scalars, int, float, bool"
    )


#: the fix for a type that is close to a kernel argument, by the type's name (no import needed)
_ARG_FIX = {
    "PortableCollection": "pass coll.view() (or coll.const_view(), read-only) of it: ",
    "list": "pass a numpy array (np.asarray(...)) or a pk.Buffer: ",
    "tuple": "pass a numpy array (np.asarray(...)) or a pk.Buffer: ",
    "Tensor": "pass a pk.Buffer, or a numpy array on a CPU backend (t.numpy()): ",
}


#: argument types whose key does not depend on the value (numpy scalars, bool, float)
_CONST_KEYS: dict[type, tuple] = {bool: _BOOL_KEY, np.bool_: _BOOL_KEY, float: _FLOAT_KEY, **_NP_SCALAR_KEYS}
_View = soa.View
_ndarray = np.ndarray


def signature_key(args: tuple, kernel_name: str = "", kernel: Any = None) -> tuple:
    """The signature key of a launch: one :func:`arg_key` per argument (on every launch: kept
    to one loop with the common kinds inline); ``kernel``'s ``param_names``, where given, name an
    argument that has no key in the message."""
    key = []
    const_keys, keys = _CONST_KEYS, _KEYS
    for a in args:
        t = type(a)
        k = const_keys.get(t)
        if k is None:
            if t is _View:
                k = ("view", a.layout, a.const)
            elif t is _ndarray:
                f = a.flags
                k = ("array", a.dtype, a.ndim, not f.writeable, f.c_contiguous)
            elif t is int and _INT64_MIN <= a <= _INT64_MAX:
                k = _INT_KEY
            else:
                fn = keys.get(t)
                if fn is None or fn is _key_int:  # (an int beyond int64: uint64 or a named error)
                    names = list(getattr(kernel, "param_names", ()))
                    names += [""] * (len(args) - len(names))
                    return tuple([arg_key(a, kernel_name, i, names[i]) for i, a in enumerate(args)])
                k = fn(a)
        key.append(k)
    return tuple(key)


def arg_specs(key: tuple, names: list[str]) -> list[ArgSpec]:
    """The ArgSpecs of a signature key (``names`` are the kernel's parameter names after acc)."""
    specs = []
    for i, (k, name) in enumerate(zip(key, names)):
        if k[0] == "view":
            specs.append(ArgSpec(i, name, "view", const=k[2], layout=k[1]))
        elif k[0] == "scalar":
            specs.append(ArgSpec(i, name, "scalar", scalar_type(k[1])))
        elif k[0] == "buffer":
            specs.append(ArgSpec(i, name, "buffer", scalar_type(k[1]), k[2]))
        else:
            specs.append(ArgSpec(i, name, "array", scalar_type(k[1]), k[2], const=k[3]))
    return specs


def check_byte_order(dtype: Any, what: str) -> None:
    """KernelArgumentError for values of a non-native byte order (``>f4`` from FITS, HDF5 or
    ROOT files on a little-endian machine): kernels read memory in the device's own order."""
    dt = np.dtype(dtype)
    if not dt.isnative:
        raise KernelArgumentError(
            f"{what} holds {dt.str} values, not in this machine's byte order: kernels would read them "
            f"wrong; convert them first, e.g. arr.astype(arr.dtype.newbyteorder('=')) (a native {dt.name})"
        )


def check_kernel_dtype(dtype: Any, what: str) -> None:
    """KernelArgumentError naming ``what`` for memory of a dtype kernels have no type for
    (float16, complex, strings, datetimes)."""
    try:
        scalar_type(dtype)
    except TypeError as exc:
        raise KernelArgumentError(
            f"{what}: {exc}; convert the data first (e.g. arr.astype(np.float32) for float16)"
        ) from None


def check_args(kernel_name: str, names: list[str], args: tuple, device: Any) -> None:
    """Raise KernelArgumentError for a wrong count, unsupported type or memory of another device."""
    if len(args) != len(names):
        raise KernelArgumentError(
            f"kernel {kernel_name!r} takes {len(names)} argument(s) after acc ({', '.join(names)}), got {len(args)}"
        )
    for i, a in enumerate(args):
        arg_key(a, kernel_name, i, names[i])
        where = None
        if isinstance(a, soa.View):
            where = a.device
            for f in a.layout.iter_fields():
                check_kernel_dtype(f.dtype, f"kernel {kernel_name!r}: argument {names[i]!r}, field {f.name!r}")
        elif isinstance(a, Buffer):
            where = a.device
            if not 1 <= len(a.shape) <= 3:
                raise KernelArgumentError(
                    f"kernel {kernel_name!r}: argument {names[i]!r} is a "
                    f"{len(a.shape)}-d buffer; kernels take 1-3 dimensional buffers"
                )
            check_kernel_dtype(a.dtype, f"kernel {kernel_name!r}: argument {names[i]!r}")
            check_byte_order(a.dtype, f"kernel {kernel_name!r}: argument {names[i]!r}")
        elif isinstance(a, np.ndarray):
            if not device.is_host_memory:
                raise KernelArgumentError(
                    f"kernel {kernel_name!r}: argument {names[i]!r} is a numpy array, which {device} "
                    "cannot address; copy it into a pk.Buffer of that device"
                )
            if not 1 <= a.ndim <= 3 or not a.flags.c_contiguous:
                raise KernelArgumentError(
                    f"kernel {kernel_name!r}: argument {names[i]!r} must be a "
                    "C-contiguous numpy array of 1-3 dimensions"
                )
            check_kernel_dtype(a.dtype, f"kernel {kernel_name!r}: argument {names[i]!r}")
            check_byte_order(a.dtype, f"kernel {kernel_name!r}: argument {names[i]!r}")
        if where is not None and not device.can_access(where):
            raise KernelDeviceMismatch(
                f"kernel {kernel_name!r}: argument {names[i]!r} lives on {where}, which a queue of "
                f"{device} cannot use; copy it there first (coll.to(dev, q) / pk.memcpy)"
            )


# ----------------------------------------------------------------------------- IR params
def _field_array_type(field: Any, const: bool) -> ArrayType:
    dt = scalar_type(field.dtype)
    kind = {"column": "column", "vector": "vector", "matrix": "matrix", "scalar": "scalar_field"}[field.kind]
    ndim = {"column": 1, "vector": 2, "matrix": 3, "scalar": 0}[field.kind]
    return ArrayType(dt, kind, ndim, const, tuple(field.shape))


def params_of(spec: ArgSpec) -> list[Param]:
    """The flattened parameters of one argument, in the order every emitter passes them."""
    k = spec.index
    if spec.kind == "scalar":
        return [Param(f"a{k}", spec.dtype, "value", k)]
    if spec.kind in ("buffer", "array"):
        t = ArrayType(spec.dtype, "buffer", spec.ndim, spec.const)
        return [Param(f"a{k}", t, "array", k)] + [
            Param(f"a{k}_e{d}", INDEX, "extent", k, str(d)) for d in range(spec.ndim)
        ]
    out = []
    for f in spec.layout.iter_fields():
        out.append(Param(f"a{k}_{f.name}", _field_array_type(f, spec.const), "array", k, f.name))
        if f.kind in ("vector", "matrix"):
            out.append(Param(f"a{k}_{f.name}_pitch", INDEX, "pitch", k, f.name))
    out.append(Param(f"a{k}_size", INDEX, "size", k))
    return out


def constant_type(value: Any) -> ScalarType:
    return literal_type(value)
