"""One Triton tensor description (inference._tensor_desc.TensorDesc) for the client, the server and
the pipeline wire; ``inference.serve`` a plain function."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from inference._tensor_desc import TensorDesc


@pytest.mark.parametrize(
    "value, want",
    [
        ("features:float32:3", TensorDesc("features", np.float32, (3,))),
        ("x", TensorDesc("x", np.float32, (-1,))),
        ("x::", TensorDesc("x", np.float32, ())),
        ("ids:int64:-1,4", TensorDesc("ids", np.int64, (-1, 4))),
        (("y", "float64", [2, 2]), TensorDesc("y", np.float64, (2, 2))),
        (["y"], TensorDesc("y", np.float32, (-1,))),
        ({"name": "z", "dtype": "int32", "shape": [5]}, TensorDesc("z", np.int32, (5,))),
        ({"name": "z", "dims": [5], "batched": True}, TensorDesc("z", np.float32, (5,), True)),
    ],
)
def test_parse(value, want):
    got = TensorDesc.parse(value)
    assert got == want and TensorDesc.parse(got) is got
    assert TensorDesc.parse(got.to_json()) == got


@pytest.mark.parametrize("bad, error", [("", ValueError), ("a:b:c:d", ValueError), (3, TypeError), ((), TypeError)])
def test_parse_refuses(bad, error):
    with pytest.raises(error):
        TensorDesc.parse(bad)


def test_fields_are_normalised():
    t = TensorDesc("x", "float32", [3, "2"])
    assert t.dtype == np.dtype(np.float32) and t.dims == (3, 2) and t.batched is False
    assert (t.name, t.dtype, t.dims) == ("x", "float32", (3, 2))  # a dtype equals its name
    assert hash(t) == hash(TensorDesc("x", np.float32, (3, 2)))


def test_shape_matches_and_describe():
    plain = TensorDesc("x", np.float32, (-1, 3))
    assert plain.shape == (-1, 3) and plain.describe() == "x: float32 [-1, 3]"
    assert plain.matches((7, 3)) and not plain.matches((7, 4)) and not plain.matches((3,))
    batched = TensorDesc("x", np.float32, (3,), batched=True)
    assert batched.shape == (-1, 3) and batched.describe() == "x: float32 [-1, 3]"
    assert batched.matches((100, 3)) and not batched.matches((3,)) and not batched.matches((100, 2))


def test_from_server():
    assert TensorDesc.from_server("x", "float32", [-1, 3], batching=True) == TensorDesc("x", np.float32, (3,), True)
    assert TensorDesc.from_server("x", "float32", [-1, 3], batching=False) == TensorDesc("x", np.float32, (-1, 3))
    # a batching model whose tensor has no -1 batch axis stays unbatched: the client refuses it
    assert not TensorDesc.from_server("x", "float32", [4, 3], batching=True).batched


def test_client_server_and_wire_share_it():
    from inference._pipeline import _wire
    from inference.serving import TensorDecl

    assert TensorDecl is TensorDesc
    remote = pytest.importorskip("inference.remote", exc_type=ImportError)
    assert remote.TensorSpec is TensorDesc
    import soa
    from inference._pipeline import Slot

    class L(soa.Layout):
        x = soa.column(np.float32)
        p = soa.vector(np.int32, 3)
        s = soa.scalar(np.float64)

    got = _wire.slot_decls(Slot("c", L), rows=4)
    assert got == [
        TensorDesc("c__x", np.float32, (4,)),
        TensorDesc("c__p", np.int32, (4, 3)),
        TensorDesc("c__s", np.float64, (1,)),
    ]


def test_serve_is_a_plain_function():
    import inference
    import inference.serving
    from inference import serve

    assert inspect.isfunction(serve) and serve is inference.serve is inference.serving.serve
    assert type(inference.serving) is type(inspect)  # a plain module
    assert list(inspect.signature(serve).parameters)[0] == "models"
