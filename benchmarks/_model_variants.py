"""The ways ``bench_models.py`` runs one model: eager, TorchScript, a ``torch.export`` program,
AOTInductor, ONNX Runtime and alpyka's ``inference.Model`` on SoA collections (over the TorchScript,
torch.export, AOTInductor and ONNX files); artifacts are cached on disk by content hash."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECK_BATCH = 8
#: alpyka's routes reading a collection of one row per candidate (models with ``rows_per_event``)
PER_CANDIDATE = ("alpyka_aot_pc", "alpyka_onnx_pc")
ALPYKA_VARIANTS = ("alpyka_jit", "alpyka_exported", "alpyka_aot", "alpyka_onnx") + PER_CANDIDATE
#: peers fed from the same SoA collections by hand (a contiguous copy of each block in the call)
BY_HAND = ("aot_soa", "onnx_soa")
REL_TOLERANCE = 1e-3
MODELS_SOURCE = Path(__file__).resolve().parent / "models.py"


def cache_dir() -> Path:
    """``$ALPYKA_CACHE_DIR/bench`` or ``~/.cache/alpyka/bench``."""
    root = os.environ.get("ALPYKA_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "alpyka"
    path = base / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def artifact_key(model_name: str, kind: str, seed: int, extra: str = "") -> str:
    """A hash of everything a compiled artifact depends on: the model source, the weights' seed,
    torch/Python versions, the platform and the artifact kind."""
    h = hashlib.sha256()
    h.update(MODELS_SOURCE.read_bytes())
    for part in (
        model_name,
        kind,
        str(seed),
        torch.__version__,
        platform.python_version(),
        platform.machine(),
        sys.platform,
        "batch-dim 2..4096",
        extra,
    ):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


class BoundInputs:
    """One batch of inputs as torch tensors, numpy arrays (ONNX feeds) and, on demand, SoA
    collections with the metadata an ``inference.Model`` reads."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], names: tuple[str, ...]) -> None:
        self.tensors = tensors
        self.feeds = {n: t.numpy() for n, t in zip(names, tensors)}
        self.batch = int(tensors[0].shape[0])
        self.soa: dict[str, Any] = {}  # layout ("event", "candidate") -> collections and metadata


class ModelVariants:
    """Prepare every variant of ``bm`` that can run here; ``skipped`` says why the others cannot.

    ``aot_policy``: ``"compile"`` (use the cache, compile when missing), ``"cached"`` (use the
    cache only) or ``"never"``; ``blocking``: alpyka's routes run on a blocking cpu_serial queue
    (CMSSW's serial_sync backend, ``QueueCpuBlocking``), else on a non-blocking one."""

    def __init__(self, bm: Any, threads: int, aot_policy: str, seed: int = 1234, blocking: bool = True) -> None:
        self.bm, self.threads, self.seed, self.blocking = bm, threads, seed, blocking
        self.model = bm.build(seed)
        self.runners: dict[str, Callable[[BoundInputs], Any]] = {}
        self.skipped: dict[str, str] = {}
        self.info: dict[str, Any] = {}
        self.max_abs_diff: dict[str, float] = {}
        self.agrees: dict[str, bool] = {}
        self._queue: Any = None
        self._engines: dict[str, Any] = {}  # kind -> the loaded module, package or session the peers call
        self._models: dict[str, Any] = {}  # file -> alpyka's Model of it
        self.runners["eager"] = self._eager
        self._try("jit", self._prepare_jit)
        self._try("exported", self._prepare_exported)
        self._prepare_aot(aot_policy)
        self._try("onnx", self._prepare_onnx)
        self._prepare_alpyka(aot_policy)
        self._check()

    # ------------------------------------------------------------------ helpers
    def _log(self, text: str) -> None:
        print(f"[{self.bm.name}] {text}", file=sys.stderr, flush=True)

    def _try(self, variant: str, prepare: Callable[[], None]) -> None:
        try:
            prepare()
        except Exception as exc:  # a variant that cannot be built here is reported, not fatal
            self.runners.pop(variant, None)
            self.skipped[variant] = f"{type(exc).__name__}: {exc}"[:500]

    def _path(self, kind: str, suffix: str, extra: str = "") -> Path:
        return cache_dir() / f"{self.bm.name}-{kind}-{artifact_key(self.bm.name, kind, self.seed, extra)}{suffix}"

    def _store(self, tmp: Path, path: Path) -> None:
        """Move a finished artifact into place and drop this model's stale ones of that kind
        (built from an older model source or torch version)."""
        os.replace(tmp, path)
        kind = path.name[len(self.bm.name) + 1 :].split("-", 1)[0]
        for old in path.parent.glob(f"{self.bm.name}-{kind}-*{path.suffix}"):
            if old != path and ".tmp" not in old.name:
                old.unlink(missing_ok=True)

    def _example(self) -> tuple[torch.Tensor, ...]:
        return self.bm.inputs(CHECK_BATCH, seed=7)

    def _dynamic_shapes(self) -> tuple[dict[int, Any], ...]:
        batch = torch.export.Dim("batch", min=2, max=4096)
        return tuple({0: batch} for _ in self.bm.input_names)

    def bind_inputs(self, tensors: tuple[torch.Tensor, ...]) -> BoundInputs:
        return BoundInputs(tuple(t.contiguous() for t in tensors), self.bm.input_names)

    def call(self, variant: str, bound: BoundInputs) -> Callable[[], Any]:
        """A zero-argument callable running ``variant`` once on ``bound`` (to time)."""
        runner = self.runners[variant]
        if variant.startswith("alpyka"):  # the collections are filled before timing, as a producer would
            self._soa(bound, per_candidate=variant.endswith("_pc"))
        elif variant in BY_HAND:
            self._soa(bound, per_candidate=bool(self.bm.rows_per_event))
        return lambda: runner(bound)

    def gather_call(self, bound: BoundInputs, per_candidate: bool = False) -> Callable[[], Any]:
        """A zero-argument callable that gathers the batch's SoA input blocks into row-major
        buffers, as alpyka's ONNX Runtime and AOTInductor routes do before the engine runs: the
        work those routes do that the same engine fed row-major tensors does not (a block that
        is row-major already, one column, is read in place: not gathered)."""
        from inference._gather import gather

        meta_in = self._soa(bound, per_candidate)["meta"][0]
        blocks = [t for t in (meta_in.device_tensor(n) for n in meta_in.ordered()[0]) if not t.is_contiguous()]
        buffers = [torch.empty(t.shape, dtype=t.dtype) for t in blocks]

        def run() -> None:
            for t, buf in zip(blocks, buffers):
                gather(t, buf)

        return run

    def describe(self) -> dict[str, Any]:
        return {"variants": sorted(self.runners), "skipped": dict(self.skipped), **self.info}

    # ------------------------------------------------------------------ eager / JIT
    def _eager(self, bound: BoundInputs) -> torch.Tensor:
        with torch.inference_mode():
            return self.model(*bound.tensors)

    def _prepare_jit(self) -> None:
        path = self._path("jit", ".pt")
        t0 = time.perf_counter()
        if not path.exists():
            scripted = torch.jit.script(self.model)
            tmp = path.with_suffix(".tmp")
            torch.jit.save(scripted, str(tmp))
            self._store(tmp, path)
        self._engines["jit"] = torch.jit.load(str(path)).eval()
        self.info["jit"] = {"path": str(path), "load_s": time.perf_counter() - t0}
        self.runners["jit"] = self._engine_runner("jit")

    def _engine_runner(self, kind: str) -> Callable[[BoundInputs], Any]:
        """A peer calling the engine of ``kind`` (a module or package) on the row-major inputs;
        the engine is looked up at each call (see :meth:`_share_engines`)."""
        engines = self._engines

        def run(bound: BoundInputs) -> torch.Tensor:
            with torch.inference_mode():
                return engines[kind](*bound.tensors)

        return run

    # ------------------------------------------------------------------ torch.export program
    def _prepare_exported(self) -> None:
        from inference import export

        path = self._path("exported", ".pt2")
        t0 = time.perf_counter()
        if not path.exists():
            tmp = path.with_name(path.stem + ".tmp.pt2")
            export(self.model, self._example(), tmp)
            self._store(tmp, path)
        self._engines["exported"] = torch.export.load(str(path)).module()
        self.info["exported"] = {"path": str(path), "load_s": time.perf_counter() - t0}
        self.runners["exported"] = self._engine_runner("exported")

    # ------------------------------------------------------------------ AOTInductor
    def _prepare_aot(self, policy: str) -> None:
        def prepare() -> None:
            self._engines["aot"] = torch._inductor.aoti_load_package(
                self._compile_aot("aot", self.model, self._example(), self._dynamic_shapes())
            )
            self.runners["aot"] = self._engine_runner("aot")

        why_not = self._aot_unavailable(policy, "aot")
        if why_not:
            self.skipped["aot"] = why_not
        else:
            self._try("aot", prepare)

    def _aot_unavailable(self, policy: str, kind: str) -> str:
        """Why no AOTInductor package of ``kind`` is used under ``policy`` ("" when one is)."""
        if policy == "never":
            return "AOTInductor disabled in this mode (--smoke or --no-aot)"
        path = self._path(kind, ".pt2")
        if not path.exists() and policy == "cached":
            return f"no cached package ({path.name}); --quick compiles only with --aot (a compile takes ~10-60 s)"
        return ""

    def _compile_aot(
        self, kind: str, module: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic_shapes: tuple[Any, ...]
    ) -> str:
        """The cached AOTInductor package of ``module`` (compiled when missing); its path."""
        path = self._path(kind, ".pt2")
        info: dict[str, Any] = {"path": str(path), "cached": path.exists()}
        if not path.exists():
            self._log(f"compiling the AOTInductor package {kind} (once; cached) ...")
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
                tmp = path.with_name(path.stem + ".tmp.pt2")
                torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp))
            self._store(tmp, path)
            info["compile_s"] = time.perf_counter() - t0
        self.info[kind] = info
        return str(path)

    # ------------------------------------------------------------------ ONNX Runtime
    def _prepare_onnx(self) -> None:
        import onnxruntime as ort

        path = self._export_onnx("onnx", self.model, self._example(), self._dynamic_shapes())
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        self._engines["onnx"] = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

        def run(bound: BoundInputs) -> np.ndarray:
            return self._engines["onnx"].run(None, bound.feeds)[0]

        self.runners["onnx"] = run

    def _export_onnx(
        self, kind: str, module: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic_shapes: tuple[Any, ...]
    ) -> str:
        """The cached ONNX file of ``module`` (exported when missing) with the torch.export-based
        exporter (needs onnxscript), else the TorchScript one; its path."""
        import logging

        import onnxruntime as ort

        path = self._path(kind, ".onnx", extra=ort.__version__)
        info: dict[str, Any] = {"path": str(path), "cached": path.exists()}
        self.info[kind] = info
        if path.exists():
            return str(path)
        t0 = time.perf_counter()
        tmp = path.with_name(path.stem + ".tmp.onnx")
        names = dict(input_names=list(self.bm.input_names), output_names=list(self.bm.output_names))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            try:
                import onnxscript  # noqa: F401  (the dynamo exporter's dependency)

                torch.onnx.export(
                    module,
                    example,
                    str(tmp),
                    dynamo=True,
                    dynamic_shapes=dynamic_shapes,
                    external_data=False,
                    verbose=False,
                    **names,
                )
                info["exporter"] = "torch.onnx.export(dynamo=True)"
            except Exception as exc:
                first_error = f"{type(exc).__name__}: {exc}"[:300]
                try:
                    axes = {
                        **{n: {0: "batch"} for n in self.bm.input_names},
                        **{n: {0: "batch"} for n in self.bm.output_names},
                    }
                    torch.onnx.export(
                        module, example, str(tmp), dynamo=False, dynamic_axes=axes, opset_version=17, **names
                    )
                    info["exporter"] = f"torch.onnx.export(dynamo=False) (the dynamo exporter failed: {first_error})"
                except Exception as exc2:
                    raise RuntimeError(
                        f"ONNX export failed: dynamo exporter: {first_error}; TorchScript exporter: "
                        f"{type(exc2).__name__}: {exc2} (the dynamo exporter needs "
                        "`pip install onnxscript`)"
                    ) from None
        self._store(tmp, path)
        info["export_s"] = time.perf_counter() - t0
        return str(path)

    # ------------------------------------------------------------------ alpyka Model on SoA
    def _prepare_alpyka(self, aot_policy: str) -> None:
        try:
            import inference
            import portable as pk
            from inference import Model, ModelMetadata, SoAMetadata  # noqa: F401
        except Exception as exc:
            reason = f"inference.Model is not importable ({type(exc).__name__}: {exc})"
            for v in ALPYKA_VARIANTS:
                self.skipped[v] = reason
            return
        inference.set_torch_threads(self.threads, 1)
        self._queue = pk.Queue(pk.device("cpu_serial"), blocking=self.blocking)
        for variant, source in (
            ("alpyka_jit", "jit"),
            ("alpyka_exported", "exported"),
            ("alpyka_aot", "aot"),
            ("alpyka_onnx", "onnx"),
        ):
            if source not in self.runners:
                self.skipped[variant] = f"needs the {source} artifact: {self.skipped.get(source, 'missing')}"
                continue
            path = self.info[source]["path"]
            self._try(variant, lambda v=variant, p=path: self._alpyka_runner(v, p))
        self._prepare_per_candidate()
        try:
            self._share_engines()
        except Exception as exc:  # a Model that cannot deploy: its route fails on its own, the peers keep theirs
            self.info["engines shared with alpyka's routes"] = f"none ({type(exc).__name__}: {exc})"[:300]
        self._prepare_by_hand()
        if torch.get_num_threads() != self.threads:
            raise RuntimeError(f"torch threads changed to {torch.get_num_threads()} (asked {self.threads})")

    def _prepare_per_candidate(self) -> None:
        """alpyka's AOTInductor and ONNX Runtime routes reading a collection of one row per
        candidate: the same files as the per-event routes, the blocks grouping each event's rows
        (``append_block(..., rows_per_item=rows)``)."""
        rows = self.bm.rows_per_event
        for variant, source in (("alpyka_aot_pc", "aot"), ("alpyka_onnx_pc", "onnx")):
            if not rows:
                self.skipped[variant] = f"{self.bm.name}'s inputs have no per-candidate form here"
            elif source not in self.runners:
                self.skipped[variant] = f"needs the {source} artifact: {self.skipped.get(source, 'missing')}"
            else:
                path = self.info[source]["path"]
                self._try(variant, lambda v=variant, p=path: self._alpyka_runner(v, p))

    def _prepare_by_hand(self) -> None:
        """The peers' AOTInductor package and ONNX Runtime session fed from the same SoA
        collections by hand: each block's tensor made contiguous (torch's copy) in the call, as a
        user without alpyka's gather would write it (the per-candidate collection where the
        model has one, the per-event one otherwise)."""
        per_candidate = bool(self.bm.rows_per_event)
        for variant, engine in (("aot_soa", "aot"), ("onnx_soa", "onnx")):
            if engine not in self._engines:
                self.skipped[variant] = f"needs the {engine} peer: {self.skipped.get(engine, 'missing')}"
                continue
            loaded = self._engines[engine]

            def run(bound: BoundInputs, loaded: Any = loaded, onnx: bool = engine == "onnx") -> Any:
                meta_in = self._soa(bound, per_candidate)["meta"][0]
                names = meta_in.ordered()[0]
                if onnx:
                    return loaded.run(None, {n: meta_in.tensor(n).contiguous().numpy() for n in names})[0]
                with torch.inference_mode():
                    return loaded(*(meta_in.tensor(n).contiguous() for n in names))

            self.runners[variant] = run

    def _share_engines(self) -> None:
        """The peers call the engine instances alpyka's routes deployed (one per file: the
        package, session or module ``Model`` runs), so each comparison is of one loaded engine.
        Separately loaded instances of one ONNX model were measured 5-10% apart at batch 4 (the
        same calls, interleaved), more than what is compared."""
        from inference._torch_queue import torch_device

        dev = torch_device(self._queue.device)
        shared = []
        for kind, path in (
            (k, self.info[k]["path"])
            for k in ("jit", "exported", "aot", "onnx")
            if k in self._engines and k in self.info
        ):
            model = self._models.get(path)
            if model is None:
                continue
            engine = model.module_for(dev)  # the module (jit, exported), package runner (aot) or ORT runner
            if kind == "aot":
                engine = engine.package  # called through torch's own callable, as before
            elif kind == "onnx":
                engine = engine.current_session()  # the session the runner binds and runs
            self._engines[kind] = engine
            shared.append(kind)
        self.info["engines shared with alpyka's routes"] = shared

    def _alpyka_runner(self, variant: str, path: str) -> None:
        from inference import Model, ModelMetadata

        model = self._models.get(path)
        if model is None:  # one Model per file: its routes over either layout share one engine
            model = self._models[path] = Model(path).to(self._queue)
        q = self._queue
        per_candidate = variant.endswith("_pc")

        def run(bound: BoundInputs) -> np.ndarray:
            soa_in = self._soa(bound, per_candidate)
            model.forward(ModelMetadata(*soa_in["meta"]))
            q.wait()
            return soa_in["out"]

        self.runners[variant] = run

    def _soa(self, bound: BoundInputs, per_candidate: bool = False) -> dict[str, Any]:
        """The batch in SoA collections (built once per batch and layout). Inputs: one matrix
        column per input [n, R, C] (``per_candidate``: a collection of n*R rows, a column per
        component, C adjacent columns per input); outputs: one vector column per output [n, K]."""
        layout = "candidate" if per_candidate else "event"
        if layout not in bound.soa:
            import portable as pk
            import soa
            from inference import SoAMetadata

            inputs = dict(zip(self.bm.input_names, bound.tensors))
            if per_candidate:
                columns = {
                    n: [f"{n}_{i}" for i in range(t.shape[2])] if t.shape[2] > 1 else [n] for n, t in inputs.items()
                }
                fields_in = {c: soa.column(inputs[n].numpy().dtype) for n, cols in columns.items() for c in cols}
            else:
                columns = {n: [n] for n in inputs}
                fields_in = {n: soa.matrix(t.numpy().dtype, t.shape[1], t.shape[2]) for n, t in inputs.items()}
            with torch.inference_mode():
                ref = self.model(*(t[:2] for t in bound.tensors))
            fields_out = {n: soa.vector(np.float32, ref.shape[1]) for n in self.bm.output_names}
            title = self.bm.name.title() + ("Candidates" if per_candidate else "Inputs")
            In = type(title, (soa.Layout,), fields_in)
            Out = type(f"{self.bm.name.title()}Outputs", (soa.Layout,), fields_out)
            q = self._queue
            rows = bound.batch * (self.bm.rows_per_event if per_candidate else 1)
            cin = pk.PortableCollection(In, rows, q)
            cout = pk.PortableCollection(Out, bound.batch, q)
            q.wait()
            view = cin.view()
            for n in inputs:
                values = bound.feeds[n]
                if per_candidate:
                    values = values.reshape(rows, -1)
                    for i, c in enumerate(columns[n]):
                        getattr(view, c)[...] = values[:, i]
                else:
                    getattr(view, n)[...] = values
            meta_in, meta_out = SoAMetadata(cin), SoAMetadata(cout)
            for n, cols in columns.items():  # per candidate: each event's rows are one item
                meta_in.append_block(n, *cols, rows_per_item=self.bm.rows_per_event if per_candidate else 1)
            for n in self.bm.output_names:
                meta_out.append_block(n, n)
            out_view = getattr(cout.view(), self.bm.output_names[0])
            bound.soa[layout] = {"collections": (cin, cout), "meta": (meta_in, meta_out), "out": out_view}
        return bound.soa[layout]

    # ------------------------------------------------------------------ agreement
    def _check(self) -> None:
        """Compare every variant's output with eager's on one batch; a failing variant is dropped."""
        bound = self.bind_inputs(self._example())
        ref = self._eager(bound).numpy()
        scale = float(np.abs(ref).max()) or 1.0
        for v in list(self.runners):
            if v == "eager":
                continue
            try:
                out = self.runners[v](bound)
                out = out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
                if out.shape != ref.shape:
                    raise ValueError(f"output shape {out.shape}, eager gives {ref.shape}")
            except Exception as exc:
                self.runners.pop(v)
                self.skipped[v] = f"failed on the check batch: {type(exc).__name__}: {exc}"[:500]
                continue
            diff = float(np.abs(out - ref).max())
            self.max_abs_diff[v] = diff
            self.agrees[v] = diff <= REL_TOLERANCE * scale
