"""The model and collections the inference benchmarks share, and bench_inference's part 2:
``Model.forward`` in each input layout against the bare model (the overhead by batch)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import _common as common
import numpy as np
import torch
from tqdm import tqdm

import portable as pk
import soa
from inference import Model, ModelMetadata, SoAMetadata


class Hits(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float32)
    z = soa.column(np.float32)


class Out(soa.Layout):
    a = soa.column(np.float32)
    b = soa.column(np.float32)
    c = soa.column(np.float32)  # consumer result


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)
    ).eval()


def host_collection(n: int, q: pk.Queue) -> pk.PortableCollection:
    rng = np.random.default_rng(0)
    data = {k: rng.standard_normal(n).astype(np.float32) for k in ("x", "y", "z")}
    return pk.PortableCollection.from_dict(Hits, data, q)


LAYOUT_NAMES = ("zero_copy", "gather", "auto")


def _forward_contenders(batch: int) -> tuple[dict[str, Callable[[], object]], dict[str, object]]:
    """The bare model on a row-major tensor made beforehand and on the block's strided view (no
    outputs written), the model on the view writing its outputs into SoA columns by hand, and
    ``Model.forward`` in each layout (its own output collection), on a
    blocking cpu_serial queue (the pass runs inline: per-call cost, no thread hop); and what the
    checks need (the module, the input tensor, the output collections, the auto layout's choice)."""
    q = pk.Queue(pk.host(), blocking=True)
    module = mlp()
    coll = host_collection(batch, q)
    model = Model(module).to(q)
    tensor = torch.from_numpy(np.stack([coll.x, coll.y, coll.z], axis=1))
    strided = SoAMetadata(coll).append_block("f", "x", "y", "z").tensor("f")
    mode = torch._C._InferenceMode  # what Model.forward itself enters (inference/_plan.py)

    def bare():
        with mode(True):
            return module(tensor)

    def bare_strided():
        with mode(True):
            return module(strided)

    by_hand_out = pk.PortableCollection(Out, batch, q)
    target = SoAMetadata(by_hand_out).append_block("p", "a", "b").tensor("p")

    def by_hand():  # what a user writing the outputs into the SoA columns by hand pays
        with mode(True):
            target.copy_(module(strided))

    fns: dict[str, Callable[[], object]] = {"bare": bare, "bare_strided": bare_strided, "by_hand": by_hand}
    outs = {}
    for layout in LAYOUT_NAMES:
        out = outs[layout] = pk.PortableCollection(Out, batch, q)
        meta = ModelMetadata(
            SoAMetadata(coll).append_block("f", "x", "y", "z"),
            SoAMetadata(out).append_block("p", "a", "b"),
            layout=layout,
        )
        fns[layout] = functools.partial(model.forward, meta)
        if layout == "auto":  # auto's measurement is part of its first passes, not of the timing
            while model.input_layout(meta) == "measuring":
                model.forward(meta)
            chosen = model.input_layout(meta)
    ctx = {"module": module, "tensor": tensor, "outs": outs, "by_hand": by_hand_out, "auto_chose": chosen}
    return fns, ctx


def _layout_checks(ctx: dict[str, object]) -> dict[str, bool]:
    """Every layout's outputs close to the bare model's, and which are its bits exactly."""
    with torch.inference_mode():
        want = ctx["module"](ctx["tensor"]).numpy()  # type: ignore[operator]
    got = {k: np.stack([c.a, c.b], 1) for k, c in ctx["outs"].items()}  # type: ignore[union-attr]
    for k, v in got.items():
        np.testing.assert_allclose(v, want, rtol=1e-5, atol=1e-6, err_msg=f"layout {k}")
    zero = got["zero_copy"].view(np.uint32)
    by_hand = ctx["by_hand"]
    return {
        "zero_copy_same_bits_as_by_hand": bool(
            np.array_equal(np.stack([by_hand.a, by_hand.b], 1).view(np.uint32), zero)  # type: ignore[union-attr]
        ),
        "gather_same_bits_as_zero_copy": bool(np.array_equal(got["gather"].view(np.uint32), zero)),
        "auto_same_bits_as_zero_copy": bool(np.array_equal(got["auto"].view(np.uint32), zero)),
        "gather_same_bits_as_bare": bool(np.array_equal(got["gather"].view(np.uint32), want.view(np.uint32))),
    }


def bench_forward_overhead(batches: list[int], rounds: int, bar: tqdm) -> dict:
    """``Model.forward`` in each layout against the bare model, per batch: shuffled interleaved
    rounds (``common.interleaved``) timed in wall time and, in rounds of their own, in the calling
    thread's CPU time (torch runs the model on it alone: one intra-op thread), which other
    processes taking the core do not inflate; the median of per-round ratios and the ratio of the
    best rounds of each, with the load and the cores other processes kept busy meanwhile."""
    rows = []
    for batch in batches:
        fns, ctx = _forward_contenders(batch)
        calls = max(1, 40960 // batch)  # about 7 ms of model a round at batch 4096
        load_before, ticks = os.getloadavg()[0], common.cpu_ticks()
        row: dict[str, object] = {"batch": batch, "calls_per_round": calls, "rounds": rounds}
        for clock, suffix in ((time.perf_counter, ""), (time.thread_time, "_cpu")):
            timings, errors = common.interleaved(fns, rounds, calls=calls, warmup=2, clock=clock)
            if errors:
                raise RuntimeError(f"forward overhead at batch {batch}: {errors}")
            bare = timings["bare"]
            row.update({f"{k}{suffix}_us": t.median * 1e6 for k, t in timings.items()})
            row.update({f"{k}{suffix}_best_us": t.min * 1e6 for k, t in timings.items()})
            for k in ("bare_strided", "by_hand", *LAYOUT_NAMES):
                row[f"{k}{suffix}_overhead_pct"] = 100 * (common.paired_ratio(timings[k], bare) - 1)
                row[f"{k}{suffix}_overhead_pct_best"] = 100 * (timings[k].min / bare.min - 1)
        row.update(
            auto_chose=ctx["auto_chose"],
            load_before=round(load_before, 2),
            load_after=round(os.getloadavg()[0], 2),
            cores_busy_elsewhere=common.others_cores(ticks, common.cpu_ticks(), os.cpu_count() or 1),
            torch_threads=torch.get_num_threads(),
            **_layout_checks(ctx),
        )
        rows.append(row)
        bar.update(1)
    return {"rows": rows, "target_pct": 5.0}
