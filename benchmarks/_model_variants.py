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
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

CHECK_BATCH = 8
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
    for part in (model_name, kind, str(seed), torch.__version__, platform.python_version(), platform.machine(),
                 sys.platform, "batch-dim 2..4096", extra):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


class BoundInputs:
    """One batch of inputs as torch tensors, numpy arrays (ONNX feeds) and, on demand, SoA
    collections with the metadata an ``inference.Model`` reads."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], names: tuple[str, ...]) -> None:
        self.tensors = tensors
        self.feeds = {n: t.numpy() for n, t in zip(names, tensors)}
        self.batch = int(tensors[0].shape[0])
        self.soa: Any = None


class ModelVariants:
    """Prepare every variant of ``bm`` that can run here; ``skipped`` says why the others cannot.

    ``aot_policy``: ``"compile"`` (use the cache, compile when missing), ``"cached"`` (use the
    cache only) or ``"never"``."""

    def __init__(self, bm: Any, threads: int, aot_policy: str, seed: int = 1234) -> None:
        self.bm, self.threads, self.seed = bm, threads, seed
        self.model = bm.build(seed)
        self.runners: dict[str, Callable[[BoundInputs], Any]] = {}
        self.skipped: dict[str, str] = {}
        self.info: dict[str, Any] = {}
        self.max_abs_diff: dict[str, float] = {}
        self.agrees: dict[str, bool] = {}
        self._queue: Any = None
        self.runners["eager"] = self._eager
        self._try("jit", self._prepare_jit)
        self._try("exported", self._prepare_exported)
        self._prepare_aot(aot_policy)
        self._try("onnx", self._prepare_onnx)
        self._prepare_alpyka()
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
        kind = path.name[len(self.bm.name) + 1:].split("-", 1)[0]
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
        if variant.startswith("alpyka"):
            self._soa(bound)  # the collections are filled before timing, as a producer would
        return lambda: runner(bound)

    def gather_call(self, bound: BoundInputs) -> Callable[[], Any]:
        """A zero-argument callable that gathers the batch's SoA input blocks into row-major
        buffers, as alpyka's ONNX Runtime and AOTInductor routes do before the engine runs: the
        work those routes do that the same engine fed row-major tensors does not."""
        from inference._gather import gather

        meta_in = self._soa(bound)["meta"][0]
        blocks = [meta_in.device_tensor(n) for n in meta_in.ordered()[0]]
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
        module = torch.jit.load(str(path)).eval()
        self.info["jit"] = {"path": str(path), "load_s": time.perf_counter() - t0}

        def run(bound: BoundInputs) -> torch.Tensor:
            with torch.inference_mode():
                return module(*bound.tensors)

        self.runners["jit"] = run

    # ------------------------------------------------------------------ torch.export program
    def _prepare_exported(self) -> None:
        from inference import export

        path = self._path("exported", ".pt2")
        t0 = time.perf_counter()
        if not path.exists():
            tmp = path.with_name(path.stem + ".tmp.pt2")
            export(self.model, self._example(), tmp)
            self._store(tmp, path)
        module = torch.export.load(str(path)).module()
        self.info["exported"] = {"path": str(path), "load_s": time.perf_counter() - t0}

        def run(bound: BoundInputs) -> torch.Tensor:
            with torch.inference_mode():
                return module(*bound.tensors)

        self.runners["exported"] = run

    # ------------------------------------------------------------------ AOTInductor
    def _prepare_aot(self, policy: str) -> None:
        if policy == "never":
            self.skipped["aot"] = "AOTInductor disabled in this mode (--smoke or --no-aot)"
            return
        path = self._path("aot", ".pt2")
        if not path.exists() and policy == "cached":
            self.skipped["aot"] = (f"no cached package ({path.name}); --quick compiles only with --aot "
                                   "(a compile takes ~10-60 s)")
            return

        def prepare() -> None:
            info: dict[str, Any] = {"path": str(path), "cached": path.exists()}
            if not path.exists():
                self._log("compiling the AOTInductor package (once; cached) ...")
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ep = torch.export.export(self.model, self._example(), dynamic_shapes=self._dynamic_shapes())
                    tmp = path.with_name(path.stem + ".tmp.pt2")
                    torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp))
                self._store(tmp, path)
                info["compile_s"] = time.perf_counter() - t0
            runner = torch._inductor.aoti_load_package(str(path))
            self.info["aot"] = info

            def run(bound: BoundInputs) -> torch.Tensor:
                with torch.inference_mode():
                    return runner(*bound.tensors)

            self.runners["aot"] = run

        self._try("aot", prepare)

    # ------------------------------------------------------------------ ONNX Runtime
    def _prepare_onnx(self) -> None:
        import onnxruntime as ort

        path = self._path("onnx", ".onnx", extra=ort.__version__)
        info: dict[str, Any] = {"path": str(path), "cached": path.exists()}
        if not path.exists():
            t0 = time.perf_counter()
            info["exporter"] = self._export_onnx(path)
            info["export_s"] = time.perf_counter() - t0
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.info["onnx"] = info

        def run(bound: BoundInputs) -> np.ndarray:
            return session.run(None, bound.feeds)[0]

        self.runners["onnx"] = run

    def _export_onnx(self, path: Path) -> str:
        """Export with the torch.export-based exporter (needs onnxscript), else the TorchScript one."""
        import logging

        tmp = path.with_name(path.stem + ".tmp.onnx")
        names = dict(input_names=list(self.bm.input_names), output_names=list(self.bm.output_names))
        first_error = ""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            try:
                import onnxscript  # noqa: F401  (the dynamo exporter's dependency)

                torch.onnx.export(self.model, self._example(), str(tmp), dynamo=True,
                                  dynamic_shapes=self._dynamic_shapes(), external_data=False, verbose=False,
                                  **names)
                self._store(tmp, path)
                return "torch.onnx.export(dynamo=True)"
            except Exception as exc:
                first_error = f"{type(exc).__name__}: {exc}"[:300]
            try:
                axes = {n: {0: "batch"} for n in self.bm.input_names + self.bm.output_names}
                torch.onnx.export(self.model, self._example(), str(tmp), dynamo=False, dynamic_axes=axes,
                                  opset_version=17, **names)
                self._store(tmp, path)
                return f"torch.onnx.export(dynamo=False) (the dynamo exporter failed: {first_error})"
            except Exception as exc:
                raise RuntimeError(f"ONNX export failed: dynamo exporter: {first_error}; TorchScript exporter: "
                                   f"{type(exc).__name__}: {exc} (the dynamo exporter needs `pip install onnxscript`)"
                                   ) from None

    # ------------------------------------------------------------------ alpyka Model on SoA
    def _prepare_alpyka(self) -> None:
        try:
            import portable as pk
            from inference import Model, ModelMetadata, SoAMetadata  # noqa: F401
            import inference
        except Exception as exc:
            reason = f"inference.Model is not importable ({type(exc).__name__}: {exc})"
            for v in ("alpyka_jit", "alpyka_exported", "alpyka_aot", "alpyka_onnx"):
                self.skipped[v] = reason
            return
        inference.set_torch_threads(self.threads, 1)
        self._queue = pk.Queue(pk.device("cpu_serial"))
        for variant, source in (("alpyka_jit", "jit"), ("alpyka_exported", "exported"), ("alpyka_aot", "aot"),
                                ("alpyka_onnx", "onnx")):
            if source not in self.runners:
                self.skipped[variant] = f"needs the {source} artifact: {self.skipped.get(source, 'missing')}"
                continue
            path = self.info[source]["path"]
            self._try(variant, lambda v=variant, p=path: self._alpyka_runner(v, p))
        if torch.get_num_threads() != self.threads:
            raise RuntimeError(f"torch threads changed to {torch.get_num_threads()} (asked {self.threads})")

    def _alpyka_runner(self, variant: str, path: str) -> None:
        from inference import Model, ModelMetadata

        model = Model(path).to(self._queue)
        q = self._queue

        def run(bound: BoundInputs) -> np.ndarray:
            soa_in = self._soa(bound)
            model.forward(ModelMetadata(*soa_in["meta"]))
            q.wait()
            return soa_in["out"]

        self.runners[variant] = run

    def _soa(self, bound: BoundInputs) -> dict[str, Any]:
        """The batch in SoA collections (built once per batch): one matrix column per input
        [n, R, C], one vector column per output [n, K]."""
        if bound.soa is None:
            import portable as pk
            import soa
            from inference import SoAMetadata

            fields_in = {n: soa.matrix(t.numpy().dtype, t.shape[1], t.shape[2])
                         for n, t in zip(self.bm.input_names, bound.tensors)}
            with torch.inference_mode():
                ref = self.model(*(t[:2] for t in bound.tensors))
            fields_out = {n: soa.vector(np.float32, ref.shape[1]) for n in self.bm.output_names}
            In = type(f"{self.bm.name.title()}Inputs", (soa.Layout,), fields_in)
            Out = type(f"{self.bm.name.title()}Outputs", (soa.Layout,), fields_out)
            q = self._queue
            cin = pk.PortableCollection(In, bound.batch, q)
            cout = pk.PortableCollection(Out, bound.batch, q)
            q.wait()
            view = cin.view()
            for n, arr in bound.feeds.items():
                getattr(view, n)[...] = arr
            meta_in, meta_out = SoAMetadata(cin), SoAMetadata(cout)
            for n in self.bm.input_names:
                meta_in.append_block(n, n)
            for n in self.bm.output_names:
                meta_out.append_block(n, n)
            out_view = getattr(cout.view(), self.bm.output_names[0])
            bound.soa = {"collections": (cin, cout), "meta": (meta_in, meta_out), "out": out_view}
        return bound.soa

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
