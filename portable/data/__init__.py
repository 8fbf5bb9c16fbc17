"""Data in and out of collections: awkward arrays, ROOT files (uproot), kernels over events.

``pk.from_awkward`` / ``pk.to_awkward`` move jagged arrays into SoA collections plus event
offsets and back; ``pk.read_root`` / ``pk.iterate_root`` / ``pk.root_chunks`` read TTrees and
RNTuples; ``pk.event_workdiv`` and ``pk.pair_offsets`` shape kernels over events (docs/data.md).
awkward and uproot are imported on first use.
"""

from ._awkward import from_awkward, offsets_to_host, to_awkward
from ._events import event_workdiv, pair_offsets
from ._root import CorruptRootFile, NotARootFile, RootChunk, close_tree, iterate_root, open_tree, read_root, root_chunks

__all__ = [
    "CorruptRootFile",
    "NotARootFile",
    "RootChunk",
    "close_tree",
    "event_workdiv",
    "from_awkward",
    "iterate_root",
    "offsets_to_host",
    "open_tree",
    "pair_offsets",
    "read_root",
    "root_chunks",
    "to_awkward",
]
