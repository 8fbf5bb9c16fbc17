"""``append_block(..., rows_per_item=R)``: R consecutive rows of a collection as one item of a
model's batch axis (a collection of one row per candidate read by a per-event model), on every
backend and model kind: a view over the collection's memory, checked like any block."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
import soa
from alpyka_testing.inference import Particles, PerItem, features
from inference import Model, ModelMetadata, SoAMetadata
from inference._block import make_block
from inference._gather import compiled, gather

R = 5  # rows per item, as the exported per_item files take


class Scalars(soa.Layout):
    x = soa.column(np.float32)
    total = soa.scalar(np.float32)


def test_the_geometry_of_grouped_blocks():
    plain = make_block(Particles, 40, 0, "f", ("x", "y", "z"))
    grouped = make_block(Particles, 40, 0, "f", ("x", "y", "z"), rows_per_item=R)
    pitch = plain.strides[1]
    assert (plain.shape, plain.strides) == ((40, 3), (1, pitch))
    assert (grouped.shape, grouped.strides, grouped.size) == ((8, R, 3), (R, 1, pitch), 8)
    assert (grouped.offset, grouped.span) == (plain.offset, plain.span)  # the same memory
    vec = make_block(Particles, 40, 0, "p", ("p",), rows_per_item=4)
    assert vec.shape == (10, 4, 3) and vec.strides[:2] == (4, 1)
    # a mini-batch of items keeps every block aligned: its rows are a multiple of 128 / 4 = 32
    assert (make_block(Particles, 64, 0, "f", ("x",), rows_per_item=8).batch_multiple, plain.batch_multiple) == (4, 32)


@pytest.mark.parametrize(
    "rows, error",
    [
        (3, "not a whole number of items"),
        (0, "positive integer"),
        (-2, "positive integer"),
        (2.5, "positive integer"),
        (True, "positive integer"),
        ([2], "positive integer"),
    ],
)
def test_bad_groupings_are_refused_by_name(rows, error):
    with pytest.raises(ValueError, match=f"block 'f'.*{error}"):
        make_block(Particles, 40, 0, "f", ("x", "y", "z"), rows_per_item=rows)


def test_scalars_cannot_be_grouped():
    with pytest.raises(ValueError, match="scalars.*rows_per_item"):
        make_block(Scalars, 40, 0, "t", ("total",), rows_per_item=4)


def test_the_tensor_is_a_view_of_the_collection(queue, make_particles):
    """On the zero-copy paths the tensor is a view of the collection (the ungrouped block's
    memory); on the copy path a host copy of the same shape and values."""
    coll, data = make_particles(40, seed=3)
    meta = SoAMetadata(coll).append_block("f", "x", "y", "z", rows_per_item=R)
    queue.wait()
    t = meta.tensor("f")
    assert t.shape == (8, R, 3)
    np.testing.assert_array_equal(t.cpu().numpy(), features(data).numpy().reshape(8, R, 3))
    np.testing.assert_array_equal(meta.numpy("f"), features(data).numpy().reshape(8, R, 3))
    if meta.zero_copy:
        assert t.data_ptr() == SoAMetadata(coll).append_block("f", "x", "y", "z").tensor("f").data_ptr()


def test_the_gather_of_a_grouped_block_is_the_rows_in_order():
    rows, pitch = 60, 64
    flat = torch.arange(3 * pitch, dtype=torch.float32)
    grouped = torch.as_strided(flat, (rows // R, R, 3), (R, 1, pitch))
    out = torch.full((rows // R, R, 3), -1.0)
    assert compiled(grouped, out)  # seen as the collection's rows: the compiled row loop applies
    gather(grouped, out)
    torch.testing.assert_close(out, grouped.contiguous())


@pytest.mark.parametrize("fmt", ["onnx", "pt2", "module"])
def test_a_per_item_model_reads_grouped_rows_on_every_backend(queue, make_particles, make_preds, exported_files, fmt):
    """40 rows of features as 8 items of 5 rows: the model's [8, 2] lands in a collection of 8
    rows, from the whole-collection pass, its prepared plan and mini-batches of items."""
    coll, data = make_particles(40, seed=11)
    out = make_preds(8)
    model = Model(PerItem() if fmt == "module" else exported_files[f"per_item.{fmt}"]).to(queue)
    inputs = SoAMetadata(coll).append_block("f", "x", "y", "z", rows_per_item=R)
    outputs = SoAMetadata(out).append_block("preds", "m", "n")
    want = PerItem()(features(data).reshape(8, R, 3)).detach().numpy()
    for meta in (ModelMetadata(inputs, outputs), ModelMetadata(inputs, outputs)):
        for _ in range(2):  # the first forward and the prepared plan's
            model.forward(meta)
            got = out.to_dict(queue)
            np.testing.assert_allclose(np.stack([got["m"], got["n"]], axis=1), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="batch_size 3 breaks the alignment"):
        ModelMetadata(inputs, outputs, batch_size=3)


def test_mini_batches_of_items(queue, make_particles, make_preds):
    """1280 rows as 64 items of 20: mini-batches of 32 items (640 rows, a multiple of 32 floats)
    into an output of one row per item, equal to the whole pass."""
    coll, data = make_particles(1280, seed=5)
    out = make_preds(64)
    module = PerItem()
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z", rows_per_item=20),
        SoAMetadata(out).append_block("preds", "m", "n"),
        batch_size=32,
    )
    Model(module).to(queue).forward(meta)
    got = out.to_dict(queue)
    want = module(features(data).reshape(64, 20, 3)).detach().numpy()
    np.testing.assert_allclose(np.stack([got["m"], got["n"]], axis=1), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="one batch axis for every block"):
        ModelMetadata(
            SoAMetadata(coll).append_block("f", "x", "y", "z", rows_per_item=20),
            SoAMetadata(make_preds(1280)).append_block("preds", "m", "n"),
            batch_size=32,
        )


def test_a_remote_model_refuses_grouped_blocks():
    pytest.importorskip("tritonclient", reason="the triton extra: pip install 'alpyka[triton]'")
    from inference.remote import MetadataMismatch, RemoteModel

    q = pk.Queue(pk.host(), blocking=True)
    coll = pk.PortableCollection(Particles, 40, q)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z", rows_per_item=R),
        SoAMetadata(pk.PortableCollection(Particles, 8, q)).append_block("g", "x", "y"),
    )
    remote = RemoteModel("127.0.0.1:9", "m", connect=False)  # refused before any server is asked
    try:
        with pytest.raises(MetadataMismatch, match=r"\['f'\].*rows_per_item.*local inference.Model"):
            remote.check(meta)
    finally:
        remote.close()
