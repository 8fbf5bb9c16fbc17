"""Blocks as tensors over the collection's memory: values, zero copies, numpy views, copy path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import inference._torch_queue as torch_queue_mod
from alpyka_testing.inference import Particles, Preds
from inference import SoAMetadata

# the rocm stand-in runs this file too: block tensors via DLPack on HIP
pytestmark = pytest.mark.hip_differs


def _inside(coll, t: torch.Tensor) -> bool:
    start = coll.buffer.ptr
    return start <= t.data_ptr() < start + coll.nbytes


def _all_blocks(coll) -> SoAMetadata:
    return (
        SoAMetadata(coll)
        .append_block("f", "x", "y", "z")
        .append_block("pq", "p", "q")
        .append_block("cov", "cov")
        .append_block("covs", "cov", "cov2")
        .append_block("w", "w")
        .append_block("charge", "charge")
        .append_block("ss", "scale", "shift")
    )


@pytest.mark.parametrize("n", [1, 37, 1000])
def test_block_tensors_hold_the_columns(queue, make_particles, n):
    coll, data = make_particles(n, seed=n)
    queue.wait()
    meta = _all_blocks(coll)
    f = meta.tensor("f")
    np.testing.assert_array_equal(f.cpu().numpy(), np.stack([data["x"], data["y"], data["z"]], 1))
    np.testing.assert_array_equal(meta.tensor("pq").cpu().numpy(), np.stack([data["p"], data["q"]], 1))
    np.testing.assert_array_equal(meta.tensor("cov").cpu().numpy(), data["cov"])
    np.testing.assert_array_equal(meta.tensor("covs").cpu().numpy(), np.stack([data["cov"], data["cov2"]], 1))
    np.testing.assert_array_equal(meta.tensor("w").cpu().numpy()[:, 0], data["w"])
    assert meta.tensor("charge").dtype == torch.int32
    ss = meta.tensor("ss").cpu().numpy()
    assert ss.shape == (n, 2) and (ss[:, 0] == 1.5).all() and (ss[:, 1] == -0.25).all()
    for name in meta.block_names:  # numpy() gives the same values
        np.testing.assert_array_equal(meta.numpy(name), meta.tensor(name).cpu().numpy())


def test_zero_copy_on_addressable_memory(queue, make_particles):
    coll, data = make_particles(500)
    queue.wait()
    meta = _all_blocks(coll)
    if not meta.zero_copy:
        pytest.skip(f"{coll.device} memory is not addressable from torch (copy path, tested below)")
    assert "zero-copy" in repr(meta)
    for name in meta.block_names:
        t = meta.tensor(name)
        b = meta.block(name)
        assert _inside(coll, t), name
        assert tuple(t.shape) == b.shape and tuple(t.stride()) == b.strides
        assert t.data_ptr() == coll.buffer.ptr + b.offset
    if coll.device.is_host_memory:
        arr = meta.numpy("f")
        assert arr.__array_interface__["data"][0] == coll.buffer.ptr + meta.block("f").offset
        # writing through the tensor writes the collection itself
        meta.tensor("f")[3, 1] = 42.0
        assert coll.y[3] == 42.0


def test_write_outputs_validates_then_writes(queue, make_preds):
    n = 70
    out = make_preds(n)
    queue.wait()
    meta = SoAMetadata(out).append_block("mn", "m", "n").append_block("score", "score")
    good = np.random.default_rng(1).standard_normal((n, 2)).astype(np.float32)
    # the second output is wrong: nothing at all may be written
    with pytest.raises(ValueError, match="'score'.*nothing was written"):
        meta.write_outputs({"mn": good, "score": np.zeros((n, 2), np.float32)})
    cols = out.to_dict(queue)
    assert (cols["m"] == -7).all() and (cols["score"] == -7).all()
    with pytest.raises(TypeError, match="'mn'.*float64"):
        meta.write_outputs({"mn": good.astype(np.float64)})
    meta.write_outputs({"mn": torch.from_numpy(good), "score": np.arange(n, dtype=np.float32)}, queue=queue)
    cols = out.to_dict(queue)
    np.testing.assert_array_equal(np.stack([cols["m"], cols["n"]], 1), good)
    np.testing.assert_array_equal(cols["score"], np.arange(n, dtype=np.float32))
    assert (cols["extra"] == -7).all()
    meta.write_outputs({"mn": good.astype(np.float64) * 2}, cast=True)
    cols = out.to_dict(queue)
    np.testing.assert_allclose(cols["m"], good[:, 0] * 2)


@pytest.fixture
def copy_path(monkeypatch):
    """Treat every device as one whose memory torch cannot address (the OpenCL route)."""
    monkeypatch.setattr(torch_queue_mod, "_forced_copy", True)


@pytest.mark.alpyka_backends("cpu_serial", "cpu_threads")
def test_copy_path_tensors_are_host_copies(queue, make_particles, make_preds, copy_path):
    coll, data = make_particles(90)
    queue.wait()
    meta = _all_blocks(coll)
    assert not meta.zero_copy and "copy path" in repr(meta)
    f = meta.tensor("f")
    assert not _inside(coll, f)
    np.testing.assert_array_equal(f.numpy(), np.stack([data["x"], data["y"], data["z"]], 1))
    np.testing.assert_array_equal(meta.numpy("covs"), np.stack([data["cov"], data["cov2"]], 1))
    out = make_preds(90)
    queue.wait()
    om = SoAMetadata(out).append_block("mn", "m", "n")
    vals = np.random.default_rng(2).standard_normal((90, 2)).astype(np.float32)
    om.write_outputs({"mn": vals})
    np.testing.assert_array_equal(out.m, vals[:, 0])
    np.testing.assert_array_equal(out.n, vals[:, 1])
    assert (out.score == -7).all()


def test_block_description(queue, make_particles):
    coll, _ = make_particles(10)
    meta = SoAMetadata(coll).append_block("f", ["x", "y", "z"])
    b = meta.block("f")
    assert (b.name, b.columns, b.dtype, b.shape, b.strides) == (
        "f",
        ("x", "y", "z"),
        np.dtype(np.float32),
        (10, 3),
        (1, 32),
    )
    assert meta.collection is coll and meta.size == 10
    assert Particles.__name__ in repr(meta) and Preds.__name__ not in repr(meta)


def test_numpy_of_a_block_in_a_buffer_ending_with_a_smaller_dtype(queue):
    """A multi-layout buffer whose last block has a smaller dtype (and alignment) need not be a
    whole number of float64 items: numpy() of a float64 block must still work."""
    import portable as pk
    import soa

    class Wide(soa.Layout):
        a = soa.column(np.float64)
        b = soa.column(np.float64)

    class Tail(soa.Layout, alignment=2):
        k = soa.column(np.int16)

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=5), rng.normal(size=5)
    host = pk.PortableCollection([Wide, Tail], [5, 1], pk.host())
    host.view("Wide").a[:] = a
    host.view("Wide").b[:] = b
    assert host.nbytes % 8  # the case under test
    coll = host if queue.device.is_host_memory else host.to(queue.device, queue)
    queue.wait()
    meta = SoAMetadata(coll, "Wide").append_block("f", "a", "b")
    np.testing.assert_array_equal(meta.numpy("f"), np.stack([a, b], 1))
    np.testing.assert_array_equal(meta.tensor("f").cpu().numpy(), np.stack([a, b], 1))
