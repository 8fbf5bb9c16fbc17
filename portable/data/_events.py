"""Kernels over events: one event per block, the event's rows over the block's threads.

``pk.from_awkward`` / ``pk.read_root`` give all rows of all events in one collection plus the
event offsets (rows of event ``e`` are ``offsets[e]:offsets[e + 1]``). A kernel walks them so::

    @pk.kernel
    def event_sum(acc, rows, offsets, out, n_events):
        for e in acc.independent_groups(n_events):          # blocks take events
            for i in acc.independent_group_elements(offsets[e], offsets[e + 1]):  # threads take rows
                acc.atomic_add(out, e, rows.pt[i])

    pk.exec(q, pk.event_workdiv(q.device, n_events), event_sum, coll.view(), offsets, out, n_events)

``event_workdiv`` gives one block per event: on GPU-like backends ``rows_per_block`` threads per
block, on CPU backends one thread taking ``rows_per_block`` consecutive rows at a time (CMSSW's
``make_workdiv``). ``independent_groups`` strides by the grid, so fewer blocks than events is
correct too. Per-event results go to a collection of ``n_events`` rows, or, for a variable
number per event (pairs...), to rows at offsets computed on the host (``pair_offsets``).
"""

from __future__ import annotations

import numpy as np

from .._device import Device
from .._errors import ArgumentError
from .._workdiv import WorkDiv, make_workdiv


def event_workdiv(device: Device, n_events: int, rows_per_block: int = 32) -> WorkDiv:
    """One block per event (at least one block), ``rows_per_block`` rows handled per step."""
    if rows_per_block < 1:
        raise ArgumentError(f"rows_per_block must be at least 1, got {rows_per_block}")
    return make_workdiv(device, max(1, int(n_events)), int(rows_per_block))


def pair_offsets(offsets: np.ndarray) -> np.ndarray:
    """Offsets of the unordered pairs ``(i < j)`` of each event's rows: event ``e`` with ``n``
    rows owns ``n * (n - 1) / 2`` pair slots, in ``ak.combinations(..., 2)`` order."""
    off = np.asarray(offsets, dtype=np.int64)
    n = np.diff(off)
    out = np.zeros(len(off), dtype=np.int64)
    np.cumsum(n * (n - 1) // 2, out=out[1:])
    return out
