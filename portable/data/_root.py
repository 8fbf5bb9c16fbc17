"""ROOT files through uproot: TTree/RNTuple branches -> a PortableCollection + event offsets.

``pk.read_root(path, "Events", Muons, q, branches={"pt": "Muon_pt", ...})`` opens the file once,
reads only the branches asked for (uproot's cost is per branch), and hands the arrays to
:func:`portable.from_awkward`. ``pk.iterate_root`` does the same chunk by chunk, and
``pk.root_chunks`` splits a file into entry ranges (e.g. the chunks of ``pk.distributed.run``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import soa

from .._collection import PortableCollection
from .._device import Device
from .._errors import AlpykaError, ArgumentError, ArgumentTypeError, FileNotFound, NameNotFound
from .._queue import Queue
from ._awkward import _field_map, from_awkward, require


class NotARootFile(AlpykaError, ValueError):
    """The path is not a ROOT file (or not one uproot can read)."""


class CorruptRootFile(NotARootFile):
    """A ROOT file whose branch data cannot be read: truncated or corrupt."""


def _read_arrays(obj: Any, needed: list[str], start: int, stop: int, path: str, tree: str) -> Any:
    """``obj.arrays(needed)`` over ``[start, stop)``; CorruptRootFile naming the file, the first
    branch that cannot be read and the reason where the data is damaged."""
    try:
        if any("." in b for b in needed):
            # split branches (Delphes' Jet.PT, Muon.pt): uproot's arrays() nests them as records
            # ({Jet: {PT}}); read each by its full name and put them side by side
            ak = require("awkward")
            return ak.zip(
                {b: obj[b].array(entry_start=start, entry_stop=stop, library="ak") for b in needed}, depth_limit=1
            )
        return obj.arrays(needed, entry_start=start, entry_stop=stop, library="ak")
    except Exception as exc:  # noqa: BLE001 - sorted out below: which branch, and whether damage
        first = exc
    for b in needed:  # find the branch: read each alone
        try:
            obj[b].array(entry_start=start, entry_stop=stop, library="ak")
        except _damage_errors() as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise CorruptRootFile(
                f"{path}:{tree}: branch {b!r} cannot be read (entries {start}-{stop}): "
                f"the file is truncated or corrupt ({reason})"
            ) from exc
    raise first


def _damage_errors() -> tuple[type[BaseException], ...]:
    """What reading damaged or missing bytes raises (uproot's deserialisation, the decompressors,
    a short read); anything else (an unsupported type, memory) is raised as it is."""
    import struct
    import zlib

    kinds: list[type[BaseException]] = [OSError, EOFError, ValueError, IndexError, KeyError, struct.error, zlib.error]
    try:
        from uproot.deserialization import DeserializationError

        kinds.append(DeserializationError)
    except ImportError:  # pragma: no cover - uproot is there when a file is being read
        pass
    return tuple(kinds)


@dataclass(frozen=True)
class RootChunk:
    """Entries ``[entry_start, entry_stop)`` of ``tree`` in the ROOT file at ``path`` (picklable:
    a chunk for :func:`portable.distributed.run`)."""

    path: str
    tree: str
    entry_start: int
    entry_stop: int

    def read(
        self,
        layout: type[soa.Layout],
        queue_or_device: Queue | Device,
        branches: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> tuple[PortableCollection, Any]:
        """``read_root`` of this chunk."""
        return read_root(
            self.path,
            self.tree,
            layout,
            queue_or_device,
            branches=branches,
            entry_start=self.entry_start,
            entry_stop=self.entry_stop,
            **kw,
        )


def open_tree(path: str | os.PathLike, tree: str) -> Any:
    """The uproot TTree or RNTuple ``tree`` in ``path``; clear errors for a missing file, a file
    that is not ROOT and a missing tree (naming the ones there are)."""
    uproot = require("uproot")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFound(f"no such ROOT file: {path}; give the path of a ROOT file on this machine's file system")
    if os.path.isdir(path):  # open() said only "[Errno 21] Is a directory"
        raise NotARootFile(f"{path} is a directory, not a ROOT file; give the path of a ROOT file (in it)")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"root":
        raise NotARootFile(f"{path} is not a ROOT file (it starts with {magic!r}, a ROOT file with b'root')")
    try:
        f = uproot.open(path)
    except Exception as exc:
        reason = " ".join(str(exc).split())  # uproot's message spans lines: errors are one line
        raise NotARootFile(f"{path}: uproot cannot read it as a ROOT file (truncated or corrupt?): {reason}") from exc
    try:
        obj = f[tree]
    except Exception as exc:
        names = sorted({k.split(";")[0] for k in f.keys(recursive=False)})
        f.close()
        if tree in names:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise CorruptRootFile(
                f"{path}: tree {tree!r} is listed but cannot be read: the file is truncated or corrupt ({reason})"
            ) from exc
        hint = difflib.get_close_matches(tree, names, n=1)
        raise NameNotFound(
            f"{path} has no tree {tree!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; it holds {names}"
        ) from exc
    if not hasattr(obj, "arrays") or not hasattr(obj, "num_entries"):
        f.close()
        raise ArgumentTypeError(
            f"{path}: {tree!r} is a {type(obj).__name__}, not a TTree or RNTuple; name a tree of the file"
        )
    return obj


def _branches(layout: type[soa.Layout], branches: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    return _field_map(layout, branches)


def _check_branches(obj: Any, wanted: dict[str, tuple[str, ...]], path: str, tree: str) -> list[str]:
    have = list(obj.keys())
    needed = sorted({b for names in wanted.values() for b in names})
    missing = [b for b in needed if b not in have]
    if missing:
        parts = []
        for b in missing:
            col = next(c for c, names in wanted.items() if b in names)
            hint = difflib.get_close_matches(b, have, n=1)
            parts.append(f"{b!r} (column {col!r}{', did you mean ' + repr(hint[0]) + '?' if hint else ''})")
        raise NameNotFound(f"{path}:{tree} has no branch " + ", ".join(parts) + "; pass branches={column: branch}")
    return needed


def read_root(
    path: str | os.PathLike,
    tree: str,
    layout: type[soa.Layout],
    queue_or_device: Queue | Device,
    *,
    branches: Mapping[str, Any] | None = None,
    entry_start: int | None = None,
    entry_stop: int | None = None,
    casting: str = "same_value",
    report: dict | None = None,
) -> tuple[PortableCollection, Any]:
    """``(collection, offsets)`` of entries ``[entry_start, entry_stop)`` of ``tree`` (a TTree
    or an RNTuple) in ``path``: each column from the branch ``branches[column]`` (default: the
    column's name; a vector column takes one branch per component). Only those branches are
    read. The result is :func:`portable.from_awkward`'s; ``casting`` and ``report`` are too."""
    _entry_bound(entry_start, "entry_start"), _entry_bound(entry_stop, "entry_stop")
    obj = open_tree(path, tree)
    try:
        wanted = _branches(layout, branches)
        needed = _check_branches(obj, wanted, os.fspath(path), tree)
        start, stop = entry_range(entry_start, entry_stop, int(obj.num_entries))
        arrays = _read_arrays(obj, needed, start, stop, os.fspath(path), tree)
    finally:
        close_tree(obj)
    fields = {col: names if len(names) > 1 else names[0] for col, names in wanted.items()}
    return from_awkward(layout, arrays, queue_or_device, fields=fields, casting=casting, report=report)


def _entry_bound(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an integer entry number (or None), got {value!r}")
    return int(value)


def entry_range(entry_start: Any, entry_stop: Any, total: int) -> tuple[int, int]:
    """``(start, stop)`` with uproot's rules: None means the first / past the last entry, a
    negative bound counts from the end, both are clamped to ``[0, total]`` and ``stop >= start``.
    TypeError for a bound that is not an integer (``1.5``, ``True``)."""
    start, stop = _entry_bound(entry_start, "entry_start"), _entry_bound(entry_stop, "entry_stop")
    start = 0 if start is None else start + total if start < 0 else start
    stop = total if stop is None else stop + total if stop < 0 else stop
    start = min(total, max(0, start))
    stop = min(total, max(0, stop))
    return start, max(start, stop)


def close_tree(obj: Any) -> None:
    """Close the file an :func:`open_tree` result was read from."""
    f = getattr(obj, "file", None)
    if f is not None and hasattr(f, "close"):
        f.close()


def root_chunks(
    path: str | os.PathLike, tree: str, entries_per_chunk: int, *, entry_start: int = 0, entry_stop: int | None = None
) -> list[RootChunk]:
    """The entry ranges of ``tree`` cut into chunks of ``entries_per_chunk`` entries, from
    ``entry_start`` to ``entry_stop`` (:func:`entry_range`'s rules: negative counts from the end)."""
    n = soa.checked_size(entries_per_chunk, "entries_per_chunk")
    if n < 1:
        raise ArgumentError(f"entries_per_chunk must be at least 1, got {n}")
    _entry_bound(entry_start, "entry_start"), _entry_bound(entry_stop, "entry_stop")
    obj = open_tree(path, tree)
    total = int(obj.num_entries)
    close_tree(obj)
    start, stop = entry_range(entry_start, entry_stop, total)
    return [RootChunk(os.fspath(path), tree, a, min(a + n, stop)) for a in range(start, stop, n)]


def iterate_root(
    path: str | os.PathLike,
    tree: str,
    layout: type[soa.Layout],
    queue_or_device: Queue | Device,
    *,
    entries_per_chunk: int = 100_000,
    branches: Mapping[str, Any] | None = None,
    casting: str = "same_value",
) -> Iterator[tuple[PortableCollection, Any, RootChunk]]:
    """``(collection, offsets, chunk)`` for each chunk of ``entries_per_chunk`` entries: a file
    larger than memory, one chunk at a time."""
    for chunk in root_chunks(path, tree, entries_per_chunk):
        coll, offsets = chunk.read(layout, queue_or_device, branches, casting=casting)
        yield coll, offsets, chunk
