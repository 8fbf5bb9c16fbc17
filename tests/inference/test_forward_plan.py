"""The prepared pass (``inference._plan``) that makes a repeated ``Model.forward`` cheap never
changes an answer: new data in the same collections is read, changed blocks or settings give a
new plan, a result that no longer fits is still refused with the collection untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Particles, Preds, features, fill_particles
from inference import Model, ModelMetadata, SoAMetadata


def _setup(n: int = 64, seed: int = 0):
    q = pk.Queue(pk.host(), blocking=True)
    data = fill_particles(n, seed)
    coll = pk.PortableCollection.from_dict(Particles, data, q)
    out = pk.PortableCollection.from_dict(
        Preds, {k: np.full(n, -7.0, dtype=Preds.field(k).dtype) for k in Preds.field_names()}, q
    )
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    return q, coll, out, meta


def _preds(out: pk.PortableCollection, q: pk.Queue, *cols: str) -> np.ndarray:
    d = out.to_dict(q)
    return np.stack([d[c] for c in cols], axis=1)


def _reference(module: torch.nn.Module, coll: pk.PortableCollection, q: pk.Queue) -> np.ndarray:
    with torch.no_grad():
        return module(features(coll.to_dict(q))).numpy()


def test_a_repeated_forward_reuses_its_plan_and_reads_new_data():
    q, coll, out, meta = _setup()
    module = MLP()
    model = Model(module).to(q)
    model.forward(meta)
    plan = meta._plans[model]
    for seed in (1, 2):  # new data written into the same collection between passes
        for name, col in fill_particles(64, seed).items():
            if name in ("x", "y", "z"):
                getattr(coll.view(), name)[:] = col
        model.forward(meta)
        assert meta._plans[model] is plan
        np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(module, coll, q), rtol=1e-5, atol=1e-6)


def test_changed_blocks_settings_or_queue_give_a_new_plan():
    q, coll, out, meta = _setup()
    model = Model(MLP()).to(q)
    model.forward(meta)
    first = meta._plans[model]
    meta.outputs.change_order(["preds"])  # the same blocks, the order token renewed
    model.forward(meta)
    assert meta._plans[model] is not first
    second = meta._plans[model]
    meta.cast_outputs = True  # any setting: the plans are dropped
    assert model not in meta._plans
    model.forward(meta)
    assert meta._plans[model] is not second
    other = pk.Queue(pk.host(), blocking=True)
    model.forward(meta, other)
    assert meta._plans[model].queue is other
    model.forward(meta, batch_size=32)  # a per-call batch size is not kept as the metadata's plan
    assert meta._plans[model].queue is other


def test_an_output_that_stops_fitting_is_refused_and_nothing_is_written():
    q, coll, out, meta = _setup()

    class Changes(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.width, self.dtype = 2, torch.float32

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ones(x.shape[0], self.width, dtype=self.dtype)

    module = Changes()
    model = Model(module).to(q)
    model.forward(meta)
    np.testing.assert_array_equal(_preds(out, q, "m", "n"), 1.0)
    out.view().m[:] = -3.0
    module.width = 3
    with pytest.raises(ValueError, match=r"block 'preds' has shape \[64, 3\].*nothing was written"):
        model.forward(meta)
    module.width, module.dtype = 2, torch.float64
    with pytest.raises(TypeError, match="block 'preds' has dtype torch.float64.*cast=True"):
        model.forward(meta)
    np.testing.assert_array_equal(out.to_dict(q)["m"], -3.0)
    meta.cast_outputs = True
    model.forward(meta)
    np.testing.assert_array_equal(_preds(out, q, "m", "n"), 1.0)


def test_a_flat_result_for_a_one_column_block_and_two_outputs():
    q, coll, out, meta = _setup()

    class Flat(torch.nn.Module):
        def forward(self, x: torch.Tensor):  # type: ignore[override]
            return x[:, :2], {"not": "a tensor"}

    class Two(torch.nn.Module):
        def forward(self, x: torch.Tensor):  # type: ignore[override]
            return x[:, :2] * 2.0, x.sum(dim=1)

    outs = SoAMetadata(out).append_block("preds", "m", "n").append_block("score", "score")
    meta2 = ModelMetadata(meta.inputs, outs)
    model = Model(Two()).to(q)
    for _ in range(2):  # the second time from the plan: [n] still fits the [n, 1] block
        model.forward(meta2)
        f = features(coll.to_dict(q)).numpy()
        np.testing.assert_allclose(_preds(out, q, "m", "n"), f[:, :2] * 2.0, rtol=1e-6)
        np.testing.assert_allclose(out.to_dict(q)["score"], f.sum(axis=1), rtol=1e-5)
    before = out.to_dict(q)
    with pytest.raises(TypeError, match="not numeric"):
        Model(Flat()).to(q).forward(meta2)
    for k, v in out.to_dict(q).items():
        np.testing.assert_array_equal(v, before[k])


def test_a_planned_metadata_frees_its_collections_without_a_garbage_collection():
    import gc
    import weakref

    model = Model(MLP())
    gc.disable()  # only reference counting: a cycle through the plan would keep them alive
    try:
        q, coll, out, meta = _setup()
        model.to(q).forward(meta)
        assert model in meta._plans
        refs = [weakref.ref(coll), weakref.ref(out), weakref.ref(meta)]
        del coll, out, meta
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


def test_metadata_built_per_event_shares_one_spec_per_geometry_and_keeps_no_collection():
    """A producer builds new metadata (and new collections) for every event: the model keeps
    one pass spec per block geometry, not per metadata, and the spec holds no collection."""
    import gc
    import weakref

    module = MLP()
    model = Model(module)
    q = pk.Queue(pk.host(), blocking=True)
    refs = []
    gc.disable()  # only reference counting: nothing of an event may outlive it
    try:
        for event, n in enumerate((64, 64, 96, 64)):
            data = fill_particles(n, seed=event)
            coll = pk.PortableCollection.from_dict(Particles, data, q)
            out = pk.PortableCollection(Preds, n, q)
            meta = ModelMetadata(
                SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
            )
            model.to(q).forward(meta)
            np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(module, coll, q), rtol=1e-5, atol=1e-6)
            refs += [weakref.ref(coll), weakref.ref(out)]
            del coll, out, meta
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
    specs = model._for_device[q.device][3]
    assert sorted(spec.n for spec in specs.values()) == [64, 96]  # one per size, reused


def test_a_geometry_in_use_keeps_its_spec_while_sizes_change_every_event():
    """A producer whose events alternate a fixed geometry with sizes that change every event
    (more than the model keeps per device): the fixed geometry's pass spec is kept (the least
    recently used ones are dropped, not all of them at once) and results stay right."""
    from inference._model import _SPECS_PER_DEVICE

    module = MLP()
    model = Model(module)
    q = pk.Queue(pk.host(), blocking=True)

    def forward(n: int, seed: int) -> None:
        coll = pk.PortableCollection.from_dict(Particles, fill_particles(n, seed), q)
        out = pk.PortableCollection(Preds, n, q)
        meta = ModelMetadata(
            SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
        )
        model.to(q).forward(meta)
        np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(module, coll, q), rtol=1e-5, atol=1e-6)

    forward(64, 0)
    specs = model._for_device[q.device][3]
    (hot,) = specs.values()
    for event in range(_SPECS_PER_DEVICE + 8):
        forward(100 + event, event)  # a new size each event: a new spec
        forward(64, event)
        assert hot in specs.values(), f"event {event}: the spec of the geometry in use was dropped"
    assert len(specs) == _SPECS_PER_DEVICE


def test_a_metadata_used_by_more_models_than_it_keeps_keeps_the_latest():
    """One metadata run by more models than it keeps plans for: it keeps the plans of the
    models used last (the least recently used dropped first), not only the newest one."""
    from inference._metadata import PLANS_KEPT

    q, coll, out, meta = _setup()
    modules = [MLP() for _ in range(PLANS_KEPT + 1)]
    models = [Model(m) for m in modules]
    for model in models:
        model.to(q).forward(meta)
    assert [m in meta._plans for m in models] == [False] + [True] * PLANS_KEPT
    models[1].forward(meta)  # used again: the oldest is now models[2]
    models[0].forward(meta)
    assert [m in meta._plans for m in models] == [True, True, False] + [True] * (PLANS_KEPT - 2)
    np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(modules[0], coll, q), rtol=1e-5, atol=1e-6)


def test_models_taking_turns_on_one_metadata_each_run_their_own_plan():
    """The latest model's plan is found first (``ModelMetadata._last``): models that take turns
    on one metadata never run another's plan, and a setting changed drops it too."""
    q, coll, out, meta = _setup()
    modules = [MLP(), MLP()]
    models = [Model(m).to(q) for m in modules]
    plans = []
    for model in models:
        model.forward(meta)
        plans.append(meta.plan(model))
    assert plans[0] is not plans[1]
    for turn in range(4):
        i = turn % 2
        models[i].forward(meta)
        assert meta.plan(models[i]) is plans[i] and meta.plan(models[1 - i]) is plans[1 - i]
        np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(modules[i], coll, q), rtol=1e-5, atol=1e-6)
    meta.cast_outputs = True  # a setting changed: both plans are stale
    assert meta.plan(models[0]) is None and meta.plan(models[1]) is None
    models[1].forward(meta)
    assert meta.plan(models[1]) not in (None, *plans)
    np.testing.assert_allclose(_preds(out, q, "m", "n"), _reference(modules[1], coll, q), rtol=1e-5, atol=1e-6)
