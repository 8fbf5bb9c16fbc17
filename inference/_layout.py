"""How a model reads its input blocks (``ModelMetadata(..., layout=...)``): in place, gathered
row-major, or whichever of the two ``"auto"`` measured faster for the geometry.

- ``"zero_copy"`` (the default): the model reads strided tensors over the collection's own columns
  (a block of k columns is ``[n, k]`` at strides ``[1, padded]``);
- ``"gather"``: the blocks that are not row-major are copied into dense row-major tensors first,
  on host memory into buffers the model keeps between passes (one copy per block and pass);
- ``"auto"``: the first pass of a geometry runs the model both ways on its inputs and compares the
  results bit for bit (torch may take another kernel, with another summation order, for a
  transposed input: the 3-64-64-2 MLP differs in the last bits at n = 7 and not at n = 100..65536).
  Where they differ the pass keeps ``"zero_copy"``; where they agree the next ``2 * TRIALS``
  passes alternate between the two, timed where they run (in the thread's CPU time where torch
  runs on the calling thread alone, so other processes on the core do not decide; else in wall
  time, a GPU's stream synchronised), and the faster is kept (zero-copy unless gathering is at
  least ``MARGIN`` faster by the best pass of each). The choice is made once per model, device and
  geometry and kept for the process, so the results of a process never change with it.

AOTInductor packages and ONNX Runtime read row-major tensors whatever is asked: their inputs are
always gathered.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from portable import AlpykaError

#: the layouts ``ModelMetadata(layout=...)`` accepts, the default first
LAYOUTS = ("zero_copy", "gather", "auto")
#: timed passes of each layout before ``"auto"`` keeps one
TRIALS = 3
#: the fraction of zero-copy's time gathering must save to be kept (ties stay in place: no copy)
MARGIN = 0.01
#: decisions a model keeps per device (geometries that change every event: beyond these, a
#: geometry's choice lives as long as its pass spec)
DECISIONS_KEPT = 256


class LayoutError(AlpykaError, ValueError):
    """An unknown ``layout`` for ``ModelMetadata``."""


def check_layout(layout: Any) -> str:
    """``layout`` validated: one of :data:`LAYOUTS`, else a :class:`LayoutError` naming them."""
    if isinstance(layout, str) and layout in LAYOUTS:
        return layout
    raise LayoutError(
        f"layout must be one of {', '.join(repr(name) for name in LAYOUTS)} "
        "('zero_copy': the model reads the columns in place, the default; 'gather': the blocks are "
        "copied into row-major tensors first; 'auto': whichever measured faster for the geometry); "
        f"got {layout!r}"
    )


def row_major(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether elements at ``strides`` are dense row-major for ``shape`` (size-1 axes ignored)."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def same_bits(a: Any, b: Any) -> bool:
    """Whether two model results (a tensor, a sequence or a mapping of tensors) are equal bit for
    bit: same structure, shapes, dtypes and bytes (NaNs compared as bytes)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.is_floating_point or a.dtype.is_complex:
            a, b = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
        return bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    return False


class LayoutTrial:
    """``"auto"``'s measurement for one geometry (see the module doc): :meth:`claim` says what
    the next pass does, :meth:`checked` and :meth:`timed` take its outcome and return the
    layout once it is decided (None until then). Passes of several threads share it."""

    __slots__ = ("lock", "state", "times")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = "check"  # "check" (the bit comparison not done), "checking", "timing"
        self.times: dict[str, list[float]] = {"zero_copy": [], "gather": []}

    def claim(self) -> str | None:
        """``"check"`` (compare the two layouts' results), a layout to run timed, or None (another
        thread is checking: run the pass as the spec says)."""
        with self.lock:
            if self.state == "check":
                self.state = "checking"
                return "check"
            if self.state == "checking":
                return None
            ours, theirs = self.times["zero_copy"], self.times["gather"]
            return "zero_copy" if len(ours) <= len(theirs) else "gather"

    def checked(self, identical: bool) -> str | None:
        """The bit comparison's outcome: ``"zero_copy"`` at once when the results differ."""
        with self.lock:
            self.state = "timing"
        return None if identical else "zero_copy"

    def timed(self, layout: str, seconds: float) -> str | None:
        """One timed pass in ``layout``; the faster layout once both have :data:`TRIALS`."""
        with self.lock:
            self.times[layout].append(seconds)
            ours, theirs = self.times["zero_copy"], self.times["gather"]
            if len(ours) < TRIALS or len(theirs) < TRIALS:
                return None
            return "gather" if min(theirs) < (1 - MARGIN) * min(ours) else "zero_copy"


__all__ = ["LAYOUTS", "MARGIN", "TRIALS", "LayoutError", "LayoutTrial", "check_layout", "row_major", "same_bits"]
