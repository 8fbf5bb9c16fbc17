"""A pass prepared for one block geometry is reused by every metadata of it (issue 33: a new
``ModelMetadata`` per event binds nothing new), and reuse never changes an answer: results follow
the new collections' data, another size or dtype gets its own pass, a freed collection's memory
reused by a new one is read afresh, a failed run writes nothing and leaves the pass usable."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Totals, features, skip_unless_onnx_runs_on
from inference import Model, ModelMetadata, SoAMetadata
from inference._torch_queue import memory_path

pytest.importorskip("onnxruntime", reason="pip install 'alpyka[onnx]'")


def _host_onnx(queue) -> None:
    """The shared binding is the CPU route of ONNX Runtime over host memory: skip elsewhere."""
    skip_unless_onnx_runs_on(queue.device)
    if memory_path(queue.device) != "host":
        pytest.skip(
            f"{queue.device.backend_name}: ONNX Runtime reads staged or device memory there, "
            "not the collections' host memory this checks"
        )


def _count_bindings(model: Model, queue, monkeypatch) -> list[int]:
    """Counts the I/O bindings ONNX Runtime makes for ``model`` on the queue's device."""
    session = model.module_for(queue).program._cpu_session
    made = [0]
    real = session.io_binding

    def counting():
        made[0] += 1
        return real()

    monkeypatch.setattr(session, "io_binding", counting)
    return made


def _meta(coll, out, in_columns=("x", "y", "z"), out_columns=("m", "n"), **kw) -> ModelMetadata:
    return ModelMetadata(
        SoAMetadata(coll).append_block("f", *in_columns), SoAMetadata(out).append_block("preds", *out_columns), **kw
    )


def _specs(model: Model, queue) -> dict:
    return model._for_device[queue.device][3]


@pytest.mark.parametrize("source", ["mlp.onnx", "double.onnx"])
def test_metadata_per_event_over_new_collections_binds_once_per_geometry(
    queue, make_particles, make_preds, exported_files, monkeypatch, source
):
    """Every event brings new collections (kept alive: new addresses each time) and new metadata;
    ONNX Runtime's I/O binding is made once for the geometry and the results follow each event's
    data. ``double.onnx`` reads its one-column block in place (rebound by address per pass)."""
    _host_onnx(queue)
    model = Model(exported_files[source]).to(queue)
    made = _count_bindings(model, queue, monkeypatch)
    kept, addresses = [], set()
    for event in range(6):
        coll, data = make_particles(32, seed=event)
        out = make_preds(32)
        if source == "mlp.onnx":
            model.forward(_meta(coll, out))
            want = MLP()(features(data)).detach().numpy()
            got = np.stack([out.to_dict(queue)[c] for c in ("m", "n")], axis=1)
        else:
            model.forward(_meta(coll, out, ("x",), ("score",)))
            want, got = data["x"] * 2.0 + 1.0, out.to_dict(queue)["score"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        kept += [coll, out]
        addresses.add(coll.buffer.ptr)
    assert len(addresses) == 6
    assert made[0] == 1, f"{made[0]} I/O bindings for one geometry"
    assert len(_specs(model, queue)) == 1


@pytest.mark.parametrize("source", ["mlp.onnx", "double.onnx"])
def test_a_freed_collections_memory_reused_by_a_new_one_is_read_afresh(
    queue, make_particles, make_preds, exported_files, source
):
    """Collections freed after each event: the next event's collections get the same memory back
    from the allocator, with other data; the shared pass reads and writes the new contents."""
    _host_onnx(queue)
    model = Model(exported_files[source]).to(queue)
    addresses = []
    for event in range(4):
        coll, data = make_particles(48, seed=10 + event)
        out = make_preds(48, fill=float(event))
        addresses.append((coll.buffer.ptr, out.buffer.ptr))
        if source == "mlp.onnx":
            meta = _meta(coll, out)
            model.forward(meta)
            got = np.stack([out.to_dict(queue)[c] for c in ("m", "n")], axis=1)
            want = MLP()(features(data)).detach().numpy()
        else:
            meta = _meta(coll, out, ("y",), ("m",))
            model.forward(meta)
            got, want = out.to_dict(queue)["m"], data["y"] * 2.0 + 1.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out.to_dict(queue)["n" if source == "double.onnx" else "score"], event)
        del coll, out, meta
        gc.collect()  # a block comes back once nothing refers to its collection (cycles included)
        queue.wait()  # ... and once its queue ran past the free (the allocator's gate; slow under load)
    assert len(set(addresses)) < len(addresses), f"the host allocator gave new memory every time: {addresses}"
    assert len(_specs(model, queue)) == 1


def test_a_new_size_or_output_dtype_gets_its_own_pass(queue, make_particles, make_preds, exported_files, monkeypatch):
    _host_onnx(queue)
    model = Model(exported_files["double.onnx"]).to(queue)
    made = _count_bindings(model, queue, monkeypatch)
    passes = []
    for n in (32, 48, 32):
        coll, data = make_particles(n, seed=n)
        out = make_preds(n)
        model.forward(_meta(coll, out, ("z",), ("score",)))
        np.testing.assert_allclose(out.to_dict(queue)["score"], data["z"] * 2.0 + 1.0, rtol=1e-6)
        passes.append(next(s for s in _specs(model, queue).values() if s.n == n))
    assert passes[0] is passes[2] and passes[0] is not passes[1]
    assert made[0] == 2  # one binding per size
    # a float64 output block: ONNX Runtime's float32 result converted (the general pass, no shared binding)
    coll, data = make_particles(32, seed=5)
    out = make_preds(32)
    model.forward(_meta(coll, out, ("x",), ("extra",), cast_outputs=True))
    extra = out.to_dict(queue)["extra"]
    assert extra.dtype == np.float64
    np.testing.assert_allclose(extra, data["x"].astype(np.float64) * 2.0 + 1.0, rtol=1e-6)
    assert len(_specs(model, queue)) == 3


def test_eager_models_get_a_pass_per_input_dtype(queue, make_particles, make_preds):
    class Twice(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return x * 2

    model = Model(Twice()).to(queue)
    coll, data = make_particles(40, seed=3)
    out = make_preds(40)
    for _ in range(2):
        model.forward(_meta(coll, out, ("x",), ("m",)))  # float32 -> float32
        model.forward(_meta(coll, out, ("w",), ("extra",)))  # float64 -> float64
        cols = out.to_dict(queue)
        np.testing.assert_allclose(cols["m"], data["x"] * 2, rtol=1e-6)
        np.testing.assert_array_equal(cols["extra"], data["w"] * 2)
    assert len(_specs(model, queue)) == 2


def test_a_pass_whose_binding_is_taken_runs_on_its_own(queue, make_particles, make_preds, exported_files):
    """Another thread's pass holds the geometry's binding: this one runs without it, correctly."""
    _host_onnx(queue)
    model = Model(exported_files["mlp.onnx"]).to(queue)
    coll, _ = make_particles(16, seed=1)
    out = make_preds(16)
    model.forward(_meta(coll, out))
    queue.wait()
    (spec,) = _specs(model, queue).values()
    coll, data = make_particles(16, seed=2)
    out = make_preds(16)
    with spec.host.lock:  # as a pass running on another queue would
        model.forward(_meta(coll, out), pk.Queue(queue.device, blocking=True))
    got = np.stack([out.to_dict(queue)[c] for c in ("m", "n")], axis=1)
    np.testing.assert_allclose(got, MLP()(features(data)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_failed_run_writes_nothing_and_the_pass_stays_usable(queue, make_particles, make_preds, exported_files):
    """``totals.onnx`` returns one row; an output block of 8 rows fits its declaration (the batch
    axis is free) but not the result: ONNX Runtime refuses the bound output, nothing is written,
    and the geometry's next pass runs."""
    _host_onnx(queue)
    model = Model(exported_files["totals.onnx"]).to(queue)
    coll, data = make_particles(8, seed=4)
    wrong = make_preds(8, fill=-3.0)
    # raised by forward on a blocking queue, as the AsyncError of the wait on a non-blocking one
    with pytest.raises(Exception, match="totals.onnx failed on these blocks.*nothing was written"):
        model.forward(_meta(coll, wrong))
        queue.wait()
    np.testing.assert_array_equal(wrong.to_dict(queue)["m"], -3.0)
    right = make_preds(1)
    for _ in range(2):
        model.forward(_meta(coll, right))
        got = np.stack([right.to_dict(queue)[c] for c in ("m", "n")], axis=1)
        np.testing.assert_allclose(got, Totals()(features(data)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_outputs_handed_out_right_after_forward_wait_for_the_shared_pass(queue, make_particles, exported_files):
    """Events queued behind slow work, each with new metadata over new collections (never used on
    the queue before): each output collection handed out at once (numpy) waits for its pass."""
    import time

    from alpyka_testing.inference import Preds

    _host_onnx(queue)
    model = Model(exported_files["mlp.onnx"]).to(queue)
    events = []
    for event in range(3):
        coll, data = make_particles(24, seed=20 + event)
        out = pk.PortableCollection(Preds, 24, queue.device)  # no queue work on it
        out.view().m[:] = -7
        queue.wait()
        queue.enqueue_host(lambda: time.sleep(0.1))  # the pass runs behind it
        meta = _meta(coll, out)
        model.forward(meta)
        events.append((meta, data))
    for meta, data in events:
        got = np.array(meta.outputs.numpy("preds"))
        np.testing.assert_allclose(got, MLP()(features(data)).detach().numpy(), rtol=1e-5, atol=1e-5)
