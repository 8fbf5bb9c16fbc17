"""How a ``ModelMetadata``'s blocks map to the tensors of a model on a server: by name, or in
order when no block is named after a tensor, each block checked against its tensor (dtype,
shape with -1, batching). :meth:`RemoteModel.check` keeps the result per metadata signature."""

from __future__ import annotations

from typing import Any

from ._errors import MetadataMismatch
from ._tensors import check_block
from ._transport import ModelInfo


def refuse_grouped_rows(metadata: Any) -> None:
    """A request carries whole rows, split and batched by row: blocks that group rows into
    items (``rows_per_item``) are refused by name."""
    ins, outs = metadata.inputs, metadata.outputs
    grouped = [b.name for b in ins.blocks + outs.blocks if b.rows_per_item != 1]
    if grouped:
        raise MetadataMismatch(
            f"blocks {grouped} group rows into items (rows_per_item): a RemoteModel sends "
            "one row per item; run such blocks through a local inference.Model"
        )


def signature(metadata: Any) -> tuple:
    """What the mapping of ``metadata`` depends on: its blocks' names, dtypes and row shapes."""
    sig = []
    for meta in (metadata.inputs, metadata.outputs):
        sig.append(tuple((n, str(meta.block(n).dtype), tuple(meta.block(n).shape[1:])) for n in meta.block_names))
    return tuple(sig)


def map_blocks(kind: str, blocks: list[str], tensors: list[str], model: str, subset: bool) -> dict[str, str]:
    """``{block: tensor}``: by name when every block names a tensor (``subset``: output blocks
    may leave tensors out), else in order when no block does and the counts match."""
    named = [b for b in blocks if b in tensors]
    if len(named) == len(blocks):
        missing = [t for t in tensors if t not in blocks]
        if missing and not subset:
            raise MetadataMismatch(f"model {model!r} {kind}(s) {missing} have no block; the {kind} blocks are {blocks}")
        return {b: b for b in blocks}
    if named:
        other = [b for b in blocks if b not in tensors]
        raise MetadataMismatch(
            f"{kind} blocks {blocks} match the {kind}s of model {model!r} {tensors} only in part "
            f"({other} {'is' if len(other) == 1 else 'are'} not one): name every {kind} block after a "
            f"model {kind}, or none of them (then the blocks map to the {kind}s in order)"
        )
    if len(blocks) == len(tensors):
        return dict(zip(blocks, tensors))
    which = (
        f"{kind} block {blocks[0]!r} is not an {kind}"
        if len(blocks) == 1
        else f"{kind} blocks {blocks} are not {kind}s"
    )
    raise MetadataMismatch(
        f"{which} of model {model!r}; its {kind}s are {tensors} "
        f"(and {len(blocks)} block(s) cannot map in order to {len(tensors)} {kind}(s))"
    )


def check_metadata(metadata: Any, info: ModelInfo, model_name: str) -> dict[str, dict[str, str]]:
    """``{"inputs": {block: tensor}, "outputs": {block: tensor}}`` of ``metadata`` on the model
    ``info`` describes, every block checked against its tensor (:class:`MetadataMismatch` else)."""
    ins, outs = metadata.inputs, metadata.outputs
    in_map = map_blocks("input", list(ins.block_names), [t.name for t in info.inputs], model_name, subset=False)
    out_map = map_blocks("output", list(outs.block_names), [t.name for t in info.outputs], model_name, subset=True)
    for block, tensor in in_map.items():
        b = ins.block(block)
        check_block(info.input(tensor), block, b.dtype, b.shape, "input")  # type: ignore[arg-type]
    for block, tensor in out_map.items():
        b = outs.block(block)
        check_block(info.output(tensor), block, b.dtype, b.shape, "output")  # type: ignore[arg-type]
    if not info.batching and ins.size != outs.size:
        raise MetadataMismatch(
            f"model {model_name!r} does not batch; inputs n={ins.size} and outputs n={outs.size} must be one request"
        )
    return {"inputs": in_map, "outputs": out_map}
