"""SoA layouts: where each field of a CMSSW-style Structure-of-Arrays lives in one buffer."""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ._errors import ArgumentError, ArgumentTypeError, NameNotFound
from ._fields import Field

DEFAULT_ALIGNMENT = 128

#: what the kernel compilers append to a field's parameter name (``a0_p`` -> ``a0_p_pitch`` for a
#: vector's pitch, ``_e0``.. for a device function's extents, ``_buf``/``_off`` on OpenCL): a field
#: named like another field plus one of these would give two parameters one name (a build error)
_GENERATED_SUFFIX = re.compile(r"_(pitch|buf|off|e[0-9]+)$")


def check_field_name(layout: str, name: Any) -> None:
    """Refuse a field name that kernels and the generated C, OpenCL C, CUDA and HIP cannot carry:
    it must be an ASCII Python identifier, not a keyword (a kernel reaches a field as
    ``view.name``, and every emitter names the field's parameter after it)."""
    if isinstance(name, str) and name.isascii() and name.isidentifier() and not keyword.iskeyword(name):
        return
    if not isinstance(name, str) or not name:
        why = "empty" if name == "" else f"a {type(name).__name__}, not a string"
    elif not name.isascii():
        why = "not ASCII (the C, OpenCL and CUDA compilers do not all take other letters)"
    elif keyword.iskeyword(name):
        why = f"a Python keyword (a kernel could not write view.{name})"
    else:
        why = "not a Python identifier (letters, digits and _, not starting with a digit)"
    fix = re.sub(r"[^0-9A-Za-z_]", "_", name) if isinstance(name, str) and name else "x"
    if not fix.isidentifier() or keyword.iskeyword(fix) or fix.startswith("_"):
        fix = "f_" + fix.lstrip("_")
    raise ArgumentTypeError(f"{layout}: field name {name!r} is {why}; rename the field, e.g. to {fix!r}")


def round_up(value: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` that is >= ``value``."""
    return -(-value // alignment) * alignment


def checked_size(n: Any, what: str = "size") -> int:
    """Return ``n`` as an int, refusing negative and non-integer sizes."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(
            f"{what} must be a non-negative integer, got {n!r} ({type(n).__name__}); pass a Python or numpy int"
        )
    if n < 0:
        raise ArgumentError(f"{what} must be a non-negative integer (0 or more elements), got {n}")
    return int(n)


@dataclass(frozen=True)
class Placement:
    """Where one field lives for a given number of elements.

    ``offset`` is in bytes from the start of the layout; ``pitch`` is the byte distance between
    two components of a vector/matrix (the padded size of one column); ``size`` is the number of
    bytes holding data, ``padding`` the bytes added after each component to reach the alignment.
    """

    field: Field
    offset: int
    pitch: int
    size: int
    padding: int

    @property
    def nbytes(self) -> int:
        """Bytes the field occupies, padding included."""
        return self.pitch * self.field.components

    @property
    def padded_elements(self) -> int:
        """Elements per component column including padding (``pitch / itemsize``)."""
        return self.pitch // self.field.itemsize


class Layout:
    """Base class of SoA layouts.

    Subclass it and declare fields in order; keyword ``alignment`` (bytes, a power of two,
    default 128) and ``alignment_enforcement`` (``"relaxed"`` or ``"enforced"``) configure it::

        class Hits(soa.Layout, alignment=64):
            x = soa.column(np.float32)
            n_valid = soa.scalar(np.int32)
    """

    fields: ClassVar[tuple[Field, ...]] = ()
    alignment: ClassVar[int] = DEFAULT_ALIGNMENT
    alignment_enforcement: ClassVar[str] = "relaxed"

    def __init_subclass__(
        cls, alignment: int | None = None, alignment_enforcement: str | None = None, **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        if alignment is not None:
            if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
                raise ArgumentError(
                    f"{cls.__name__}: alignment must be a power of two in bytes (e.g. 64 or 128, the default), "
                    f"got {alignment!r}"
                )
            cls.alignment = alignment
        if alignment_enforcement is not None:
            if alignment_enforcement not in ("relaxed", "enforced"):
                raise ArgumentError(
                    f"{cls.__name__}: alignment_enforcement must be 'relaxed' or 'enforced', "
                    f"got {alignment_enforcement!r}"
                )
            cls.alignment_enforcement = alignment_enforcement
        # the bases' fields: a field named "fields" shadows the attribute in cls itself (refused below)
        inherited = list(next(b.__dict__["fields"] for b in cls.__mro__[1:] if "fields" in b.__dict__))
        own = [v for v in vars(cls).values() if isinstance(v, Field)]
        names = {f.name for f in inherited}
        for f in own:
            check_field_name(cls.__name__, f.name)
            if f.name in names:
                raise ArgumentTypeError(
                    f"{cls.__name__}: field {f.name!r} is declared twice (here and in a base layout, or one "
                    "field object under two names); give each field its own name and its own soa.column(...)"
                )
            if f.name.startswith("_") or f.name in _RESERVED:
                raise ArgumentTypeError(
                    f"{cls.__name__}: field name {f.name!r} is reserved (a layout or view attribute, or a leading _); "
                    f"rename the field, e.g. to {f.name.lstrip('_') + '_'!r}"
                )
            f.validate(cls.__name__)
            names.add(f.name)
        cls.fields = tuple(inherited + own)
        for f in cls.fields:
            m = _GENERATED_SUFFIX.search(f.name)
            if m and f.name[: m.start()] in names:
                what = {"pitch": "pitch", "buf": "OpenCL buffer", "off": "OpenCL offset"}.get(m.group(1), "extent")
                raise ArgumentTypeError(
                    f"{cls.__name__}: field name {f.name!r} is field {f.name[: m.start()]!r} followed by "
                    f"{m.group()!r}, the name kernels give that field's {what} parameter (two parameters "
                    f"of one name); rename it, e.g. to {f.name[: m.start()] + m.group()[1:]!r}"
                )
        for f in cls.fields:
            if cls.alignment % f.itemsize:
                raise ArgumentError(
                    f"{cls.__name__}.{f.name}: alignment {cls.alignment} is not a multiple of "
                    f"the item size {f.itemsize} of {f.dtype}; declare the layout with alignment={f.itemsize} or more "
                    "(a power of two)"
                )
        cls._placement_cache: dict[int, dict[str, Placement]] = {}

    def __init__(self) -> None:
        raise ArgumentTypeError(
            f"{type(self).__name__} is a layout description, not a value; make a collection of it: "
            f"pk.PortableCollection({type(self).__name__}, n, q)"
        )

    # ------------------------------------------------------------------ arithmetic
    @classmethod
    def field(cls, name: str) -> Field:
        """The field called ``name``; a NameNotFound (a KeyError) lists the layout's fields."""
        for f in cls.fields:
            if f.name == name:
                return f
        raise NameNotFound(f"{cls.__name__} has no field {name!r}; its fields are {cls.field_names()}")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in cls.fields]

    @classmethod
    def placements(cls, n: int) -> dict[str, Placement]:
        """Offsets, pitches and padding of every field for ``n`` elements (CMSSW arithmetic)."""
        n = checked_size(n)
        cached = cls._placement_cache.get(n)
        if cached is not None:
            return cached
        out: dict[str, Placement] = {}
        offset = 0
        for f in cls.fields:
            size = f.itemsize if f.kind == "scalar" else n * f.itemsize
            pitch = round_up(size, cls.alignment)
            out[f.name] = Placement(f, offset, pitch, size, pitch - size)
            offset += pitch * f.components
        if len(cls._placement_cache) < 256:
            cls._placement_cache[n] = out
        return out

    @classmethod
    def byte_size(cls, n: int) -> int:
        """Bytes of a buffer holding ``n`` elements (CMSSW ``computeDataSize``)."""
        return sum(p.nbytes for p in cls.placements(n).values())

    @classmethod
    def padded_size(cls, n: int, dtype: Any) -> int:
        """``n`` rounded up to whole alignment units of ``dtype`` (elements per padded column)."""
        return round_up(checked_size(n), cls.alignment // np.dtype(dtype).itemsize)

    @classmethod
    def describe(cls, n: int) -> str:
        """A printable table of offsets, pitches and padding, like CMSSW's layout ``operator<<``."""
        ps = cls.placements(n)
        lines = [
            f"{cls.__name__}({checked_size(n)} elements, byte alignment={cls.alignment}, "
            f"{cls.alignment_enforcement}): {cls.byte_size(n)} bytes"
        ]
        width = max([len(f.name) for f in cls.fields] + [4])
        lines.append(
            f"  {'name':<{width}}  {'kind':<10}  {'dtype':<10} {'offset':>10} {'size':>10} "
            f"{'padding':>8} {'pitch':>10} {'comps':>5}"
        )
        for name, p in ps.items():
            f = p.field
            kind = f.kind + ("" if not f.shape else "x".join(map(str, f.shape)))
            lines.append(
                f"  {name:<{width}}  {kind:<10}  {str(f.dtype):<10} {p.offset:>10} {p.size:>10} "
                f"{p.padding:>8} {p.pitch:>10} {f.components:>5}"
            )
        return "\n".join(lines)

    @classmethod
    def check_alignment(cls, address: int) -> None:
        """Raise if the layout enforces alignment and ``address`` is not aligned."""
        if cls.alignment_enforcement == "enforced" and address % cls.alignment:
            raise ArgumentError(
                f"{cls.__name__}: buffer at 0x{address:x} is not aligned to {cls.alignment} bytes (the layout is "
                "declared alignment_enforcement='enforced'); allocate it with pk.Buffer or numpy memory aligned to that"
            )

    @classmethod
    def iter_fields(cls, kind: str | None = None) -> Iterator[Field]:
        return (f for f in cls.fields if kind is None or f.kind == kind)


_RESERVED = {
    "fields",
    "alignment",
    "alignment_enforcement",
    "field",
    "field_names",
    "placements",
    "byte_size",
    "padded_size",
    "describe",
    "check_alignment",
    "iter_fields",
    "layout",
    "size",
    "const",
    "device",
    "memory",
    "to_dict",
    "make_array",
}


def block_offsets(blocks: list[tuple[type[Layout], int]]) -> tuple[list[int], int]:
    """Byte offsets of several layouts stored one after another in one buffer (CMSSW SoABlocks).

    Each block starts at a multiple of its own layout's alignment. Returns the offsets and the
    total byte size.
    """
    offsets, end = [], 0
    for layout, n in blocks:
        start = round_up(end, layout.alignment)
        offsets.append(start)
        end = start + layout.byte_size(n)
    return offsets, end
