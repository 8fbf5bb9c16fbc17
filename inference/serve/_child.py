"""The server process: loads the models and runs PyTriton's Triton until told to stop.

Started by :func:`inference.serve.serve` as ``python -m inference.serve._child CONFIG.json`` with
``LD_LIBRARY_PATH`` starting with the interpreter's LIBDIR (PyTriton's Python-backend stub must
load this interpreter's libpython). It writes ``ready.json`` once Triton is up, stops on
SIGTERM/SIGINT, and stops by itself when its parent process dies.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ._spec import ModelSpec, TensorDecl


def load_model(path: str, device: str) -> Callable[..., Any]:
    """A callable on torch tensors: TorchScript (.pt) or an AOTInductor package (.pt2)."""
    import torch

    if path.endswith(".pt2"):
        return torch._inductor.aoti_load_package(path)
    module = torch.jit.load(path, map_location=device)
    module.eval()
    return module


def _as_list(out: Any, names: list[str]) -> list[Any]:
    if isinstance(out, dict):
        return [out[n] for n in names] if names else list(out.values())
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def probe_outputs(model: Callable[..., Any], spec: ModelSpec, device: str) -> list[TensorDecl]:
    """Output declarations found by running the model on two zero samples."""
    import torch

    args = [torch.zeros((2, *[max(d, 1) for d in t.dims]), dtype=getattr(torch, t.dtype), device=device)
            for t in spec.inputs]
    with torch.inference_mode():
        outs = _as_list(model(*args), [])
    variable = any(d < 0 for t in spec.inputs for d in t.dims)  # output extents may follow inputs
    decls = []
    for i, o in enumerate(outs):
        dims = tuple(-1 if variable else int(d) for d in o.shape[1:])
        decls.append(TensorDecl(f"output__{i}", str(o.detach().cpu().numpy().dtype), dims))
    return decls


def make_infer(model: Callable[..., Any], spec: ModelSpec, device: str) -> Callable[..., Any]:
    """The PyTriton inference callable: numpy in, the model on torch tensors, numpy out."""
    import torch

    in_names = [t.name for t in spec.inputs]
    out_names = [t.name for t in spec.outputs]
    out_dtypes = [np.dtype(t.dtype) for t in spec.outputs]

    def run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(arrays[n])).to(device) for n in in_names]
        with torch.inference_mode():
            outs = _as_list(model(*args), out_names)
        if len(outs) != len(out_names):
            raise ValueError(f"model {spec.name!r} returned {len(outs)} outputs, {len(out_names)} declared")
        return {n: o.detach().cpu().numpy().astype(dt, copy=False)
                for n, o, dt in zip(out_names, outs, out_dtypes)}

    if spec.max_batch_size > 0:
        from pytriton.decorators import batch

        @batch
        def infer_batched(**arrays: np.ndarray) -> dict[str, np.ndarray]:
            return run(arrays)

        return infer_batched

    def infer_requests(requests: list[Any]) -> list[dict[str, np.ndarray]]:
        return [run({n: r[n] for n in in_names}) for r in requests]

    return infer_requests


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        if os.getppid() != parent:
            stop.set()


def main(config_path: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    workdir = Path(cfg["workdir"])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=_watch_parent, args=(cfg["parent_pid"], stop), daemon=True).start()
    try:
        import torch
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
        from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

        if cfg.get("threads"):
            torch.set_num_threads(int(cfg["threads"]))
        device = cfg["device"]
        specs = [ModelSpec.from_json(s) for s in cfg["models"]]
        bindings = []
        for spec in specs:
            model = load_model(spec.path, device)
            if not spec.outputs:
                spec.outputs = probe_outputs(model, spec, device)
            bindings.append((spec, make_infer(model, spec, device)))
        tconfig = TritonConfig(
            grpc_address="127.0.0.1", grpc_port=cfg["grpc_port"],
            http_address="127.0.0.1", http_port=cfg["http_port"],
            metrics_address="127.0.0.1", metrics_port=cfg["metrics_port"],
            log_verbose=int(cfg.get("log_verbose", 0)),
        )
        triton = Triton(config=tconfig, workspace=str(workdir / "pytriton"),
                        security_config=TritonSecurityConfig(restricted_endpoints=[]))
        for spec, infer in bindings:
            batcher = None
            if spec.max_batch_size > 0 and spec.dynamic_batching:
                batcher = DynamicBatcher(max_queue_delay_microseconds=int(spec.max_queue_delay_us),
                                         preferred_batch_size=spec.preferred_batch_sizes or None)
            mconfig = ModelConfig(batching=spec.max_batch_size > 0,
                                  max_batch_size=max(spec.max_batch_size, 0), batcher=batcher)
            triton.bind(
                model_name=spec.name,
                infer_func=[infer] * max(1, spec.instances),
                inputs=[Tensor(name=t.name, dtype=np.dtype(t.dtype), shape=tuple(t.dims)) for t in spec.inputs],
                outputs=[Tensor(name=t.name, dtype=np.dtype(t.dtype), shape=tuple(t.dims)) for t in spec.outputs],
                config=mconfig, strict=False,
            )
        triton.run()
    except BaseException:  # noqa: BLE001 - reported to the parent through the log and exit code
        traceback.print_exc()
        return 2
    try:
        ready = {"pid": os.getpid(), "models": [s.to_json() for s in specs]}
        tmp = workdir / "ready.json.tmp"
        tmp.write_text(json.dumps(ready))
        tmp.rename(workdir / "ready.json")
        print(f"alpyka serve: ready (gRPC 127.0.0.1:{cfg['grpc_port']}, HTTP 127.0.0.1:{cfg['http_port']})",
              flush=True)
        while not stop.wait(0.5):
            if not triton.is_alive():
                print("alpyka serve: Triton stopped unexpectedly", file=sys.stderr, flush=True)
                return 3
        return 0
    finally:
        triton.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
