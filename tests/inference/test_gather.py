"""The gather of column-major SoA blocks into row-major tensors (ONNX Runtime, AOTInductor):
chunked copies equal ``contiguous()``, and the buffers a prepared pass keeps are refilled on
every forward (issue 11: the DeepMET-shaped benchmark)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import portable as pk
from alpyka_testing.inference import MLP, Particles, Preds, features, fill_particles
from alpyka_testing.threads import run_threads
from inference import Model, ModelMetadata, SoAMetadata, _gather
from inference._gather import FEW_COLUMNS, GATHER_SPAN, SMALL_BATCH, TILE_EVENTS, TRIALS, chosen, compiled, gather


def _column_major(n: int, inner: tuple[int, ...], padded: int, dtype=torch.float32) -> torch.Tensor:
    """A block like a SoA matrix/vector column: the event axis has stride 1, columns ``padded`` apart."""
    count = int(np.prod(inner))
    flat = torch.arange(count * padded, dtype=torch.float64).to(dtype)
    strides = tuple(padded * int(np.prod(inner[:i])) for i in range(len(inner)))  # first inner axis fastest
    return flat.as_strided((n,) + inner, (1,) + strides)


@pytest.mark.parametrize(
    "inner",
    [
        (3,),
        (FEW_COLUMNS,),
        (2, FEW_COLUMNS // 2),
        (FEW_COLUMNS + 1,),
        (GATHER_SPAN * 3 + 5,),
        (700, 8),
        (5, 4, 3),
        (1000, 1),
        (2, 600),
    ],
)
@pytest.mark.parametrize("n,padded", [(2, 32), (37, 64), (128, 128), (TILE_EVENTS + 44, TILE_EVENTS + 64)])
def test_gather_equals_contiguous(inner, n, padded):
    t = _column_major(n, inner, padded)
    assert not t.is_contiguous()
    expected = t.contiguous()
    assert torch.equal(gather(t), expected)
    out = torch.full(t.shape, -1.0)
    assert gather(t, out) is out and torch.equal(out, expected)
    as_double = gather(t, torch.empty(t.shape, dtype=torch.float64))  # converted into the buffer's dtype
    assert torch.equal(as_double, expected.double())
    assert gather(expected) is expected  # row-major already: no copy


@pytest.mark.parametrize(
    "dtype,expect_compiled",
    [
        (torch.float32, True),
        (torch.float64, True),
        (torch.int64, True),
        (torch.int32, True),
        (torch.int8, True),
        (torch.uint8, True),
        (torch.bool, True),
        (torch.float16, False),
        (torch.bfloat16, False),
    ],
)
@pytest.mark.parametrize("n", [5, 70])  # below and above SMALL_BATCH: the column and tile loops
@pytest.mark.parametrize("per_candidate", [False, True])  # the row loop: a few columns
def test_gather_of_every_dtype(dtype, expect_compiled, n, per_candidate):
    """The compiled loops take the numeric dtypes numba copies; half floats take torch's chunked
    copy; both equal ``contiguous()``, converting into the buffer's dtype."""
    assert (n < SMALL_BATCH) == (n == 5)
    gen = torch.Generator().manual_seed(7)
    flat = (torch.randn(96 * 4500 * 2, generator=gen) * 50).to(dtype)
    if per_candidate:  # a collection of one row per candidate: n * 4500 rows of 8 columns
        rows = n * 4500
        flat = (torch.randn(8 * (rows + 3), generator=gen) * 50).to(dtype)
        t = flat.as_strided((rows, 8), (1, rows + 3))
    else:  # DeepMET-like: columns of the second axis first
        t = flat.as_strided((n, 4500, 2), (1, 96, 96 * 4500))
    out = torch.empty(t.shape, dtype=dtype)
    assert compiled(t, out) is expect_compiled
    assert torch.equal(gather(t, out), t.contiguous())
    if dtype.is_floating_point and expect_compiled:
        assert torch.equal(gather(t, torch.empty(t.shape, dtype=torch.float64)), t.contiguous().double())
    if dtype in (torch.int64, torch.int32, torch.uint8):  # integer columns into a float model's buffer
        assert torch.equal(gather(t, torch.empty(t.shape, dtype=torch.float32)), t.contiguous().float())


@pytest.mark.parametrize(
    "columns,n,loop",
    [
        (FEW_COLUMNS, 5, "rows"),
        (FEW_COLUMNS, 5000, "rows"),
        (3, 70, "rows"),
        (FEW_COLUMNS + 1, 5, "columns"),
        (FEW_COLUMNS + 1, 5000, "tiles"),
        (4500 * 8, 4, "columns"),
    ],
)
def test_loop_chosen_by_geometry(columns, n, loop):
    """A few columns: row after row; more: columns in memory order for a few events, tiles beyond."""
    from inference import _gather

    t = _column_major(n, (columns,), n + 32)
    mode = _gather._geometry(t.shape, t.stride(), t.dtype, t.dtype)[0]
    assert mode == {"rows": _gather._BY_ROW, "columns": _gather._BY_COLUMN, "tiles": _gather._TILES}[loop]
    assert torch.equal(gather(t, torch.empty(t.shape)), t.contiguous())


def test_gather_reads_only_the_block_it_is_given():
    """A block in the middle of a collection's memory: the values around it are not read into the output."""
    flat = torch.full((10 * 32,), -7.0)
    flat[64 : 64 + 3 * 32] = torch.arange(3 * 32, dtype=torch.float32)
    t = flat[64:].as_strided((20, 3), (1, 32))
    out = gather(t, torch.empty(20, 3))
    assert torch.equal(out, torch.arange(96, dtype=torch.float32).view(3, 32)[:, :20].T)


def test_kept_buffers_are_refilled_each_forward(exported_files):
    q = pk.Queue(pk.device("cpu_serial"))
    n = 300
    data = fill_particles(n, seed=1)
    coll = pk.PortableCollection.from_dict(Particles, data, q)
    out = pk.PortableCollection.from_dict(Preds, {k: np.zeros(n, Preds.field(k).dtype) for k in Preds.field_names()}, q)
    model = Model(exported_files["mlp.onnx"]).to(q)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
    )
    for seed in (1, 2, 3):  # the same prepared pass, new input values each time
        data = fill_particles(n, seed=seed)
        q.wait()
        view = coll.view()
        for k in ("x", "y", "z"):
            getattr(view, k)[...] = data[k]
        model.forward(meta)
        cols = out.to_dict(q)
        with torch.no_grad():
            ref = MLP()(features(data)).numpy()
        np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)
    assert "gathered" in repr(model) and "'features'" in repr(model)


def test_kept_binding_follows_the_collections(exported_files):
    """An ONNX pass keeps its I/O binding and output tensors between forwards; forwards that
    alternate between collections of other sizes and memory each get their own results."""
    q = pk.Queue(pk.device("cpu_serial"))
    model = Model(exported_files["mlp.onnx"]).to(q)
    runs = []
    for n, seed in ((300, 1), (77, 2), (300, 3)):
        data = fill_particles(n, seed=seed)
        coll = pk.PortableCollection.from_dict(Particles, data, q)
        out = pk.PortableCollection.from_dict(
            Preds, {k: np.zeros(n, Preds.field(k).dtype) for k in Preds.field_names()}, q
        )
        meta = ModelMetadata(
            SoAMetadata(coll).append_block("features", "x", "y", "z"), SoAMetadata(out).append_block("preds", "m", "n")
        )
        runs.append((data, out, meta))
    for _ in range(2):
        for data, out, meta in runs:
            q.wait()
            view = out.view()
            for k in ("m", "n"):
                getattr(view, k)[...] = 0
            model.forward(meta)
            cols = out.to_dict(q)
            with torch.no_grad():
                ref = MLP()(features(data)).numpy()
            np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)


def test_threads_sharing_a_model_never_share_its_workspace(exported_files):
    """Four threads, four queues, one ONNX model, inputs of one shape (so the kept buffers and
    binding would fit every pass): each pass gets its own inputs' results."""
    import threading

    model = Model(exported_files["mlp.onnx"])
    n, barrier = 2048, threading.Barrier(4)

    def work(t: int) -> None:
        q = pk.Queue(pk.device("cpu_serial"))
        model.to(q)
        barrier.wait()
        for it in range(15):
            data = fill_particles(n, seed=1000 * t + it)
            coll = pk.PortableCollection.from_dict(Particles, data, q)
            out = pk.PortableCollection(Preds, n, q)
            model.forward(
                ModelMetadata(
                    SoAMetadata(coll).append_block("features", "x", "y", "z"),
                    SoAMetadata(out).append_block("preds", "m", "n"),
                )
            )
            cols = out.to_dict(q)
            with torch.no_grad():
                ref = MLP()(features(data)).numpy()
            np.testing.assert_allclose(np.stack([cols["m"], cols["n"]], 1), ref, rtol=1e-5, atol=1e-5)

    run_threads(work, 4)


@pytest.mark.parametrize("inner", [(8,), (700, 8)])  # the row loop, the column loop
def test_the_faster_copy_is_chosen_per_geometry_and_both_are_right(inner, monkeypatch):
    """Each geometry's first gathers alternate between the compiled loop and torch's copy, then
    the faster one is kept; every gather on the way equals ``contiguous()``."""
    monkeypatch.setattr(_gather, "_CHOICE", {})
    t = _column_major(5, inner, 96)
    expected = t.contiguous()
    out = torch.empty(t.shape)
    assert chosen(t, out) == "trying"
    for _ in range(2 * TRIALS):
        out.fill_(-1.0)
        assert torch.equal(gather(t, out), expected)
    assert chosen(t, out) in ("compiled", "torch")
    for forced, name in ((True, "compiled"), (False, "torch")):  # either kept copy stays right
        _gather._CHOICE[(t.shape, t.stride(), t.dtype, out.dtype)] = forced
        out.fill_(-1.0)
        assert chosen(t, out) == name and torch.equal(gather(t, out), expected)
    half = _column_major(5, inner, 96, torch.float16)  # a dtype numba does not copy: torch's copy only
    assert chosen(half, torch.empty(half.shape, dtype=torch.float16)) == "not compiled"


def test_large_blocks_take_the_compiled_loops_at_once(monkeypatch):
    monkeypatch.setattr(_gather, "_CHOICE", {})
    t = _column_major(_gather.TRIAL_BYTES // (4 * 8) + 64, (8,), _gather.TRIAL_BYTES // (4 * 8) + 128)
    out = torch.empty(t.shape)
    assert torch.equal(gather(t, out), t.contiguous())
    assert chosen(t, out) == "compiled"
