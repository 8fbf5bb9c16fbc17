"""What a model reads and writes: named blocks of SoA columns (``SoAMetadata``) and the pair of
inputs and outputs a forward pass uses (``ModelMetadata``).

Stable contract (used by ``inference.remote``)::

    meta = SoAMetadata(coll, which=None)          # which: block of a multi-layout collection
    meta.append_block("features", "x", "y", "z")  # chainable; columns adjacent, one dtype
    meta.append_block("cands", "px", "py", rows_per_item=64)  # [n / 64, 64, 2]: 64 rows per item
    meta.change_order(["features", ...])          # reorder the blocks (a permutation)
    meta.block_names                               # ordered names
    b = meta.block("features")                     # .name .columns .dtype (numpy) .shape .strides (elements)
    meta.tensor("features")                        # torch tensor over the collection memory
    meta.numpy("features")                         # zero-copy view on host memory, a host copy otherwise
    meta.write_outputs({"preds": arr})             # validates every output first, then writes
    meta.collection, meta.size                     # the collection, the batch size n
    ModelMetadata(inputs, outputs, batch_size=None, layout="zero_copy")  # .inputs .outputs .batch_size .layout
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

import portable as pk
from portable import ArgumentError, ArgumentTypeError, NameNotFound, StateError
from portable.caches import LRUCache

from ._block import Block, make_block
from ._layout import check_layout
from ._tensors import (
    Staging,
    block_numpy,
    block_tensor,
    enqueue_from_staging,
    enqueue_to_staging,
    flat_tensor,
    torch_dtype,
)
from ._torch_queue import PATH_NAMES, keep_for_stream, memory_path, queue_stream, wait_for_streams

#: the prepared passes a ModelMetadata keeps (one per model; a metadata used by many models keeps
#: those used last)
PLANS_KEPT = 8
#: collection -> {dtype: flat tensor over its buffer}, shared by every SoAMetadata of that
#: collection (a producer builds metadata per event). The tensors reference the buffer's memory,
#: never the collection, so an entry goes when its collection does (no lock on that path).
_FLATS: weakref.WeakKeyDictionary[Any, dict[np.dtype, torch.Tensor]] = weakref.WeakKeyDictionary()
#: collection -> the maker of numpy arrays over its host memory (``Backend.array_factory``: the
#: arrays keep the buffer alive, the maker does not keep the collection), shared likewise
_MAKERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
#: guards the blocks of every SoAMetadata (appended or reordered rarely, read once per prepared pass)
_LOCK = threading.Lock()


class SoAMetadata:
    """Named blocks of columns of one collection (or one block of a multi-layout collection),
    each seen by a model as one strided tensor (shapes and strides: :mod:`inference._block`)."""

    def __init__(self, collection: pk.PortableCollection, which: Any = None) -> None:
        if not isinstance(collection, pk.PortableCollection):
            raise ArgumentTypeError(f"SoAMetadata needs a pk.PortableCollection, got {type(collection).__name__}")
        view = collection.view(which)  # KeyError listing the blocks for an unknown `which`
        self.collection = collection
        self.which = which
        self.layout = view.layout
        self.size: int = view.size
        self._view = view  # its array maker (host memory: numpy arrays over the collection's memory)
        self._view_offset: int = view.offset
        self._blocks: dict[str, Block] = {}
        self._lock = _LOCK  # edits of the blocks are rare and short: one lock for all metadata
        self._flat: dict[np.dtype, torch.Tensor] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        self._order: tuple[tuple[str, ...], tuple[Block, ...]] | None = None  # (names, blocks), cached

    # ------------------------------------------------------------------ description
    def append_block(self, name: str, *columns: str | Sequence[str], rows_per_item: int = 1) -> SoAMetadata:
        """Add block ``name`` made of ``columns`` (adjacent in the layout, one dtype and kind).

        ``rows_per_item=R``: the model's batch axis takes R consecutive rows as one item, the
        block's tensor is ``[n / R, R, ...]`` (a view): a collection of one row per candidate
        read by a model of ``[events, candidates, features]``."""
        if len(columns) == 1 and not isinstance(columns[0], str):
            columns = tuple(columns[0])  # append_block("f", ["x", "y"])
        if name in self._blocks:
            raise ArgumentError(f"block {name!r} is already defined ({self._blocks[name]!r})")
        block = make_block(
            self.layout,
            self.size,
            self._view_offset,
            name,
            columns,  # type: ignore[arg-type]
            rows_per_item,
        )
        try:
            torch_dtype(block.dtype)  # a dtype torch lacks (np.longdouble) is refused here, not at a forward
        except ArgumentTypeError as exc:
            raise ArgumentTypeError(f"block {name!r}: {exc}") from None
        with self._lock:
            self._blocks[name] = block
            self._order = None
        return self

    def change_order(self, names: Iterable[str]) -> SoAMetadata:
        """Reorder the blocks (the order in which a model receives or returns them)."""
        names = list(names)
        if sorted(names) != sorted(self._blocks) or len(set(names)) != len(names):
            raise ArgumentError(f"change_order needs a permutation of {self.block_names}, got {names}")
        with self._lock:
            self._blocks = {n: self._blocks[n] for n in names}
            self._order = None
        return self

    @property
    def block_names(self) -> list[str]:
        return list(self._blocks)

    def ordered(self) -> tuple[tuple[str, ...], tuple[Block, ...]]:
        """``(names, blocks)`` in order, as tuples (cached until the blocks change)."""
        order = self._order
        if order is None:
            with self._lock:
                order = self._order = (tuple(self._blocks), tuple(self._blocks.values()))
        return order

    @property
    def blocks(self) -> list[Block]:
        return list(self._blocks.values())

    def block(self, name: str) -> Block:
        try:
            return self._blocks[name]
        except KeyError:
            raise NameNotFound(f"no block {name!r}; the blocks are {self.block_names}: name one of those") from None

    @property
    def device(self) -> pk.Device:
        return self.collection.device

    @property
    def path(self) -> str:
        """``"host"``/``"cuda"`` (zero copies) or ``"copy"`` (staged through host memory)."""
        return memory_path(self.collection.device)

    @property
    def zero_copy(self) -> bool:
        return self.path != "copy"

    def __repr__(self) -> str:
        blocks = ", ".join(f"{b.name}{list(b.shape)}" for b in self._blocks.values())
        which = f"[{self.which!r}]" if self.which is not None else ""
        return (
            f"<SoAMetadata of {self.layout.__name__}{which} n={self.size} on {self.collection.device}: "
            f"{blocks or 'no blocks'}; {PATH_NAMES[self.path]}>"
        )

    # ------------------------------------------------------------------ tensors
    def _flat_tensor(self, dtype: np.dtype) -> torch.Tensor:
        flat = self._flat.get(dtype)
        if flat is None:
            shared = _FLATS.get(self.collection)
            if shared is None:
                shared = _FLATS.setdefault(self.collection, {})
            flat = shared.get(dtype)
            if flat is None:
                flat = shared[dtype] = flat_tensor(self.collection.buffer, dtype, self.collection.nbytes)
            self._flat[dtype] = flat
        return flat

    def host_arrays(self, places: Sequence[tuple[int, np.dtype, tuple[int, ...], tuple[int, ...]]]) -> list[np.ndarray]:
        """Numpy views over the collection's host memory, one per ``(byte offset, dtype, shape,
        byte strides)`` (a block's: :func:`array_places`): what a prepared pass on the CPU reads
        and writes, no torch tensor made."""
        make = self._view.make_array  # the collection's view's maker, made once per collection
        if make is None:
            coll = self.collection
            make = _MAKERS.get(coll)
            if make is None:
                make = _MAKERS[coll] = coll.device.backend.array_factory(coll.buffer, False)
        return [make(*place) for place in places]

    def device_tensor(self, name: str) -> torch.Tensor:
        """The block's tensor over the collection's own memory (zero-copy paths only)."""
        t = self._tensors.get(name)
        if t is None:
            block = self.block(name)
            if memory_path(self.collection.device) == "copy":
                raise StateError(
                    f"memory of {self.collection.device} is not addressable from torch; use the copy path "
                    "(the model's host tensors)"
                )
            t = self._tensors[name] = block_tensor(self._flat_tensor(block.dtype), block)
        return t

    def tensor(self, name: str) -> torch.Tensor:
        """The block as a torch tensor over the collection's memory (no copy) on host, CUDA and
        ROCm memory; on the copy path a tensor over a fresh host copy (writes do not reach the
        collection: use :meth:`write_outputs`). Read it once the producing work has finished."""
        t = self._tensors.get(name)  # made once per block: only on the zero-copy paths
        if t is not None:
            return t
        if memory_path(self.collection.device) != "copy":
            return self.device_tensor(name)
        self.collection.buffer.wait_ready()  # the copy is taken now: after the work on the collection
        return self.stage_in(self._sync_queue(), [name])[name].tensor()

    def numpy(self, name: str) -> np.ndarray:
        """The block as a numpy array: a zero-copy strided view on host memory, a host copy of
        device memory otherwise; once the work enqueued on the collection has finished (the
        last queue that work touching it was enqueued on, as ``np.asarray(buffer)``)."""
        block = self.block(name)
        self.collection.buffer.wait_ready()
        if self.path == "host":
            # a multi-layout buffer may end in a block of a smaller dtype: whole items only
            nbytes = self.collection.nbytes - self.collection.nbytes % block.itemsize
            flat = np.asarray(self.collection.buffer.handle)[:nbytes].view(block.dtype)
            return block_numpy(flat, block)
        if self.path == "cuda":
            return self.device_tensor(name).cpu().numpy()
        staged = self.stage_in(self._sync_queue(), [name])[name]
        return np.array(staged.tensor().numpy())

    # ------------------------------------------------------------------ copy path
    def _sync_queue(self) -> pk.Queue:
        return pk.Queue(self.collection.device, blocking=True)

    def stage_in(self, queue: pk.Queue, names: Sequence[str], *, wait: bool = True) -> dict[str, Staging]:
        """Copy the blocks' bytes into host staging memory on ``queue`` (the copy path)."""
        out = {}
        for n in names:
            staging = Staging(self.block(n))
            enqueue_to_staging(queue, self.collection.buffer, staging)
            out[n] = staging
        if wait:
            queue.wait()
        return out

    def stage_out(self, queue: pk.Queue, staged: Mapping[str, Staging]) -> None:
        """Enqueue copying staged blocks back into the collection (the copy path)."""
        for staging in staged.values():
            enqueue_from_staging(queue, self.collection.buffer, staging)

    # ------------------------------------------------------------------ outputs
    def check_outputs(self, outputs: Mapping[str, Any], *, cast: bool = False) -> dict[str, torch.Tensor]:
        """Validate ``{block: array or tensor}`` against the blocks (every block named once,
        shapes and dtypes); returns the values as tensors shaped like their blocks. Raises
        before anything is written."""
        if not isinstance(outputs, Mapping):
            raise ArgumentTypeError(f"outputs must be a mapping {{block name: array}}, got {type(outputs).__name__}")
        unknown = [k for k in outputs if k not in self._blocks]
        if unknown:
            raise NameNotFound(
                f"outputs name unknown block(s) {unknown}; the blocks are {self.block_names}: key the outputs by those"
            )
        checked = {}
        for name, value in outputs.items():
            checked[name] = check_output(self.block(name), value, cast=cast)
        return checked

    def write_outputs(self, outputs: Mapping[str, Any], *, queue: pk.Queue | None = None, cast: bool = False) -> None:
        """Write ``{block: array or tensor}`` into the collection's columns.

        Every value is checked against its block (shape, dtype; ``cast=True`` converts dtypes)
        before anything is written: on a mismatch the collection is unchanged and the error
        names the block. Writes on the calling thread, at once: on host memory directly (``queue``
        is not waited for: call this from a host task of the queue, as Model and RemoteModel do,
        or after ``queue.wait()``); on CUDA/ROCm on ``queue``'s stream when given (else on the
        current stream, synchronised before returning), after the stream that made the CUDA
        values (torch's current stream here: an event) and ``record_stream``-ing them for it;
        on the copy path through host staging with copies on ``queue`` (waited for)."""
        checked = self.check_outputs(outputs, cast=cast)
        if (
            queue is not None
            and queue.device is not self.collection.device
            and not (queue.device.can_access(self.collection.device))
        ):
            raise pk.DeviceMismatch(
                f"write_outputs: the collection is on {self.collection.device}, the queue on {queue.device}"
            )
        self.write_checked(checked, queue)

    def _producer_streams(self, checked: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """``{name: stream}``: torch's current stream of each value torch made on a device (a
        CUDA/ROCm tensor, or one on the collection's own torch device), the stream it was made
        on, which a copy on another stream must wait for."""
        streams = {}
        for name, value in checked.items():
            if value.is_cuda or value.device == self.device_tensor(name).device:
                streams[name] = torch.cuda.current_stream(value.device)
        return streams

    def write_checked(self, checked: Mapping[str, torch.Tensor], queue: pk.Queue | None) -> None:
        """Write outputs that :meth:`check_outputs` accepted (no further validation)."""
        path = self.path
        if path == "host":
            for name, value in checked.items():
                self.device_tensor(name).copy_(value)
        elif path == "cuda":
            made_on = self._producer_streams(checked)
            with queue_stream(queue):
                stream = torch.cuda.current_stream()  # the queue's stream (without one, the current)
                elsewhere = [name for name, producer in made_on.items() if producer != stream]
                wait_for_streams(torch, stream, [made_on[name] for name in elsewhere])  # complete values
                for name, value in checked.items():
                    self.device_tensor(name).copy_(value)
                keep_for_stream(stream, [checked[name] for name in elsewhere])  # not reused under the copy
                if queue is None:
                    stream.synchronize()
            if queue is not None:  # interchange consumers of the collection wait for this copy
                queue.enqueue_native(_nothing, self.collection)
        else:
            q = queue if queue is not None else self._sync_queue()
            staged = {name: Staging(self.block(name)) for name in checked}
            for name, value in checked.items():
                staged[name].tensor().copy_(value)
            self.stage_out(q, staged)
            q.wait()


def array_places(blocks: Sequence[Block]) -> tuple[tuple[int, np.dtype, tuple[int, ...], tuple[int, ...]], ...]:
    """``(byte offset, dtype, shape, byte strides)`` of each block (:meth:`SoAMetadata.host_arrays`)."""
    return tuple((b.offset, b.dtype, tuple(b.shape), b.byte_strides) for b in blocks)


def _nothing() -> None:
    """A native operation that enqueues nothing (its kept objects mark the queue's point)."""


def check_output(block: Block, value: Any, *, cast: bool = False, rows: int | None = None) -> torch.Tensor:
    """``value`` as a tensor fitting ``block`` (a ``[n]`` result fits a one-column ``[n, 1]``
    block; ``rows`` replaces n for a mini-batch); a ValueError/TypeError naming the block otherwise."""
    if block.kind == "scalar":
        raise ArgumentError(
            f"output block {block.name!r} holds scalars (a stride-0 broadcast); "
            "scalars can be model inputs but not outputs"
        )
    if isinstance(value, torch.Tensor):
        t = value
    else:
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise ArgumentTypeError(f"output for block {block.name!r} is not numeric ({arr.dtype})")
        t = (
            torch.from_numpy(np.ascontiguousarray(arr))
            if arr.dtype.byteorder in "=|"
            else torch.from_numpy(arr.astype(arr.dtype.newbyteorder("=")))
        )
    shape = tuple(t.shape)
    want_shape = block.shape if rows is None else (rows,) + block.shape[1:]
    if shape != want_shape:
        if len(want_shape) == 2 and want_shape[1] == 1 and shape == want_shape[:1]:
            t = t.reshape(want_shape)
        else:
            batch = "" if rows is None else f" (a mini-batch of {rows})"
            raise ArgumentError(
                f"output for block {block.name!r} has shape {list(shape)}, the block "
                f"[{', '.join(block.columns)}] needs {list(want_shape)}{batch}; nothing was written"
            )
    want = torch_dtype(block.dtype)
    if t.dtype != want:
        if not cast:
            raise ArgumentTypeError(
                f"output for block {block.name!r} has dtype {t.dtype}, the block's columns are "
                f"{block.dtype}; pass cast=True (ModelMetadata(..., cast_outputs=True)) to convert; "
                "nothing was written"
            )
        t = t.to(want)
    return t


#: ``ModelMetadata._last`` when no model's plan was used yet
_NO_PLAN: tuple[Any, Any] = (None, None)


class ModelMetadata:
    """The inputs and outputs of a forward pass: ``ModelMetadata(inputs, outputs)``.

    ``batch_size``: run the model on mini-batches of that many elements (a multiple of every
    block's ``alignment / itemsize``, so each mini-batch starts aligned); ``cast_outputs``:
    convert model outputs to the output blocks' dtypes instead of refusing them;
    ``input_dtype``: convert inputs to this dtype before the model (a copy); ``layout``: how the
    model reads the input blocks, ``"zero_copy"`` (in place, the default), ``"gather"`` (copied
    into row-major tensors first) or ``"auto"`` (whichever measured faster for the geometry, once;
    :mod:`inference._layout`).
    """

    def __init__(
        self,
        inputs: SoAMetadata,
        outputs: SoAMetadata,
        *,
        batch_size: int | None = None,
        cast_outputs: bool = False,
        input_dtype: Any = None,
        layout: str = "zero_copy",
    ) -> None:
        for what, meta in (("inputs", inputs), ("outputs", outputs)):
            if not isinstance(meta, SoAMetadata):
                raise ArgumentTypeError(f"ModelMetadata {what} must be a SoAMetadata, got {type(meta).__name__}")
            if not meta.block_names:
                raise ArgumentError(f"ModelMetadata {what} has no blocks; add them with append_block(name, *columns)")
        for b in outputs.blocks:
            if b.kind == "scalar":
                raise ArgumentError(
                    f"output block {b.name!r} holds scalars (a stride-0 broadcast); "
                    "scalars can be model inputs but not outputs"
                )
        # the instance dict directly, not __setattr__ below: there are no plans to drop yet.
        # _plans: Model -> its prepared pass on this metadata (inference._plan.Plan); dropped
        # whenever an attribute is set (below) and not used once a block of inputs/outputs changed
        self.__dict__.update(
            inputs=inputs,
            outputs=outputs,
            batch_size=None if batch_size is None else check_batch_size(batch_size, inputs, outputs),
            cast_outputs=bool(cast_outputs),
            input_dtype=None if input_dtype is None else _as_torch_dtype(input_dtype),
            layout=check_layout(layout),
            _plans=LRUCache(PLANS_KEPT),
            _last=_NO_PLAN,
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "layout":
            value = check_layout(value)
        object.__setattr__(self, name, value)
        if not name.startswith("_"):  # inputs, outputs, batch_size...: the prepared passes are stale
            object.__setattr__(self, "_plans", LRUCache(PLANS_KEPT))
            object.__setattr__(self, "_last", _NO_PLAN)

    def plan(self, model: Any) -> Any:
        """The pass ``model`` prepared on this metadata (an :class:`inference._plan.Plan`; None
        when there is none, or an attribute was set since)."""
        # ``_last``: the latest model's plan, found without the cache's lookup and reordering
        # (a forward's Python runs with caches its model evicted: every step there costs several
        # times what it costs in a warm loop)
        last = self._last
        if last[0] is model:
            return last[1]
        plan = self._plans.get(model)
        if plan is not None:
            object.__setattr__(self, "_last", (model, plan))
        return plan

    def keep_plan(self, model: Any, plan: Any) -> None:
        """Keep ``plan`` for ``model``'s next forward on this metadata (the latest few models'
        plans: a metadata used by many models keeps the :data:`PLANS_KEPT` used last)."""
        plans = self._plans
        plans.get(self._last[0])  # the latest model's plan, reused without the cache: used last
        plans[model] = plan
        object.__setattr__(self, "_last", (model, plan))

    def __repr__(self) -> str:
        bs = f", batch_size={self.batch_size}" if self.batch_size else ""
        layout = f", layout={self.layout!r}" if self.layout != "zero_copy" else ""
        return f"<ModelMetadata inputs={self.inputs.block_names} outputs={self.outputs.block_names}{bs}{layout}>"


def _as_torch_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    return torch_dtype(np.dtype(dtype))


def check_batch_size(batch_size: Any, inputs: SoAMetadata, outputs: SoAMetadata) -> int | None:
    """``batch_size`` validated for these blocks (None: the whole collection at once)."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ArgumentError(f"batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    blocks = [b for b in inputs.blocks + outputs.blocks if b.kind != "scalar"]
    if all(b.rows_per_item == 1 for b in blocks):
        if inputs.size != outputs.size:
            raise ArgumentError(
                f"mini-batches need inputs and outputs of one size; inputs have n={inputs.size}, "
                f"outputs n={outputs.size}"
            )
    elif len({b.size for b in blocks}) > 1:
        items = {b.name: b.size for b in blocks}
        raise ArgumentError(
            f"mini-batches need one batch axis for every block; the blocks' items are {items} "
            "(rows grouped by rows_per_item count as one item)"
        )
    for b in inputs.blocks + outputs.blocks:
        if b.kind != "scalar" and batch_size % b.batch_multiple:
            raise ArgumentError(
                f"batch_size {batch_size} breaks the alignment of block {b.name!r} ({b.dtype}, "
                f"{b.alignment}-byte alignment): use a multiple of {b.batch_multiple}"
            )
    return batch_size
