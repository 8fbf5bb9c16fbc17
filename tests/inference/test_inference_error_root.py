"""Wrong input to inference (metadata, a model's outputs, pipelines, the Triton client and serve)
raises alpyka's error root, still the builtin it was (``pk.NameNotFound`` a ``KeyError``,
``pk.ArgumentError`` a ``ValueError``, ``pk.ArgumentTypeError`` a ``TypeError``), with the known
names or the fix in the message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import inference
import portable as pk
import soa
from alpyka_testing.errors import raises_name, raises_root, raises_type, raises_value
from alpyka_testing.inference import Particles
from inference import Model, ModelMetadata, SoAMetadata

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")


class Wide(soa.Layout):
    x = soa.column(np.longdouble)  # a dtype numpy and SoA have, torch does not


def test_unknown_column_and_block_names(queue):
    coll = pk.PortableCollection(Particles, 10, queue)
    with raises_name(r"^block 'bad': Particles has no column\(s\) \['energy'\]; its columns are \['x', .*name those$"):
        SoAMetadata(coll).append_block("bad", "x", "energy")
    meta = SoAMetadata(coll).append_block("f", "x")
    with raises_name(r"^no block 'g'; the blocks are \['f'\]: name one of those$"):
        meta.block("g")
    with raises_name(r"outputs name unknown block\(s\) \['h'\]; the blocks are \['f'\]: key the outputs by those"):
        meta.write_outputs({"h": np.zeros(10, np.float32)}, queue=queue)


def test_a_dtype_torch_lacks_is_refused_at_the_block(queue):
    coll = pk.PortableCollection(Wide, 4, pk.host())
    with raises_type(r"block 'f': dtype float128 has no torch equivalent .*give the column a dtype torch has: "):
        SoAMetadata(coll).append_block("f", "x")


def test_model_outputs_by_the_wrong_names(queue, make_particles, make_preds):
    coll, _ = make_particles(16)
    inputs = SoAMetadata(coll).append_block("f", "x", "y", "z")
    outputs = SoAMetadata(make_preds(16)).append_block("preds", "m", "n").append_block("score", "score")

    class ByOtherNames(torch.nn.Module):
        def forward(self, x):
            return {"preds": x[:, :2] * 1, "scores": x[:, :1] * 1}

    Model(ByOtherNames()).to(queue).forward(ModelMetadata(inputs, outputs))
    with pytest.raises(pk.AsyncError) as info:
        queue.wait()
    cause = info.value.__cause__
    assert isinstance(cause, pk.NameNotFound) and isinstance(cause, KeyError)
    assert str(cause).startswith("the model's outputs ['preds', 'scores'] do not match the output blocks")
    assert "(missing ['score'], unexpected ['scores']); return a dict keyed by exactly" in str(cause)


def test_a_model_with_no_queue_says_how_to_give_it_one(queue, make_particles, make_preds):
    """A forward with no queue bound and none passed: ``pk.StateError`` (a RuntimeError) naming
    both ways to give one; the model runs once it has one."""
    coll, _ = make_particles(16)
    meta = ModelMetadata(
        SoAMetadata(coll).append_block("f", "x", "y", "z"), SoAMetadata(make_preds(16)).append_block("preds", "m", "n")
    )
    model = Model(torch.nn.Linear(3, 2))
    fix = r"no queue: call model\.to\(queue\) first or pass forward\(\.\.\., queue=q\)"
    with raises_root(pk.StateError, RuntimeError, fix):
        model.forward(meta)
    model.forward(meta, queue=queue)
    queue.wait()


def test_set_torch_threads():
    for bad in (0, -2, 1.5, True):
        with raises_value(r"set_torch_threads: intra_op must be a positive integer \(1, 2, \.\.\.\)"):
            inference.set_torch_threads(bad)


# ---------------------------------------------------------------------- the Triton client
def test_remote_model_arguments():
    from inference.remote import RemoteModel

    url = "127.0.0.1:9"
    for kw, match in (
        (dict(model_name=""), r"needs the model's name on the server: RemoteModel\(url, 'name'\)"),
        (dict(mode="fast"), r"mode must be one of .*got 'fast'"),
        (dict(shared_memory="cuda"), r"shared_memory must be 'auto', 'system' or None, got 'cuda'"),
        (dict(retries=-1), r"retries must be >= 0 \(0: no retry\), got -1"),
        (dict(timeout=0), r"timeout must be positive seconds \(or None: no limit\), got 0"),
        (dict(ready_timeout=-1), r"ready_timeout must be >= 0 seconds \(or None\), got -1"),
    ):
        args = {"model_name": "mlp", **kw}
        with raises_value(match):
            RemoteModel(url, args.pop("model_name"), connect=False, **args)
    with raises_value(r"needs a server url, a servers=\[\.\.\.\] list or a fallback model; give one of them"):
        RemoteModel(None, "mlp", connect=False)
    model = RemoteModel(url, "mlp", connect=False)
    with raises_type(r"to\(\) takes a pk\.Queue \(or None\), got str"):
        model.to("cpu_serial")
    with raises_value(r"forward_many needs at least one ModelMetadata; pass a list of them"):
        model.forward_many([])
    with raises_type(r"forward_many takes ModelMetadata\(inputs, outputs\) objects, got int"):
        model.forward_many([3])
    with raises_type(r"queue must be a pk\.Queue \(or None: the bound one\), got str"):
        model.forward(type("Metadata", (), {"inputs": None, "outputs": None})(), queue="q")


def test_triton_datatypes_and_protocol():
    from inference.remote._tensors import numpy_dtype, triton_dtype
    from inference.remote._transport import Transport

    with raises_type(r"dtype float128 has no KServe v2 datatype; give the column one of bool, int8"):
        triton_dtype(np.longdouble)
    with raises_type(r"KServe v2 datatype 'BYTES' is not supported by alpyka; it reads .*FP32"):
        numpy_dtype("BYTES")
    with raises_value(r"protocol must be 'grpc' or 'http', got 'udp'"):
        Transport("127.0.0.1:9", protocol="udp")


def test_ragged_batches():
    from inference.remote import _batching

    with raises_value(r"ragged batching needs at least one event; pass one ModelMetadata per event"):
        _batching.concatenate([])
    a = {"f": np.zeros((2, 3), np.float32)}
    with raises_value(r"event 1 has input blocks \['g'\], event 0 has \['f'\]; give every event the same blocks"):
        _batching.concatenate([a, {"g": a["f"]}])
    with raises_value(r"input blocks of event 0 disagree on the batch size: .*give every input block the same rows"):
        _batching.concatenate([{"f": a["f"], "g": np.zeros((3, 1), np.float32)}])
