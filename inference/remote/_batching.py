"""Rectangular batching (split a batch over max_batch_size) and ragged batching (several events
concatenated along the batch axis into one request, outputs split back per event)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from portable import ArgumentError


def chunks(n: int, max_batch: int) -> list[tuple[int, int]]:
    """[start, stop) row ranges of at most ``max_batch`` rows covering ``n`` (``max_batch`` <= 0:
    one range)."""
    if max_batch <= 0 or n <= max_batch:
        return [(0, n)]
    return [(s, min(s + max_batch, n)) for s in range(0, n, max_batch)]


def concatenate(per_event: Sequence[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], list[int]]:
    """One input dict holding every event's rows (batch axis 0) and the row counts per event."""
    if not per_event:
        raise ArgumentError("ragged batching needs at least one event; pass one ModelMetadata per event")
    names = list(per_event[0])
    for i, ev in enumerate(per_event[1:], 1):
        if list(ev) != names:
            raise ArgumentError(
                f"event {i} has input blocks {list(ev)}, event 0 has {names}; give every event the same blocks"
            )
    sizes = [batch_size(ev, i) for i, ev in enumerate(per_event)]
    merged = {n: np.concatenate([ev[n] for ev in per_event], axis=0) for n in names}
    return merged, sizes


def split(outputs: dict[str, np.ndarray], sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Inverse of :func:`concatenate` on the outputs."""
    bounds = np.cumsum([0, *sizes])
    return [{n: a[bounds[i] : bounds[i + 1]] for n, a in outputs.items()} for i in range(len(sizes))]


def batch_size(inputs: dict[str, np.ndarray], event: int | None = None) -> int:
    """The common batch extent of the input blocks (clear error when they disagree)."""
    sizes = {n: (a.shape[0] if a.ndim else 1) for n, a in inputs.items()}
    if len(set(sizes.values())) > 1:
        where = f" of event {event}" if event is not None else ""
        raise ArgumentError(
            f"input blocks{where} disagree on the batch size: {sizes}; give every input block the same rows"
        )
    return next(iter(sizes.values())) if sizes else 0
