"""The README's benchmark table as data: each row (:class:`Figure`) names its JSON document under
``benchmarks/results/``, the keys it reads, how they are formatted and the target.
``benchmarks/summary.py`` fills them in; a row is never typed by hand."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One README row: ``what`` was measured, the ``values`` (key paths into one document, first
        key ``summary`` unless the figure lives elsewhere in it), formatted into ``measured`` (a
        ``str.format`` template with one ``{:spec}`` per value), the ``target``; ``scale`` multiplies
        every value (e.g. 1e3 for seconds shown as ms); ``or_else`` is the row for a document written by
    another version of the benchmark, used when this one's keys are not all there."""

    what: str
    document: str  # relative to the results folder
    measured: str
    values: tuple[tuple[str, ...], ...]
    target: str = ""
    scale: float = 1.0
    or_else: Figure | None = None  # shown instead when the document lacks a value (an older benchmark's keys)


def S(*keys: str) -> tuple[str, ...]:
    """A path into a document's ``summary``."""
    return ("summary", *keys)


_STREAM, _ADDS = "streaming vs njit", "non-blocking adds us, n=1e+0{}"
_PAIRED, _BY_HAND = "alpyka best / best peer (paired)", "alpyka best / its engine fed from SoA by hand (paired)"
_BATCHES = (4, 16, 64, 256, 1024)
_PIPE = "{} events/s (zero-copy)"
_TOOLS_ON = _CUT_ON = ("cpu_serial", "cpu_threads", "opencl")
#: the ClusterChargeCut row's contenders: the host backends, both CPU OpenCL runtimes in the example's
#: pk.make_workdiv, then in pk.valid_workdiv's and the GPU shape (256 work-items a group)
_CHARGE_ON = ("cpu_serial", "cpu_threads", "opencl Intel", "opencl PoCL")
_CHARGE_SHAPES = tuple(f"opencl {rt}{s}" for s in (", valid_workdiv", ", 256 work-items") for rt in ("Intel", "PoCL"))
_FIT_ON = ("cpu_serial", "cpu_threads")
_TOOLS = ("prefix_scan vs np.cumsum", "argsort vs np.argsort", "one_to_many vs numpy")
_GRAPH = "graph speedup (one by one / graph)"
_SORT = "speed vs numba twin"
_LAUNCHES = (
    "opencl blocking launch",
    "cuda launch, emulated (CPU cost)",
    "cuda blocking launch, emulated (CPU cost)",
)
_DEMO = "{:.0f} / {:.0f} / {:.0f}"
_FORWARD = "forward overhead at batch 4096"
_LOADS = ("free cores", "busy cores")

#: the README's benchmark table, in order
FIGURES: tuple[Figure, ...] = (
    Figure(
        "streaming SoA kernel, 16M float32: cpu_serial / cpu_threads vs a hand-written numba loop",
        "kernels.json",
        "{:.2f}x / {:.2f}x (numba prange {:.2f}x, Warp CPU {:.2f}x)",
        tuple(S(_STREAM, c) for c in ("cpu_serial", "cpu_threads", "numba_prange", "warp_cpu")),
        ">= 0.9x",
    ),
    Figure(
        "compute-bound kernel: cpu_threads vs cpu_serial",
        "kernels.json",
        "{:.2f}x (numba prange vs njit {:.2f}x)",
        (S("compute-bound speed-up", "cpu_threads/cpu_serial"), S("compute-bound speed-up", "prange/njit")),
        ">= 1.7x",
    ),
    Figure(
        "launch of a tiny kernel, blocking cpu_serial queue",
        "kernels.json",
        "{:.1f} us (direct numba call {:.2f} us, Warp CPU {:.1f} us, pyopencl on PoCL {:.1f} us)",
        tuple(
            S("launch us", c) for c in ("alpyka_cpu_serial_blocking", "numba_direct_call", "warp_cpu", "pyopencl_pocl")
        ),
        "<= njit + 3 us",
    ),
    Figure(
        "launch of a tiny kernel, alpyka vs its peer (paired, interleaved): blocking opencl queue vs raw pyopencl "
        "with the arguments preset (enqueue + finish); cuda's CPU cost on the stand-in (null executor) vs raw "
        "cupy, 20 launches + wait / blocking",
        "backends.json",
        "opencl {:.1f} us vs {:.1f} us ({:.2f}x the time, best rounds {:.2f}x; the raw launch waited for by "
        "polling as alpyka waits {:.1f}x, alpyka's own work {:.2f}x); cuda {:.1f} vs {:.1f} us a launch ({:.2f}x), "
        "blocking {:.1f} vs {:.1f} us ({:.2f}x)",
        (
            *(S(_LAUNCHES[0], k) for k in ("alpyka_us", "raw_us", "alpyka_over_raw", "alpyka_over_raw_best")),
            *(S(_LAUNCHES[0], k) for k in ("polled_wait_over_finish", "alpyka_over_polled_wait")),
            *(S(entry, k) for entry in _LAUNCHES[1:] for k in ("alpyka_us", "raw_us", "alpyka_over_raw")),
        ),
        "<= 1.3x",
        or_else=Figure(  # a run of bench_backends before the blocking launches were paired
            "OpenCL launch through alpyka vs raw pyopencl setting the same arguments",
            "backends.json",
            "{:.1f} us vs {:.1f} us",
            (S("opencl launch", "alpyka_us"), S("opencl launch", "raw_us")),
        ),
    ),
    Figure(
        "axpy launch at n = 1e3 / 1e5: cpu_threads, cpu_serial, numba prange (blocking)",
        "kernels.json",
        "{:.1f} / {:.1f} us, {:.1f} / {:.1f} us, {:.1f} / {:.1f} us",
        tuple(
            S(f"launch us, n=1e+0{e}", c)
            for c in ("alpyka_cpu_threads_blocking", "alpyka_cpu_serial_blocking", "numba_prange")
            for e in (3, 5)
        ),
        "cpu_threads <= 2x prange, <= 1.2x cpu_serial",
    ),
    Figure(
        "a non-blocking queue's launch + wait over a blocking launch, n = 1e2 / 1e3 / 1e4",
        "kernels.json",
        "cpu_serial {:+.1f} / {:+.1f} / {:+.1f} us, cpu_threads {:+.1f} / {:+.1f} / {:+.1f} us",
        tuple(S(_ADDS.format(e), c) for c in ("cpu_serial", "cpu_threads") for e in (2, 3, 4)),
        "<= 10 us",
    ),
    Figure(
        "the demo pipeline (bench_pipeline), events/s on 2 streams: cpu_serial / cpu_threads / opencl",
        "pipeline.json",
        _DEMO + " (1 stream: " + _DEMO + ")",
        tuple(S(_PIPE.format(b), f"{k} streams") for k in (2, 1) for b in ("cpu_serial", "cpu_threads", "opencl")),
    ),
    Figure(
        "the demo's chunks on Dask (embedded LocalCluster) vs in process, cpu_serial",
        "pipeline.json",
        "1 worker {:.2f}x, 2 workers {:.2f}x ({:.1f} / {:.1f} ms Dask overhead per chunk)",
        (
            S("cpu_serial Dask / in process", "1 worker"),
            S("cpu_serial Dask / in process", "2 workers"),
            S("cpu_serial Dask overhead ms/chunk", "1 worker"),
            S("cpu_serial Dask overhead ms/chunk", "2 workers"),
        ),
    ),
    Figure(
        "read + fill + kernel on uproot-HZZ.root vs uproot + awkward + numpy",
        "data.json",
        "{:.2f}x cpu_serial, {:.2f}x cpu_threads, {:.2f}x opencl (one memcpy per column, {:.0f} bytes converted)",
        (
            *(S(b, "alpyka / reference") for b in ("cpu_serial", "cpu_threads", "opencl")),
            S("cpu_serial", "extra bytes copied (dtype conversions)"),
        ),
        ">= 0.9x",
    ),
    Figure(
        "first launch from the disk cache, after numba's own start-up",
        "kernels.json",
        "{:.0f} ms (numba start-up {:.0f} ms)",
        (S("start s", "warm_first_launch_after_numba_init_s"), S("start s", "numba_init_s")),
        "< 50 ms",
        1e3,
    ),
    Figure(
        "block -> tensor: gathering the columns over zero-copy, n = 1e2 / 1e7",
        "inference.json",
        "{:.1f}x / {:,.0f}x (zero-copy is flat in n, the gather linear)",
        (S("block -> tensor, copy / zero-copy", "n=100"), S("block -> tensor, copy / zero-copy", "n=10000000")),
        "no bytes copied",
    ),
    Figure(
        "`Model.forward(metadata)` vs bare `model(tensor)` on a row-major tensor, batch 4096, outputs "
        "written, by input layout (paired interleaved rounds)",
        "inference.json",
        "zero-copy {:+.1f}% wall, {:+.1f}% thread CPU; gather {:+.1f}% / {:+.1f}%; auto {:+.1f}% / {:+.1f}%; "
        "load {:.1f}",
        tuple(
            S(_FORWARD, k)
            for k in (
                "percent, median of per-round ratios",
                "thread CPU percent, median of per-round ratios",
                "gather percent, median of per-round ratios",
                "gather thread CPU percent, median of per-round ratios",
                "auto percent, median of per-round ratios",
                "auto thread CPU percent, median of per-round ratios",
                "load before",
            )
        ),
        "<= 5%",
        or_else=Figure(
            "`Model.forward(metadata)` vs bare `model(tensor)`, batch 4096, outputs written",
            "inference.json",
            "{:+.1f}% (median of per-block ratios; {:+.1f}% of the summed times)",
            (S(_FORWARD, "percent, median of per-block ratios"), S(_FORWARD, "percent")),
            "<= 5%",
        ),
    ),
    Figure(
        "`SoAMetadata(...).append_block(...)` + `.tensor()` per block vs a raw `torch.as_strided`, n = 1e7",
        "inference.json",
        "{:.1f} us vs {:.1f} us",
        tuple(
            S("SoAMetadata + tensor per block (us) vs floor (raw as_strided)", "n=10000000", k)
            for k in ("alpyka", "floor")
        ),
        "<= 10 us",
    ),
    Figure(
        "a remote pipeline vs a remote model sending the same tensors, per request",
        "service.json",
        "{:+.1%} (nine separate column tensors: {:+.1%}, PyTriton's cost per tensor)",
        (
            S("pipeline vs model per-request overhead", "fraction"),
            ("overhead", "pipeline, one tensor per column", "overhead_vs_model_median"),
        ),
        "<= 10%",
    ),
    Figure(
        "ParticleNet-shaped model, batch 1024: JIT / AOTInductor / ONNX Runtime vs eager",
        "models.json",
        "{:.2f}x / {:.2f}x / {:.2f}x",
        tuple(S("particlenet, batch 1024", f"{v} / eager") for v in ("jit", "aot", "onnx")),
    ),
    Figure(
        "alpyka's best model route vs the best peer fed row-major tensors, batch 4 / 16 / 64 / 256 / 1024 "
        "(paired, one engine instance, blocking cpu_serial queue)",
        "models.json",
        "ParticleNet {:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f}, DeepMET {:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f}",
        tuple(S(f"{m}, batch {b}", _PAIRED) for m in ("particlenet", "deepmet") for b in _BATCHES),
        ">= 1",
    ),
    Figure(
        "the same against that engine fed from the same SoA collection by hand (`.contiguous()` per block)",
        "models.json",
        "ParticleNet {:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f}, DeepMET {:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f}",
        tuple(S(f"{m}, batch {b}", _BY_HAND) for m in ("particlenet", "deepmet") for b in _BATCHES),
        ">= 1",
    ),
    Figure(
        "Triton (PyTriton, same host) vs local, 16 clients, async + dynamic batching",
        "remote.json",
        "{:.2f}x of local events/s (client and server share the cores)",
        (S("remote async +dynbatch", "16 clients"),),
    ),
    Figure(
        "pixel clustering (CMSSW's clusterizer; a union-find per module on the one-thread devices), M digis/s "
        "and speed vs the strongest peer, a one-thread numba union-find",
        "clustering.json",
        "union-find {:.2f}; cpu_serial {:.2f} ({:.2f}x), cpu_threads {:.2f} ({:.2f}x), "
        "opencl {:.2f} ({:.2f}x); CMSSW's propagation on cpu_serial {:.2f}x; numba flood fill {:.2f}x",
        (
            S("numba union-find (1 thread)", "M digis/s"),
            *(S(b, k) for b in ("cpu_serial", "cpu_threads", "opencl") for k in ("M digis/s", "speed vs union-find")),
            *(S(b, "speed vs union-find") for b in ("cpu_serial, propagation", "numba flood fill (1 thread)")),
        ),
        "cpu_serial >= 0.7x, cpu_threads > 1x",
    ),
    Figure(
        "`pk.tools` at 1e3 elements (per event), blocking queue, vs numpy: prefix_scan / argsort / one_to_many",
        "tools.json",
        "cpu_serial {:.2f}x / {:.2f}x / {:.2f}x, cpu_threads {:.2f}x / {:.2f}x / {:.2f}x, "
        "opencl {:.2f}x / {:.2f}x / {:.2f}x",
        tuple(S(f"{b}, n=1e+03", t) for b in _TOOLS_ON for t in _TOOLS),
        ">= 0.5x",
    ),
    Figure(
        "`pk.tools` at 1e5 / 1e6 elements vs numpy: prefix_scan / argsort / one_to_many",
        "tools.json",
        "cpu_serial {:.1f}x / {:.1f}x / {:.1f}x, {:.1f}x / {:.1f}x / {:.1f}x; "
        "cpu_threads {:.1f}x / {:.1f}x / {:.1f}x, {:.1f}x / {:.1f}x / {:.1f}x; "
        "opencl {:.1f}x / {:.1f}x / {:.1f}x, {:.1f}x / {:.1f}x / {:.1f}x",
        tuple(S(f"{b}, n={n}", t) for b in _TOOLS_ON for n in ("1e+05", "1e+06") for t in _TOOLS),
        ">= 1x",
    ),
    Figure(
        "`pk.tools.one_to_many`, 1e6 keys, vs a numba counting sort: cpu_serial / cpu_threads / opencl",
        "tools.json",
        "{:.2f}x / {:.2f}x / {:.2f}x",
        tuple(S(f"{b}, n=1e+06", "one_to_many vs numba") for b in _TOOLS_ON),
        ">= 0.5x",
    ),
    Figure(
        "`pk.capture`: a chain of 20 tiny kernels replayed as a graph vs launched one by one: cpu_serial / "
        "cpu_threads / opencl / cuda (stand-in, CPU cost)",
        "graph.json",
        "{:.2f}x / {:.2f}x / {:.2f}x / {:.2f}x (cuda stand-in vs raw cupy: one by one {:.2f}x, graph {:.2f}x the time)",
        (
            *(S(b, _GRAPH) for b in ("cpu_serial", "cpu_threads", "opencl", "cuda")),
            S("cuda", "alpyka one_by_one / cupy one_by_one"),
            S("cuda", "alpyka graph / cupy graph"),
        ),
        ">= 3x (cpu_serial)",
    ),
    Figure(
        "a blocking tiny launch on CPU OpenCL vs raw pyopencl with the arguments set once + finish (paired, "
        "interleaved), free cores / every core busy (a spinning process each, started by the benchmark)",
        "waits.json",
        "Intel {:.2f}x / {:.2f}x, PoCL {:.2f}x / {:.2f}x the time (CPU time {:.2f}x / {:.2f}x, {:.2f}x / {:.2f}x; "
        "the Python launcher alone {:.2f}x / {:.2f}x, {:.2f}x / {:.2f}x; the free-core interruptible wait alone "
        "{:.1f}x / {:.0f}x, {:.1f}x / {:.1f}x; other processes kept {:.1f} / {:.1f} "
        "cores busy in the free-core rounds); a scalar changed at each launch, against raw pyopencl changing it "
        "too: Intel {:.2f}x / {:.2f}x, PoCL {:.2f}x / {:.2f}x (a value never seen, so waited for "
        "interruptibly: Intel {:.2f}x / {:.2f}x, PoCL {:.2f}x / {:.2f}x); the raw peer itself with 1 us of Python "
        "before each enqueue: PoCL busy {:.2f}x; 20 tiny kernels + q.wait() replayed as a graph on busy cores: "
        "{:.2f}x / {:.2f}x faster than one by one",
        (
            *(S(f"{r}, {c}", "alpyka_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            *(S(f"{r}, {c}", "cpu_alpyka_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            *(S(f"{r}, {c}", "python_launcher_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            *(S(f"{r}, {c}", "interruptible_only_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            *(S(f"{r}, free cores", "cores_busy_elsewhere") for r in ("Intel", "PoCL")),
            *(S(f"{r}, {c}", "scalar_changed_alpyka_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            *(S(f"{r}, {c}", "scalar_unseen_alpyka_over_raw") for r in ("Intel", "PoCL") for c in _LOADS),
            S("PoCL, busy cores", "raw_1us_first_over_raw"),
            *(S(f"{r}, busy cores", "graph_speedup") for r in ("Intel", "PoCL")),
        ),
        "<= 1.3x",
    ),
    Figure(
        "CMSSW's ClusterChargeCut (shared-memory atomics, block scan), 2000 modules, ~100k digis: speed vs its "
        "numba njit twin, cpu_serial / cpu_threads / opencl Intel / opencl PoCL (`make_workdiv(dev, n, 256)`, no "
        "device test), median of repeated runs",
        "charge_cut.json",
        "{:.2f}x / {:.2f}x / {:.2f}x / {:.2f}x (best rounds: {:.2f}x / {:.2f}x / {:.2f}x / {:.2f}x); `valid_workdiv` "
        "Intel / PoCL {:.2f}x / {:.2f}x, 256 work-items a group {:.2f}x / {:.2f}x; {:.0f} runs while other processes "
        "kept {:.1f} cores busy: a numba prange twin on {:.0f} threads got {:.2f}x",
        (
            *(S(b, "speed vs numba") for b in _CHARGE_ON),
            *(S(b, "speed vs numba, best times") for b in _CHARGE_ON),
            *(S(b, "speed vs numba") for b in _CHARGE_SHAPES),
            S("machine while measured", "repeats"),
            S("machine while measured", "cores busy with other work"),
            S("machine while measured", "prange threads"),
            S("numba prange (every core)", "speed vs numba"),
        ),
        ">= 1x / 1.5x / 0.5x / 0.5x",
        or_else=Figure(  # a run with one OpenCL runtime in the example's work division
            "CMSSW's ClusterChargeCut (shared-memory atomics, block scan), 2000 modules, ~100k digis: speed vs its "
            "numba njit twin, cpu_serial / cpu_threads / opencl (Intel), median of repeated runs",
            "charge_cut.json",
            "{:.2f}x / {:.2f}x / {:.2f}x (best rounds: {:.2f}x / {:.2f}x / {:.2f}x; {:.0f} runs while other processes "
            "kept {:.1f} cores busy: a numba prange twin on {:.0f} threads got {:.2f}x)",
            (
                *(S(b, "speed vs numba") for b in _CUT_ON),
                *(S(b, "speed vs numba, best times") for b in _CUT_ON),
                S("machine while measured", "repeats"),
                S("machine while measured", "cores busy with other work"),
                S("machine while measured", "prange threads"),
                S("numba prange (every core)", "speed vs numba"),
            ),
            ">= 1x / 1.5x / 0.5x",
            or_else=Figure(  # a run before the repeats and the machine's load were recorded
                "CMSSW's ClusterChargeCut (shared-memory atomics, block scan), 2000 modules, ~100k digis: speed vs its "
                "numba njit twin, cpu_serial / cpu_threads / opencl (Intel)",
                "charge_cut.json",
                "{:.2f}x / {:.2f}x / {:.2f}x (best rounds: {:.2f}x / {:.2f}x / {:.2f}x)",
                (
                    *(S(b, "speed vs numba") for b in _CUT_ON),
                    *(S(b, "speed vs numba, best times") for b in _CUT_ON),
                ),
                ">= 1x / 1.5x / 0.5x",
            ),
        ),
    ),
    Figure(
        "first result of a new kernel in a fresh process (import to the result on the host) vs numba's first "
        "`njit(cache=True)` call of the same loop, time ratio (lower is better), cold / warm caches: "
        "cpu_serial; cpu_threads",
        "first_result.json",
        "{:.2f}x / {:.2f}x; {:.2f}x / {:.2f}x (CPU time {:.2f}x / {:.2f}x; {:.2f}x / {:.2f}x; load {:.1f})",
        (
            *(S(f"alpyka {b}", f"{s} vs numba") for b in _FIT_ON for s in ("cold", "warm")),
            *(S(f"alpyka {b}", f"{s} CPU vs numba") for b in _FIT_ON for s in ("cold", "warm")),
            S("machine while measured", "load average (1 min), median"),
        ),
        "<= 1.1x / 1.0x",
    ),
    Figure(
        "the pixel vertex finder's sortByPt2 (pt^2 sums by atomics, then `pk.tools.block_radix_sort` in the "
        "kernel), 1000 events of 8 / 40 / 200 vertices: speed vs its numba twin (stable argsort per event); "
        "cpu_serial / cpu_threads / opencl, and the rank sort on cpu_serial",
        "sort_by_pt2.json",
        "{:.2f}x / {:.2f}x / {:.2f}x; {:.2f}x / {:.2f}x / {:.2f}x; {:.2f}x / {:.2f}x / {:.2f}x; rank sort "
        "{:.2f}x / {:.2f}x / {:.2f}x; numpy per event {:.2f}x / {:.2f}x / {:.2f}x",
        (
            *(S(f"{b}, {v} vertices", _SORT) for v in (8, 40, 200) for b in _CUT_ON),
            *(S(f"cpu_serial, rank sort, {v} vertices", _SORT) for v in (8, 40, 200)),
            *(S(f"numpy per event, {v} vertices", _SORT) for v in (8, 40, 200)),
        ),
    ),
    Figure(
        "CMSSW's Broken Line fit (per-thread arrays, pk.linalg), 100k generated tracks of 3-5 hits: speed vs its "
        "numba njit twin, cpu_serial / cpu_threads (paired rounds)",
        "broken_line.json",
        "{:.2f}x / {:.2f}x (best rounds: {:.2f}x / {:.2f}x; twin {:.2f} us a track)",
        (
            *(S(b, "speed vs numba") for b in _FIT_ON),
            *(S(b, "speed vs numba, best times") for b in _FIT_ON),
            S("numba njit (1 thread)", "us per track"),
        ),
        ">= 1x (cpu_serial)",
    ),
    Figure(
        "pixel clustering on the GPU, M digis/s and speed vs a one-thread numba union-find on the host",
        "nvidia-h100/clustering.json",
        "cuda {:.1f} ({:.1f}x); union-find {:.2f}; cpu_serial {:.2f} ({:.2f}x), cpu_threads {:.2f} ({:.2f}x)",
        (
            S("cuda", "M digis/s"),
            S("cuda", "speed vs union-find"),
            S("numba union-find (1 thread)", "M digis/s"),
            *(S(b, k) for b in ("cpu_serial", "cpu_threads") for k in ("M digis/s", "speed vs union-find")),
        ),
        or_else=Figure(  # a run of the benchmark before the union-find peer: its one numba peer is a flood fill
            "pixel clustering on the GPU (CMSSW's propagation everywhere), M digis/s and speed vs a one-thread "
            "numba flood fill on the host",
            "nvidia-h100/clustering.json",
            "cuda {:.1f} ({:.1f}x); flood fill {:.2f}; cpu_serial {:.2f} ({:.2f}x), cpu_threads {:.2f} ({:.2f}x)",
            (
                S("cuda", "M digis/s"),
                S("cuda", "speed vs numba"),
                S("numba (1 thread)", "M digis/s"),
                *(S(b, k) for b in ("cpu_serial", "cpu_threads") for k in ("M digis/s", "speed vs numba")),
            ),
        ),
    ),
    Figure(
        "cuda launch of a tiny kernel through alpyka vs a raw cupy launch",
        "nvidia-h200/backends.json",
        "{:.1f} us vs {:.1f} us ({:.2f}x)",
        (S("cuda launch", "alpyka_us"), S("cuda launch", "raw_us"), S("cuda launch", "alpyka_over_raw")),
    ),
    Figure(
        "cuda streaming kernel (1 element/thread) vs a device-to-device copy",
        "nvidia-h100/backends.json",
        "{:.0f} vs {:.0f} GB/s ({:.2f}x)",
        tuple(S("cuda stream (1 elem/thread)", k) for k in ("kernel_GBps", "copy_GBps", "kernel_vs_copy")),
    ),
    Figure(
        "cuda host <-> device copies, pinned / pageable host memory",
        "nvidia-h100/backends.json",
        "h2d {:.1f} / {:.1f} GB/s, d2h {:.1f} / {:.1f} GB/s",
        tuple(S(f"cuda {h} copies", k) for k in ("h2d_GBps", "d2h_GBps") for h in ("pinned", "pageable")),
    ),
)
