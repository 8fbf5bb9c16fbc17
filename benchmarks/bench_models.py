"""Inference throughput and latency of a ParticleNet-shaped and a DeepMET-shaped model vs batch
size, side by side in one run: eager PyTorch, TorchScript (JIT), a torch.export program (.pt2, not
compiled), AOTInductor (.pt2), ONNX Runtime, and alpyka's ``inference.Model`` over the same files
(JIT, torch.export, AOTInductor, ONNX Runtime) reading the inputs from SoA collections. For the
DeepMET-shaped model alpyka's AOTInductor and ONNX Runtime routes also read a collection of one row
per candidate (``_pc``; CMSSW's layout of particle-flow candidates) instead of one matrix column
per event.

    python benchmarks/bench_models.py [--quick] [--smoke] [--aot] [--threads 1] [--out benchmarks/results]

Latency is the median wall time of one inference call on a batch; throughput is batch / latency
(events/s). Ratios in the summary are throughput relative to eager at the same batch size; the
summary also names the fastest route per batch size and alpyka's best route against the best peer.
Compiled artifacts (TorchScript, ONNX, AOTInductor) are cached under ~/.cache/alpyka/bench/,
keyed by a hash of the model source, the torch version and the platform. In --quick mode an
AOTInductor package is compiled only with --aot (a compile takes ~10-60 s); --smoke never does.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

FULL_BATCHES = (4, 16, 64, 256, 1024, 2048)
QUICK_BATCHES = (4, 16, 128)  # the brief asked 4, 64, 512: over a minute on 2 shared cores (--batch-sizes)
SMOKE_BATCHES = (4,)
VARIANTS = (
    "eager",
    "jit",
    "exported",
    "aot",
    "onnx",
    "aot_soa",
    "onnx_soa",
    "alpyka_jit",
    "alpyka_exported",
    "alpyka_aot",
    "alpyka_onnx",
    "alpyka_aot_pc",
    "alpyka_onnx_pc",
)
LABELS = {
    "eager": "eager",
    "jit": "TorchScript JIT",
    "exported": "torch.export program",
    "aot": "AOTInductor",
    "onnx": "ONNX Runtime",
    "aot_soa": "AOTInductor fed from the SoA collection by hand (a contiguous copy per block)",
    "onnx_soa": "ONNX Runtime fed from the SoA collection by hand (a contiguous copy per block)",
    "alpyka_jit": "alpyka Model (JIT, SoA)",
    "alpyka_exported": "alpyka Model (torch.export, SoA)",
    "alpyka_aot": "alpyka Model (AOT, SoA)",
    "alpyka_onnx": "alpyka Model (ONNX Runtime, SoA)",
    "alpyka_aot_pc": "alpyka Model (AOT, per-candidate SoA)",
    "alpyka_onnx_pc": "alpyka Model (ONNX Runtime, per-candidate SoA)",
}
# not routes: the SoA -> row-major gather of a batch's inputs alone, the floor of alpyka's
# row-major routes over their engines, for either layout of the inputs
GATHER, GATHER_PC = "soa_gather", "soa_gather_pc"
LABELS[GATHER] = "SoA -> row-major gather of the inputs (alone)"
LABELS[GATHER_PC] = "per-candidate SoA -> row-major gather of the inputs (alone)"


def build_parser():
    parser = common.make_parser(__doc__)
    parser.add_argument(
        "--aot", action="store_true", help="in --quick mode, compile AOTInductor packages that are not cached yet"
    )
    parser.add_argument("--no-aot", action="store_true", help="never use AOTInductor")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op / ONNX Runtime / OpenMP threads (default 1, alpyka's setting)",
    )
    parser.add_argument("--models", default="particlenet,deepmet", help="comma-separated model names")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes (overrides the mode)")
    parser.add_argument(
        "--queue",
        choices=["blocking", "non-blocking"],
        default="blocking",
        help="the cpu_serial queue alpyka's routes run on (default blocking, as CMSSW's serial_sync "
        "backend; a non-blocking queue adds its worker's hand-off to every call)",
    )
    parser.add_argument(
        "--max-memory-gib",
        type=float,
        default=6.0,
        help="skip batch sizes whose estimated activation memory exceeds this",
    )
    return parser


def _batch_sizes(args: Any, run_mode: str) -> tuple[int, ...]:
    """The batch sizes to time: ``--batch-sizes``, else the mode's; each at least 2."""
    if args.batch_sizes:
        batches = tuple(int(b) for b in args.batch_sizes.split(","))
    else:
        batches = {"smoke": SMOKE_BATCHES, "quick": QUICK_BATCHES, "full": FULL_BATCHES}[run_mode]
    if min(batches) < 2:
        raise SystemExit("batch sizes must be >= 2 (the exported models have a dynamic batch axis from 2)")
    return batches


def _unprepared_rows(name: str, variants: Any) -> list[dict[str, Any]]:
    """A "skipped" row for each variant of model ``name`` that could not be prepared, saying why."""
    return [
        {
            "model": name,
            "variant": v,
            "label": LABELS[v],
            "batch": None,
            "status": "skipped",
            "reason": variants.skipped.get(v, "not prepared"),
        }
        for v in VARIANTS
        if v not in variants.runners
    ]


def _timed_rows(
    name: str, batch: int, ready: list[str], variants: Any, timings: dict[str, Any], errors: dict[str, Any]
) -> list[dict[str, Any]]:
    """The rows of one batch: each ready variant's latency and throughput (or why it failed),
    then the gather steps' own latency."""
    rows: list[dict[str, Any]] = []
    for v in ready:
        row: dict[str, Any] = {"model": name, "variant": v, "label": LABELS[v], "batch": batch}
        if v not in timings:
            rows.append({**row, "status": "failed", "reason": errors.get(v, "not timed")})
            continue
        t = timings[v]
        row.update(
            status="ok",
            **t.as_dict("latency"),
            throughput_eps=batch / t.median,
            max_abs_diff_vs_eager=variants.max_abs_diff.get(v),
            agrees_with_eager=variants.agrees.get(v),
        )
        engine = engine_of(v)
        if v.startswith("alpyka") and engine in timings:  # the same engine fed row-major tensors
            row["throughput_vs_engine_paired"] = common.paired_ratio(timings[engine], t)
        rows.append(row)
    for g in (GATHER, GATHER_PC):
        if g in timings:
            rows.append(
                {
                    "model": name,
                    "variant": g,
                    "label": LABELS[g],
                    "batch": batch,
                    "status": "ok",
                    **timings[g].as_dict("latency"),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(build_parser(), argv)
    if args.threads < 1:
        raise SystemExit("--threads must be >= 1")
    # OpenMP (AOTInductor kernels) reads this at start-up: set before torch is imported
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    import models as bench_models
    from _model_variants import REL_TOLERANCE, ModelVariants

    run_mode = common.mode(args)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in bench_models.MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(bench_models.MODELS)}")
    batches = _batch_sizes(args, run_mode)
    timing = {
        "smoke": dict(warmup=1, repeats=2, min_repeats=1, budget_s=0.5),
        "quick": dict(warmup=1, repeats=5, min_repeats=2, budget_s=1.0),
        "full": dict(warmup=1, repeats=200, min_repeats=3, budget_s=4.0),
    }[run_mode]
    # the largest quick batch: one warm-up and one timed call
    last_quick = dict(warmup=1, repeats=1, min_repeats=1, budget_s=None)
    aot_policy = (
        "never"
        if (args.no_aot or run_mode == "smoke")
        else ("compile" if (run_mode == "full" or args.aot) else "cached")
    )
    mem_limit = args.max_memory_gib * 2**30

    rows: list[dict[str, Any]] = []
    pairs: dict[tuple[str, int], dict[str, Any]] = {}  # (model, batch) -> best_against_best
    keep: list[Any] = []
    prep: dict[str, dict[str, Any]] = {}
    for name in names:
        bm = bench_models.MODELS[name]
        t0 = time.perf_counter()
        variants = ModelVariants(bm, threads=args.threads, aot_policy=aot_policy, blocking=args.queue == "blocking")
        prep[name] = {"prepare_s": time.perf_counter() - t0, **variants.describe()}
        rows += _unprepared_rows(name, variants)
        ready = [v for v in VARIANTS if v in variants.runners]
        bar = common.progress(batches, total=len(batches), desc=f"{name}", disable=args.no_progress)
        inputs_cache: dict[int, Any] = {}
        for batch in bar:
            bar.set_postfix_str(f"batch {batch}")
            if batch * bm.bytes_per_event_hint > mem_limit:
                rows += [
                    {
                        "model": name,
                        "variant": v,
                        "label": LABELS[v],
                        "batch": batch,
                        "status": "skipped",
                        "reason": (
                            f"estimated activations {batch * bm.bytes_per_event_hint / 2**30:.1f} GiB "
                            f"exceed --max-memory-gib {args.max_memory_gib}"
                        ),
                    }
                    for v in ready
                ]
                continue
            inputs_cache.clear()
            bound = inputs_cache[batch] = variants.bind_inputs(bm.inputs(batch, seed=batch))
            fns = {v: variants.call(v, bound) for v in ready}
            if any(v.startswith("alpyka") and not v.endswith("_pc") for v in ready):
                fns[GATHER] = variants.gather_call(bound)
            if any(v.endswith("_pc") for v in ready):
                fns[GATHER_PC] = variants.gather_call(bound, per_candidate=True)
            how = dict(last_quick if run_mode == "quick" and batch == max(batches) else timing)
            # TorchScript's profiling executor re-specialises on a new shape: one more warm-up for all
            timings, errors = common.interleaved(
                fns, how["repeats"], warmup=how["warmup"] + 1, min_rounds=how["min_repeats"], budget_s=how["budget_s"]
            )
            rows += _timed_rows(name, batch, ready, variants, timings, errors)
            pairs[(name, batch)] = best_against_best(timings, by_hand_per_candidate=bool(bm.rows_per_event))
        inputs_cache.clear()
        keep.append(variants)  # released together at exit (see below)

    summary = make_summary(rows, names, batches, pairs)
    doc = common.result_document(
        "models",
        device=f"cpu ({common.machine_info()['cpu']}), torch threads={args.threads}",
        quick=bool(args.quick),
        results=rows,
        summary=summary,
        mode=run_mode,
        threads={
            "torch_intra_op": torch.get_num_threads(),
            "torch_inter_op": torch.get_num_interop_threads(),
            "onnxruntime_intra_op": args.threads,
            "omp": args.threads,
        },
        batch_sizes=list(batches),
        timing=timing,
        timing_largest_quick_batch=last_quick if run_mode == "quick" else None,
        interleaved="round-robin over the variants of one batch, in a new (seeded) random order each round; "
        "warm-up + 1 call each",
        aot_policy=aot_policy,
        preparation=prep,
        alpyka_queue=f"cpu_serial, {args.queue}",
        variants={v: LABELS[v] for v in VARIANTS},
        notes=[
            "throughput = batch / median latency of one inference call; ratios are vs eager at the same batch",
            f"alpyka rows include the SoA -> tensor path and the queue (Model.forward + queue.wait, a {args.queue} "
            "cpu_serial queue)",
        ],
    )
    path = common.write_json(args.out, "models", doc)
    plot(rows, names, args.out)
    print(format_table(summary))
    print(f"wrote {path} and {args.out / 'models.png'}")
    disagree = [f"{r['model']}/{r['variant']}" for r in rows if r.get("agrees_with_eager") is False]
    if disagree:
        print(
            f"WARNING: outputs differ from eager beyond rel. tolerance {REL_TOLERANCE}: {sorted(set(disagree))}",
            file=sys.stderr,
        )
    return 0


def is_peer(variant: str) -> bool:
    """A route the summary compares alpyka's with: an engine fed row-major tensors (not alpyka's,
    not the by-hand ones reading the SoA collections, which are the same engines plus a copy)."""
    return not variant.startswith("alpyka") and not variant.endswith("_soa")


def best_against_best(timings: dict[str, Any], by_hand_per_candidate: bool) -> dict[str, Any]:
    """alpyka's fastest route against the fastest peer in the same rounds (the median of the
    per-round throughput ratios, less exposed to load that drifts during a run than a ratio of
    medians), and against its engine fed from the same SoA collection by hand, when that reads
    the layout the route reads (``by_hand_per_candidate``: the by-hand routes read the
    per-candidate collection)."""
    ours = {v: t for v, t in timings.items() if v in VARIANTS and v.startswith("alpyka")}
    peers = {v: t for v, t in timings.items() if v in VARIANTS and is_peer(v)}
    if not ours or not peers:
        return {}
    best = min(ours, key=lambda v: ours[v].median)
    peer = min(peers, key=lambda v: peers[v].median)
    out: dict[str, Any] = {"paired": common.paired_ratio(peers[peer], ours[best])}
    hand = timings.get(engine_of(best) + "_soa")  # the same engine fed from the same SoA memory by hand
    if hand is not None and best.endswith("_pc") == by_hand_per_candidate:
        out["by_hand"] = common.paired_ratio(hand, ours[best])
    return out


def engine_of(variant: str) -> str:
    """The peer route running the engine an alpyka route runs ("alpyka_aot_pc" -> "aot")."""
    return variant.removeprefix("alpyka_").removesuffix("_pc")


def make_summary(
    rows: list[dict[str, Any]],
    names: list[str],
    batches: tuple[int, ...],
    pairs: dict[tuple[str, int], dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{"<model>, batch <b>": {"eager events/s": x, "<variant>": throughput ratio vs eager, ...}}``
    with the fastest route, alpyka's best route against the best peer (ratio of medians, and
    paired rounds: :func:`best_against_best`), against its own engine fed row-major tensors and
    fed from the SoA collection by hand (paired rounds), and the gathers alone (the floor of the
    difference to the engine fed row-major) of each input layout."""
    pairs = pairs or {}
    ok = {(r["model"], r["variant"], r["batch"]): r for r in rows if r["status"] == "ok"}
    summary: dict[str, dict[str, Any]] = {}
    for name in names:
        for b in batches:
            tp = {v: ok[(name, v, b)]["throughput_eps"] for v in VARIANTS if (name, v, b) in ok}
            eager = tp.get("eager")
            if eager is None:
                continue
            entry: dict[str, Any] = {"eager events/s": eager}
            for v in VARIANTS[1:]:
                entry[f"{v} / eager"] = common.ratio(tp.get(v), eager)
            peers = {v: t for v, t in tp.items() if is_peer(v)}
            ours = {v: t for v, t in tp.items() if v.startswith("alpyka")}
            entry["fastest"] = max(tp, key=tp.get)
            if peers and ours:
                best_peer, best_ours = max(peers, key=peers.get), max(ours, key=ours.get)
                entry["alpyka best"] = best_ours
                entry["best peer"] = best_peer
                entry["alpyka best / best peer"] = ours[best_ours] / peers[best_peer]
                entry["alpyka best / best peer (paired)"] = pairs.get((name, b), {}).get("paired")
                by_hand = pairs.get((name, b), {}).get("by_hand")
                entry["alpyka best / its engine fed from SoA by hand (paired)"] = by_hand
                entry["alpyka best / its engine (paired)"] = ok[(name, best_ours, b)].get("throughput_vs_engine_paired")
                for g, key in ((GATHER, "SoA gather ms"), (GATHER_PC, "per-candidate gather ms")):
                    if (name, g, b) in ok:
                        entry[key] = ok[(name, g, b)]["latency_median_ms"]
                gather = ok.get((name, GATHER_PC if best_ours.endswith("_pc") else GATHER, b))
                if gather is not None:  # the gather of the layout the best route reads
                    entry["gather / alpyka best latency"] = (
                        gather["latency_median_ms"] / ok[(name, best_ours, b)]["latency_median_ms"]
                    )
            summary[f"{name}, batch {b}"] = entry
    return summary


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    cols: list[str] = []
    for entry in summary.values():
        cols += [c for c in entry if c not in cols]
    lines = ["  ".join(["point".ljust(22)] + [c.rjust(16) for c in cols])]
    for label, entry in summary.items():
        lines.append("  ".join([label.ljust(22)] + [common.format_number(entry.get(c)).rjust(16) for c in cols]))
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], names: list[str], out: Path) -> Path:
    plt = common.pyplot()
    fig, axes = plt.subplots(2, len(names), figsize=(5.5 * len(names), 8.5), squeeze=False)
    colors = plt.get_cmap("tab20").colors  # eleven routes: distinct colours
    shown: dict[str, Any] = {}
    for col, name in enumerate(names):
        for i, v in enumerate(VARIANTS):
            pts = sorted(
                (r["batch"], r["throughput_eps"], r["latency_median_ms"])
                for r in rows
                if r["model"] == name and r["variant"] == v and r["status"] == "ok"
            )
            if not pts:
                continue
            b, tp, lat = zip(*pts)
            line = ":" if v.endswith("_pc") else "--" if v.startswith("alpyka") else "-." if v.endswith("_soa") else "-"
            style = dict(
                marker="o", color=colors[(2 * i) % 20 if i < 10 else 2 * (i - 10) + 1], label=LABELS[v], linestyle=line
            )
            shown[v] = axes[0][col].plot(b, tp, **style)[0]
            axes[1][col].plot(b, lat, **style)
        for ax, what in ((axes[0][col], "throughput (events/s)"), (axes[1][col], "latency of one call (ms)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size")
            ax.set_ylabel(what)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][col].set_title(f"{name}-shaped model (CPU)")
    # one legend for all panels, below them (inside a panel it hides the lines)
    fig.legend(list(shown.values()), [LABELS[v] for v in shown], loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return common.save_figure(fig, out, "models", tight=False)


if __name__ == "__main__":
    sys.exit(main())
