"""Views of SoA memory: named, typed access to each field of a layout inside one buffer."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from ._errors import ArgumentTypeError, StateError
from ._layout import Layout, Placement

#: ``make_array(byte_offset, dtype, shape, strides)`` returns an array onto the memory.
ArrayFactory = Callable[[int, np.dtype, tuple, tuple], Any]


def field_geometry(p: Placement, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """User-facing shape and byte strides of a field: ``[n]``, ``[n, R]``, ``[n, R, C]`` or ``[]``."""
    f, item = p.field, p.field.itemsize
    if f.kind == "scalar":
        return (), ()
    if f.kind == "column":
        return (n,), (item,)
    if f.kind == "vector":
        return (n, f.shape[0]), (item, p.pitch)
    rows, cols = f.shape
    return (n, rows, cols), (item, p.pitch, rows * p.pitch)


def host_array_factory(memory: np.ndarray, const: bool = False, owner: Any = None) -> ArrayFactory:
    """Arrays onto a host byte buffer (numpy, no copies); read-only when ``const``. The arrays
    keep ``owner`` (the allocation) alive, so its memory is never reused under them."""
    base: Any = memory.reshape(-1).view(np.uint8)
    if owner is not None:
        # numpy collapses ndarray bases, so the owner rides on a ctypes view of the bytes
        base = (ctypes.c_uint8 * base.nbytes).from_buffer(base)
        base.alpyka_owner = owner  # an attribute of ours on the ctypes array: it holds the owner

    def make(offset: int, dtype: np.dtype, shape: tuple, strides: tuple) -> np.ndarray:
        arr = np.ndarray(shape, dtype=dtype, buffer=base, offset=offset, strides=strides)
        if const:
            arr.flags.writeable = False
        return arr

    return make


class View:
    """A (const) view of ``n`` elements of ``layout`` stored at ``offset`` in ``memory``.

    Field ``x`` is ``view.x``: an array of shape ``[n]`` for a column, ``[n, R]`` for a vector,
    ``[n, R, C]`` for a matrix and ``[]`` for a scalar. On host memory these are numpy arrays
    onto the buffer; assigning ``view.x = values`` writes in place. Writes through a const
    view raise.
    """

    __slots__ = ("layout", "size", "const", "memory", "offset", "device", "owner", "_make", "_arrays")

    def __init__(
        self,
        layout: type[Layout],
        n: int,
        memory: Any,
        make_array: ArrayFactory | None = None,
        *,
        offset: int = 0,
        const: bool = False,
        device: Any = None,
        owner: Any = None,
    ) -> None:
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "size", n)
        object.__setattr__(self, "const", const)
        object.__setattr__(self, "memory", memory)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "owner", owner)  # keeps the memory's allocation alive
        object.__setattr__(self, "_make", make_array)
        object.__setattr__(self, "_arrays", {})

    @property
    def make_array(self) -> ArrayFactory | None:
        """The view's array maker (its ``make_array`` argument: ``make(byte_offset, dtype, shape,
        strides)`` gives an array onto the memory), None where the memory is not addressable
        from Python."""
        return self._make

    # ---------------------------------------------------------------- field access
    def __getattr__(self, name: str) -> Any:
        arrays = object.__getattribute__(self, "_arrays")
        try:
            return arrays[name]
        except KeyError:
            pass
        layout = object.__getattribute__(self, "layout")
        placements = layout.placements(self.size)
        if name not in placements:
            raise AttributeError(f"{layout.__name__} view has no field {name!r}; its fields are {layout.field_names()}")
        if self._make is None:
            raise StateError(
                f"{layout.__name__}.{name}: this view's memory is on {self.device} and not "
                "addressable from Python; copy the collection to the host first (coll.to_host(q))"
            )
        p = placements[name]
        shape, strides = field_geometry(p, self.size)
        arr = self._make(self.offset + p.offset, p.field.dtype, shape, strides)
        arrays[name] = arr
        return arr

    def __setattr__(self, name: str, value: Any) -> None:
        if self.const:
            raise AttributeError(f"cannot write {self.layout.__name__}.{name} through a const view")
        arr = self.__getattr__(name)
        arr[...] = value

    def __dir__(self) -> list[str]:
        return list(super().__dir__()) + self.layout.field_names()

    def __repr__(self) -> str:
        kind = "ConstView" if self.const else "View"
        where = f" on {self.device}" if self.device is not None else ""
        return f"<{self.layout.__name__} {kind} of {self.size} elements{where}>"

    def as_const(self) -> View:
        """A const view of the same memory (host memory only; collections make their own)."""
        if not isinstance(self.memory, np.ndarray):
            raise ArgumentTypeError(
                f"as_const() works on views of host (numpy) memory, this one's is {type(self.memory).__name__}; "
                "use collection.const_view() for a collection's const view on any device"
            )
        return View(
            self.layout,
            self.size,
            self.memory,
            host_array_factory(self.memory, const=True, owner=self.owner),
            offset=self.offset,
            const=True,
            device=self.device,
            owner=self.owner,
        )

    def to_dict(self) -> dict[str, np.ndarray]:
        """Copies of every field as numpy arrays, keyed by field name."""
        return {name: np.array(self.__getattr__(name)) for name in self.layout.field_names()}
