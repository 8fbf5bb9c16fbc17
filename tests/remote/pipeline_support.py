"""Pipelines the pipeline tests serve: imported by the tests and, by reference, by the server.

``chain``: two kernels around a Model over a layout with column, vector, matrix and scalar
fields; plus pipelines that fail in the ways the error tests need.
"""

from __future__ import annotations

import os
import time

import numpy as np

import portable as pk
import soa
from inference import Model, ModelMetadata, SoAMetadata, pipeline


class Tracks(soa.Layout):
    x = soa.column(np.float32)
    p = soa.vector(np.float32, 3)
    cov = soa.matrix(np.float32, 2, 2)
    charge = soa.column(np.int32)
    scale = soa.scalar(np.float32)


class Features(soa.Layout):  # the model's input block: three float32 columns, adjacent
    f0 = soa.column(np.float32)
    f1 = soa.column(np.float32)
    f2 = soa.column(np.float32)


class Scored(soa.Layout):
    score = soa.column(np.float32)
    e = soa.vector(np.float32, 2)
    tag = soa.column(np.int32)
    total = soa.scalar(np.float32)


class Summary(soa.Layout):
    s = soa.column(np.float32)


def _model() -> Model:
    import torch

    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).eval()
    return Model(net)


#: loaded once per process (once per server)
MODEL = _model()


@pk.kernel
def make_features(acc, tracks, feats, n):
    for i in acc.uniform_elements(n):
        feats.f0[i] = tracks.x[i] * tracks.scale + tracks.p[i, 0]
        feats.f1[i] = tracks.p[i, 1] - tracks.cov[i, 0, 1]
        feats.f2[i] = tracks.p[i, 2] * tracks.cov[i, 1, 0] + tracks.cov[i, 1, 1]


@pk.kernel
def finish(acc, tracks, out, n):
    for i in acc.uniform_elements(n):
        out.e[i, 0] = out.score[i] * 2.0
        out.e[i, 1] = tracks.x[i] - tracks.cov[i, 0, 0]
        out.tag[i] = tracks.charge[i] * 3 + 1
    if acc.once_per_grid():
        out.total = tracks.scale * 2.0


@pipeline(inputs=Tracks, outputs=Scored)
def chain(q, tracks, scored):
    """make_features -> MODEL -> finish."""
    n = tracks.size
    feats = pk.PortableCollection(Features, n, q)
    pk.exec(q, pk.valid_workdiv(q.device, max(n, 1)), make_features, tracks.const_view(), feats.view(), n)
    md = ModelMetadata(
        SoAMetadata(feats).append_block("x", "f0", "f1", "f2"), SoAMetadata(scored).append_block("y", "score")
    )
    MODEL.to(q).forward(md)
    pk.exec(q, pk.valid_workdiv(q.device, max(n, 1)), finish, tracks.const_view(), scored.view(), n)


@pk.kernel
def sum_rows(acc, tracks, out, n):
    for i in acc.uniform_elements(n):
        out.s[i] = tracks.x[2 * i] + tracks.x[2 * i + 1]


@pipeline(inputs={"tracks": Tracks}, outputs={"pairs": Summary}, rows=lambda n: n // 2)
def pairs(q, tracks, pairs):
    """Output rows as a function of the input rows."""
    pk.exec(q, pk.valid_workdiv(q.device, max(pairs.size, 1)), sum_rows, tracks.const_view(), pairs.view(), pairs.size)


@pk.kernel
def only_score(acc, out, n):
    for i in acc.uniform_elements(n):
        out.score[i] = 1.0


@pipeline(inputs=Tracks, outputs=Scored)
def half_done(q, tracks, scored):
    """Fills only ``score``: the other output columns stay unwritten."""
    pk.exec(q, pk.valid_workdiv(q.device, max(scored.size, 1)), only_score, scored.view(), scored.size)


@pipeline(inputs=Tracks, outputs=Scored)
def broken(q, tracks, scored):
    """Fails on the server with a message the client must show."""
    if tracks.size:
        raise ValueError(f"broken pipeline refuses {tracks.size} rows")


@pipeline(inputs=Tracks, outputs=Scored)
def slow(q, tracks, scored):
    """chain, after sleeping ALPYKA_TEST_SLOW_S seconds on the server (timeouts, kills)."""
    time.sleep(float(os.environ.get("ALPYKA_TEST_SLOW_S", "0")) if tracks.size else 0.0)
    chain.fn(q, tracks, scored)


@pipeline(inputs=Tracks, outputs=Scored)
def held(q, tracks, scored):
    """chain, held ALPYKA_TEST_HOLD_S seconds first when ``scale`` is not 0 (the server's warm-up
    runs on zeros, make_tracks' scale is 1.5), after making the file ALPYKA_TEST_STARTED names:
    a request has started on the server (the stop tests)."""
    if tracks.size and float(tracks.to_dict(q)["scale"]) != 0.0:
        started = os.environ.get("ALPYKA_TEST_STARTED")
        if started:
            open(started, "a").close()
        time.sleep(float(os.environ.get("ALPYKA_TEST_HOLD_S", "0")))
    chain.fn(q, tracks, scored)


def not_a_pipeline(q, tracks, scored):
    """A plain function: serve must refuse it."""


def make_tracks(n: int, q: pk.Queue, seed: int = 0) -> pk.PortableCollection:
    """Tracks with random values (built on the host, copied to q's device)."""
    rng = np.random.default_rng(seed)
    data = {
        "x": rng.standard_normal(n).astype(np.float32),
        "p": rng.standard_normal((n, 3)).astype(np.float32),
        "cov": rng.standard_normal((n, 2, 2)).astype(np.float32),
        "charge": rng.integers(-1, 2, n).astype(np.int32),
        "scale": np.float32(1.5),
    }
    return pk.PortableCollection.from_dict(Tracks, data, q)
