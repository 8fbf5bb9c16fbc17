"""Fixtures of the remote-inference tests: SoA collections, the KServe double, a PyTriton server.

Every server a test starts is stopped by the fixture that started it, also when the test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import portable as pk
import soa

pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")

HERE = Path(__file__).resolve().parent


class Hits(soa.Layout):
    a = soa.column(np.float32)
    b = soa.column(np.float32)
    c = soa.column(np.float32)
    flag = soa.column(np.int32)


class Preds(soa.Layout):
    p = soa.column(np.float32)
    q = soa.column(np.float32)
    r = soa.column(np.float32)


class Scores(soa.Layout):
    s0 = soa.column(np.float32)
    s1 = soa.column(np.float32)


def make_hits(n: int, seed: int = 0) -> pk.PortableCollection:
    rng = np.random.default_rng(seed)
    coll = pk.PortableCollection(Hits, n, pk.host())
    v = coll.view()
    for name in ("a", "b", "c"):
        getattr(v, name)[:] = rng.standard_normal(n).astype(np.float32)
    v.flag[:] = rng.integers(0, 5, n).astype(np.int32)
    return coll


def hits_matrix(coll: pk.PortableCollection) -> np.ndarray:
    v = coll.view()
    return np.stack([v.a, v.b, v.c], axis=1).copy()


def make_out(layout: type, n: int, fill: float = -7.0) -> pk.PortableCollection:
    coll = pk.PortableCollection(layout, n, pk.host())
    v = coll.view()
    for name in layout.field_names():
        getattr(v, name)[:] = fill
    return coll


def out_matrix(coll: pk.PortableCollection) -> np.ndarray:
    v = coll.view()
    return np.stack([getattr(v, n) for n in coll.layout.field_names()], axis=1).copy()


def metadata(hits: pk.PortableCollection, out: pk.PortableCollection, in_block: str = "x", out_block: str = "y"):
    from inference import ModelMetadata, SoAMetadata

    ins = SoAMetadata(hits).append_block(in_block, "a", "b", "c")
    outs = SoAMetadata(out).append_block(out_block, *out.layout.field_names())
    return ModelMetadata(ins, outs)


@pytest.fixture
def double():
    """An in-process KServe v2 double (model ``double``: y = 2x), stopped after the test."""
    from .kserve_double import DoubleServer

    servers: list = []

    def start(**behaviour):
        from .kserve_double import Behaviour

        srv = DoubleServer(Behaviour(**behaviour))
        servers.append(srv)
        return srv

    try:
        yield start
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def double_process():
    """The double in a child process (killed by its pid in the test, and after it in any case)."""
    procs: list[subprocess.Popen] = []

    def start(port: int, delay: float = 0.0) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "kserve_double.py"), str(port), "--delay", str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        line = proc.stdout.readline()  # "ready PORT"
        assert line.startswith("ready"), line
        return proc

    try:
        yield start
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
            if p.stdout:
                p.stdout.close()
