"""PortableCollection: SoA data of one or several layouts in one aligned buffer of one device."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

import soa

from ._buffer import Buffer
from ._device import Device
from ._queue import Queue

_BUFFER_ALIGNMENT = 128


def _normalise(layout: Any, size: Any) -> list[tuple[str, type[soa.Layout], int]]:
    """``[(name, layout, n), ...]`` from a layout and a size, or sequences/dicts of them."""
    if isinstance(layout, type) and issubclass(layout, soa.Layout):
        return [(layout.__name__, layout, soa.checked_size(size, f"size of {layout.__name__} collection"))]
    if isinstance(layout, Mapping):
        names, layouts = list(layout.keys()), list(layout.values())
        if not isinstance(size, Mapping) or set(size) != set(names):
            raise ValueError(f"sizes of a multi-layout collection must be a dict with keys {names}")
        sizes = [size[k] for k in names]
    elif isinstance(layout, Sequence) and not isinstance(layout, str):
        layouts = list(layout)
        names = [getattr(lay, "__name__", str(lay)) for lay in layouts]
        if isinstance(size, (int, np.integer)) or len(size) != len(layouts):
            raise ValueError(f"a collection of {len(layouts)} layouts needs {len(layouts)} sizes, got {size!r}")
        sizes = list(size)
        if len(set(names)) != len(names):
            raise ValueError("layouts of a multi-layout collection must differ; pass a dict to name them")
    else:
        raise TypeError(f"PortableCollection needs a soa.Layout subclass (or several), got {layout!r}")
    out = []
    for name, lay, n in zip(names, layouts, sizes):
        if not (isinstance(lay, type) and issubclass(lay, soa.Layout)):
            raise TypeError(f"block {name!r}: {lay!r} is not a soa.Layout subclass")
        out.append((str(name), lay, soa.checked_size(n, f"size of block {name!r}")))
    if not out:
        raise ValueError("a collection needs at least one layout")
    return out


class PortableCollection:
    """``PortableCollection(Layout, n, queue_or_device)``: ``n`` elements of ``Layout`` in one
    buffer of the device (of the queue, which then orders the allocation).

    Several layouts in one buffer (CMSSW SoABlocks): ``PortableCollection([Hits, Tracks],
    [n_hits, n_tracks], q)`` or a dict ``{"hits": Hits, ...}`` with a dict of sizes; select a
    block with ``coll.view("hits")`` or ``coll["hits"]``. On host-memory devices the fields are
    numpy arrays onto the buffer: ``coll.x`` is ``coll.view().x``.
    """

    def __init__(self, layout: Any, size: Any, queue_or_device: Queue | Device, *, pinned: bool = False) -> None:
        if isinstance(queue_or_device, Queue):
            queue, device = queue_or_device, queue_or_device.device
        elif isinstance(queue_or_device, Device):
            queue, device = None, queue_or_device
        else:
            raise TypeError(f"PortableCollection needs a pk.Queue or pk.Device, got {type(queue_or_device).__name__}")
        self._blocks = _normalise(layout, size)
        offsets, total = soa.block_offsets([(lay, n) for _, lay, n in self._blocks])
        self._offsets = offsets
        self.nbytes = total
        self.device = device
        align = max([_BUFFER_ALIGNMENT] + [lay.alignment for _, lay, _ in self._blocks])
        self.buffer = Buffer(device, (total,), np.uint8, pinned=pinned, queue=queue, alignment=align)
        for (_, lay, _), off in zip(self._blocks, offsets):
            if self.buffer.ptr:
                lay.check_alignment(self.buffer.ptr + off)
        self._views: dict[tuple[int, bool], soa.View] = {}

    # ------------------------------------------------------------------ description
    @property
    def layout(self) -> type[soa.Layout]:
        """The layout (of the only block; use ``layouts`` for multi-layout collections)."""
        return self._single()[1]

    @property
    def size(self) -> int:
        """Number of elements (of the only block; ``sizes`` for multi-layout collections)."""
        return self._single()[2]

    @property
    def layouts(self) -> dict[str, type[soa.Layout]]:
        return {name: lay for name, lay, _ in self._blocks}

    @property
    def sizes(self) -> dict[str, int]:
        return {name: n for name, _, n in self._blocks}

    @property
    def block_names(self) -> list[str]:
        return [name for name, _, _ in self._blocks]

    def _single(self) -> tuple[str, type[soa.Layout], int]:
        if len(self._blocks) != 1:
            raise ValueError(f"this collection holds blocks {self.block_names}; name one")
        return self._blocks[0]

    def _index(self, which: Any) -> int:
        if which is None:
            self._single()
            return 0
        for i, (name, lay, _) in enumerate(self._blocks):
            if which == name or which is lay or which == i:
                return i
        raise KeyError(f"collection has no block {which!r}; its blocks are {self.block_names}")

    def block_offset(self, which: Any = None) -> int:
        """Byte offset of a block inside the buffer."""
        return self._offsets[self._index(which)]

    # ------------------------------------------------------------------ views
    def view(self, which: Any = None) -> soa.View:
        """The (mutable) view of a block: the kernel argument and, on the host, numpy columns."""
        return self._view(self._index(which), False)

    def const_view(self, which: Any = None) -> soa.View:
        """A read-only view of a block."""
        return self._view(self._index(which), True)

    def _view(self, i: int, const: bool) -> soa.View:
        key = (i, const)
        v = self._views.get(key)
        if v is None:
            _, lay, n = self._blocks[i]
            make = self.device.backend.array_factory(self.buffer, const)
            v = soa.View(lay, n, self.buffer.handle, make, offset=self._offsets[i], const=const,
                         device=self.device, owner=self.buffer)
            self._views[key] = v
        return v

    def __getitem__(self, which: Any) -> soa.View:
        return self.view(which)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if len(self._blocks) == 1 and name in self._blocks[0][1].field_names():
            return getattr(self.view(), name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # ------------------------------------------------------------------ interchange (bytes of the buffer)
    @property
    def __cuda_array_interface__(self) -> dict:
        return self.buffer.__cuda_array_interface__

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.buffer.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buffer.__dlpack_device__()

    # ------------------------------------------------------------------ data movement
    def check_same_shape(self, other: "PortableCollection") -> None:
        """Raise unless ``other`` has the same layouts and sizes (a copy between them is exact)."""
        mine = [(lay, n) for _, lay, n in self._blocks]
        theirs = [(lay, n) for _, lay, n in other._blocks]
        if mine != theirs:
            def desc(bs: list) -> str:
                return ", ".join(f"{lay.__name__}[{n}]" for lay, n in bs)

            raise ValueError(f"collections differ in layout or size: {desc(mine)} vs {desc(theirs)}")

    def zero(self, queue: Queue | None = None) -> "PortableCollection":
        """Enqueue setting every byte to 0 (on ``queue``, or synchronously when None)."""
        from ._memory import memset

        q = queue if queue is not None else Queue(self.device, blocking=True)
        memset(q, self, 0)
        return self

    def _like(self, target: Queue | Device, pinned: bool = False) -> "PortableCollection":
        blocks = {name: lay for name, lay, _ in self._blocks}
        sizes = {name: n for name, _, n in self._blocks}
        if len(self._blocks) == 1:
            return PortableCollection(self.layout, self.size, target, pinned=pinned)
        return PortableCollection(blocks, sizes, target, pinned=pinned)

    def to(self, device: Device, queue: Queue) -> "PortableCollection":
        """A copy on ``device``, enqueued on ``queue`` (asynchronous: wait before reading)."""
        from ._memory import memcpy

        target = queue if queue.device is device else device
        out = self._like(target)
        memcpy(queue, out, self)
        return out

    def to_host(self, queue: Queue) -> "PortableCollection":
        """A host copy (pinned when the source is GPU memory), enqueued on ``queue``."""
        from ._registry import host

        h = host()
        out = self._like(h, pinned=not self.device.is_host_memory)
        from ._memory import memcpy

        memcpy(queue, out, self)
        return out

    def to_dict(self, queue: Queue | None = None, which: Any = None) -> dict[str, np.ndarray]:
        """Copies of every field of a block as numpy arrays (waits for ``queue`` first)."""
        src = self if self.device.is_host_memory else self.to_host(queue or Queue(self.device, blocking=True))
        if queue is not None:
            queue.wait()
        return src.view(which).to_dict()

    @classmethod
    def from_dict(cls, layout: type[soa.Layout], data: Mapping[str, Any], queue_or_device: Queue | Device) -> "PortableCollection":
        """A collection of ``layout`` filled from ``{field: array}``; every field must be given,
        columns with the same length n. The copy to a device is enqueued on the queue."""
        names = layout.field_names()
        missing = [k for k in names if k not in data]
        extra = [k for k in data if k not in names]
        if missing or extra:
            raise KeyError(f"from_dict for {layout.__name__}: missing fields {missing}, unknown fields {extra}")
        lengths = {k: len(np.asarray(data[k])) for k in names if layout.field(k).kind != "scalar"}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"from_dict for {layout.__name__}: columns differ in length: {lengths}")
        n = next(iter(lengths.values()), 0)
        device = queue_or_device.device if isinstance(queue_or_device, Queue) else queue_or_device
        host_coll = cls(layout, n, queue_or_device if device.is_host_memory else _host_device())
        v = host_coll.view()
        for k in names:
            arr = np.asarray(data[k])
            target = getattr(v, k)
            if arr.shape != target.shape:
                raise ValueError(f"from_dict: field {k!r} has shape {arr.shape}, the layout needs {target.shape}")
            target[...] = arr
        if device.is_host_memory:
            return host_coll
        q = queue_or_device if isinstance(queue_or_device, Queue) else Queue(device, blocking=True)
        return host_coll.to(device, q)

    def __repr__(self) -> str:
        blocks = ", ".join(f"{lay.__name__}[{n}]" for _, lay, n in self._blocks)
        return f"<PortableCollection {blocks} on {self.device}, {self.nbytes} bytes>"


def _host_device() -> Device:
    from ._registry import host

    return host()
