"""``ModelMetadata(layout=...)`` on every backend: the model reads the columns in place
(``"zero_copy"``), gathered row-major (``"gather"``) or as ``"auto"`` measured faster, with
the same results; ``"auto"`` keeps zero-copy where the two layouts' bits differ, decides once per
model, device and geometry, and names its choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, features
from alpyka_testing.threads import run_threads
from inference import LayoutError, Model, ModelMetadata, SoAMetadata
from inference._layout import TRIALS

#: forwards after which "auto" has decided: the bit comparison, then TRIALS timed passes of each
DECIDED_AFTER = 1 + 2 * TRIALS


class LayoutSensitive(torch.nn.Module):
    """Another answer on a strided input than on a row-major one: layouts whose bits differ."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :2] * (1.0 if x.is_contiguous() else 2.0)


class SlowOnStrided(torch.nn.Module):
    """The same answer either way, with much more work on a strided input: gathering is faster."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            sum(i * i for i in range(300_000))  # ~20 ms of this thread's CPU, 100x the gather
        return x[:, :2] * 2.0


def _metadata(coll, out, **kw) -> ModelMetadata:
    return ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n"), **kw
    )


def _preds(out, queue) -> np.ndarray:
    cols = out.to_dict(queue)
    return np.stack([cols["m"], cols["n"]], 1)


def _run(model, queue, coll, out, forwards: int = DECIDED_AFTER + 1, **kw) -> ModelMetadata:
    meta = _metadata(coll, out, **kw)
    for _ in range(forwards):
        model.forward(meta)
    queue.wait()
    return meta


@pytest.mark.parametrize("n", [7, 100, 1000])
def test_every_layout_gives_the_models_results(queue, make_particles, make_preds, n):
    coll, data = make_particles(n, seed=2)
    module = MLP()
    model = Model(module).to(queue)
    with torch.no_grad():
        want = module(features(data)).numpy()
    got = {}
    for layout in ("zero_copy", "gather", "auto"):
        out = make_preds(n)
        meta = _run(model, queue, coll, out, layout=layout)
        got[layout] = _preds(out, queue)
        np.testing.assert_allclose(got[layout], want, rtol=1e-5, atol=1e-6, err_msg=layout)
        assert model.input_layout(meta) in ((layout,) if layout != "auto" else ("zero_copy", "gather"))
        assert (out.to_dict(queue)["score"] == -7).all()  # other columns untouched
    # auto gives zero-copy's bits or the gather's, and those only where they are zero-copy's
    assert np.array_equal(got["auto"].view(np.uint32), got["zero_copy"].view(np.uint32))


def test_auto_keeps_zero_copy_where_the_bits_differ(queue, make_particles, make_preds):
    coll, data = make_particles(64, seed=1)
    out = make_preds(64)
    model = Model(LayoutSensitive()).to(queue)
    meta = _run(model, queue, coll, out, layout="auto")
    assert model.input_layout(meta) == "zero_copy"
    np.testing.assert_array_equal(_preds(out, queue), 2.0 * features(data)[:, :2].numpy())
    gathered = make_preds(64)
    _run(model, queue, coll, gathered, forwards=1, layout="gather")  # asked for: the row-major answer
    np.testing.assert_array_equal(_preds(gathered, queue), features(data)[:, :2].numpy())


def test_auto_picks_the_gather_where_it_is_faster_and_keeps_it(queue, make_particles, make_preds):
    coll, data = make_particles(64, seed=4)
    out = make_preds(64)
    model = Model(SlowOnStrided()).to(queue)
    meta = _metadata(coll, out, layout="auto")
    model.forward(meta)
    assert model.input_layout(meta) == "measuring"
    for _ in range(DECIDED_AFTER - 1):
        model.forward(meta)
    queue.wait()
    assert model.input_layout(meta) == "gather"
    np.testing.assert_array_equal(_preds(out, queue), 2.0 * features(data)[:, :2].numpy())
    # new metadata of the geometry (a producer's next event): decided already, no new trial
    other, _ = make_particles(64, seed=5)
    assert model.input_layout(_metadata(other, make_preds(64), layout="auto")) == "gather"
    # another model (or another geometry) measures for itself
    assert Model(SlowOnStrided()).to(queue).input_layout(_metadata(other, make_preds(64), layout="auto")) == (
        "measuring"
    )


def test_auto_in_mini_batches(queue, make_particles, make_preds):
    n = 256
    coll, data = make_particles(n, seed=6)
    module = MLP()
    model = Model(module).to(queue)
    with torch.no_grad():
        want = module(features(data)).numpy()
    for layout in ("gather", "auto"):
        out = make_preds(n)
        meta = _run(model, queue, coll, out, layout=layout, batch_size=64)
        assert model.input_layout(meta) in ("zero_copy", "gather")
        np.testing.assert_allclose(_preds(out, queue), want, rtol=1e-5, atol=1e-6)


def test_auto_from_several_threads(backend, queue, make_particles, make_preds):
    dev = pk.device(backend)
    module = MLP()
    model = Model(module)
    coll, data = make_particles(128, seed=7)
    with torch.no_grad():
        want = module(features(data)).numpy()
    outs = [make_preds(128) for _ in range(3)]
    queue.wait()  # the collections filled before the threads' queues read them

    def work(t: int) -> None:
        q = pk.Queue(dev)
        model.to(q)
        meta = _metadata(coll, outs[t], layout="auto")
        for _ in range(DECIDED_AFTER):
            model.forward(meta)
        q.wait()
        np.testing.assert_allclose(_preds(outs[t], q), want, rtol=1e-5, atol=1e-6)

    run_threads(work, 3)


def test_row_major_blocks_have_nothing_to_gather(queue, make_particles, make_preds):
    coll, _ = make_particles(32)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("x", "x"), SoAMetadata(make_preds(32)).append_block("m", "m"), layout="auto"
    )
    model = Model(torch.nn.Identity()).to(queue)
    assert model.input_layout(meta) == "zero_copy"  # a one-column block is row-major already


@pytest.mark.parametrize("bad", ["rowmajor", "", None, 1])
def test_an_unknown_layout_names_the_choices(queue, make_particles, make_preds, bad):
    coll, _ = make_particles(8)
    with pytest.raises(LayoutError, match="'zero_copy', 'gather', 'auto'") as info:
        _metadata(coll, make_preds(8), layout=bad)
    assert isinstance(info.value, (pk.AlpykaError, ValueError))
    meta = _metadata(coll, make_preds(8))
    with pytest.raises(LayoutError, match="'zero_copy', 'gather', 'auto'"):
        meta.layout = bad
    assert meta.layout == "zero_copy"
    assert "layout='gather'" in repr(_metadata(coll, make_preds(8), layout="gather"))
