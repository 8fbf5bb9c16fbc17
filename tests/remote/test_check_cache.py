"""RemoteModel.check keeps the block mapping it found per model description and metadata
signature. A description the server gives after a reconnect is a new object, and a freed
object's id is often the next object's: the cache must never answer for a new description with
the mapping found for an old one (before, it was keyed by the id alone and held no reference,
so a description at a freed address got the old mapping)."""

from __future__ import annotations

import numpy as np

import portable as pk
import soa
from inference import ModelMetadata, SoAMetadata
from inference._tensor_desc import TensorDesc
from inference.remote import RemoteModel, _client
from inference.remote._transport import ModelInfo


class Feats(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)


class Score(soa.Layout):
    s = soa.column(np.float32)


def _info(inp: str, out: str) -> ModelInfo:
    return ModelInfo("m", [TensorDesc(inp, np.float32, (2,), True)], [TensorDesc(out, np.float32, (1,), True)], 8)


def test_a_new_model_description_at_a_freed_id_is_checked_again(monkeypatch):
    """Every description gets one id here (what CPython does when the new one lands where the
    freed one was; made certain instead of waited for)."""
    real_id = id
    monkeypatch.setattr(_client, "id", lambda x: 1 if isinstance(x, ModelInfo) else real_id(x), raising=False)
    q = pk.Queue(pk.host(), blocking=True)
    meta = ModelMetadata(
        SoAMetadata(pk.PortableCollection(Feats, 4, q)).append_block("f", "x", "y"),
        SoAMetadata(pk.PortableCollection(Score, 4, q)).append_block("p", "s"),
    )
    client = RemoteModel("127.0.0.1:9", "m", connect=False, shared_memory=None)
    server = client.server
    server.info = _info("x_in", "y_out")
    assert client.check(meta) == {"inputs": {"f": "x_in"}, "outputs": {"p": "y_out"}}
    server.reset()  # the server went away; the next use reads the model's description anew
    server.info = _info("input__0", "output__0")  # (the model was redeployed with new tensor names)
    assert client.check(meta) == {"inputs": {"f": "input__0"}, "outputs": {"p": "output__0"}}
    client.close()
