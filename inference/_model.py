"""``Model``: a PyTorch model run on SoA collections, in order with the work of an alpyka queue.

    model = Model("gnn.pt")      # TorchScript -> JIT; "gnn.pt2" -> AOTInductor; an nn.Module -> eager
    model.to(q)                  # binds the queue's device and stream (for this thread and as default)
    model.forward(ModelMetadata(inputs, outputs))   # enqueued on q; outputs land in the collection

How a forward pass is ordered with the queue (upstream: CMSSW PyTorchAlpaka):

- CPU queues (cpu_serial, cpu_threads): the pass is a host task of the queue (``enqueue_host``),
  so kernel -> model -> kernel on one non-blocking queue needs no wait; errors surface at the
  queue's next ``wait()``.
- CUDA/ROCm queues: the pass runs on the calling thread with the queue's native stream as
  torch's current stream (an ``ExternalStream``; the previous stream is restored after), so
  torch's kernels are ordered with the queue's; errors raise from ``forward``.
- other queues (OpenCL): the copy path; input blocks are copied into host memory on the queue,
  the model runs on the CPU as a host task, and the output blocks are copied back on the queue.

The model is deployed on a device the first time it is used there (a copy per device).
"""

from __future__ import annotations

import copy
import os
import threading
from typing import Any, Callable, Mapping, Sequence

import torch

import portable as pk

from ._loading import ModelFileError, detect_format, jit_load, jit_save_bytes, read_torchscript, refuse
from ._metadata import ModelMetadata, check_batch_size, check_output
from ._runtime import ensure_torch_threads, queue_stream
from ._tensors import PATH_NAMES, memory_path, torch_device

_KINDS = ("jit", "aot", "eager")


def _aot_package_device(path: str) -> str:
    """The device an AOTInductor package was compiled for (``"cpu"``, ``"cuda"``...)."""
    import json
    import zipfile

    with zipfile.ZipFile(path) as zf:
        for n in zf.namelist():
            if "/aotinductor/" in n and n.endswith("_metadata.json") and "wrapper" in n:
                meta = json.loads(zf.read(n))
                return str(meta.get("AOTI_DEVICE_KEY", "cpu"))
    return "cpu"


class Model:
    """A PyTorch model for SoA collections: ``Model(source)`` with ``source`` a TorchScript file,
    an AOTInductor ``.pt2`` package, a ``torch.jit.ScriptModule`` or an ``nn.Module``."""

    def __init__(self, source: Any) -> None:
        ensure_torch_threads()
        self._lock = threading.Lock()
        self._deployed: dict[torch.device, Callable[..., Any]] = {}
        self._for_device: dict[pk.Device, tuple[Callable[..., Any], str]] = {}
        self._local = threading.local()
        self._default_queue: pk.Queue | None = None
        self._module: torch.nn.Module | None = None
        self._script: bytes | None = None
        self._package: str | None = None
        self.aot_device: str | None = None
        if isinstance(source, torch.jit.ScriptModule):
            self.kind, self._script = "jit", jit_save_bytes(source)
            self.source = f"ScriptModule {source.original_name}"
        elif isinstance(source, torch.nn.Module):
            self.kind, self._module, self.source = "eager", source, f"{type(source).__name__} module"
        elif isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            fmt = detect_format(path)
            if fmt == "jit":
                self.kind, self._script = "jit", read_torchscript(path)
            elif fmt == "aot":
                self.kind, self._package = "aot", os.path.abspath(path)
                self.aot_device = _aot_package_device(path)
            else:
                raise refuse(path, fmt)
            self.source = path
        else:
            raise TypeError(f"Model needs a TorchScript file, a .pt2 package, a ScriptModule or an nn.Module, "
                            f"got {type(source).__name__}")

    # ------------------------------------------------------------------ binding
    def to(self, queue: pk.Queue) -> "Model":
        """Bind the queue's device and stream: for this thread, and as the default of threads
        that bound none. Deployment on the device happens at the first forward there."""
        if not isinstance(queue, pk.Queue):
            raise TypeError(f"Model.to needs a pk.Queue, got {type(queue).__name__}")
        self._local.queue = queue
        self._default_queue = queue
        return self

    @property
    def queue(self) -> pk.Queue | None:
        """The queue bound for this thread (else the default one)."""
        return getattr(self._local, "queue", None) or self._default_queue

    def _resolve_queue(self, queue: pk.Queue | None) -> pk.Queue:
        q = queue if queue is not None else self.queue
        if q is None:
            raise RuntimeError("no queue: call model.to(queue) first or pass forward(..., queue=q)")
        if not isinstance(q, pk.Queue):
            raise TypeError(f"queue must be a pk.Queue, got {type(q).__name__}")
        return q

    # ------------------------------------------------------------------ deployment
    def module_for(self, where: pk.Queue | pk.Device | torch.device | str) -> Callable[..., Any]:
        """The model deployed on a device (deploying it on first use): a callable on tensors."""
        if isinstance(where, pk.Queue):
            where = where.device
        tdev = torch_device(where) if isinstance(where, pk.Device) else torch.device(where)
        fn = self._deployed.get(tdev)
        if fn is None:
            with self._lock:
                fn = self._deployed.get(tdev)
                if fn is None:
                    fn = self._deploy(tdev)
                    self._deployed[tdev] = fn
        return fn

    def _deploy(self, tdev: torch.device) -> Callable[..., Any]:
        if self.kind == "eager":
            assert self._module is not None
            mod = self._module if tdev.type == "cpu" else copy.deepcopy(self._module).to(tdev)
            return mod.eval()
        if self.kind == "jit":
            assert self._script is not None
            return jit_load(self._script, tdev).eval()
        assert self._package is not None
        if self.aot_device != tdev.type:
            raise ModelFileError(
                f"{self.source} was compiled for {self.aot_device}; this queue runs the model on {tdev}. "
                f"Compile a package for it: inference.aot.compile(module, inputs, path, device={tdev.type!r})"
            )
        index = tdev.index if tdev.index is not None else -1
        try:
            return torch._inductor.aoti_load_package(self._package, device_index=index)
        except RuntimeError as exc:
            raise ModelFileError(f"{self.source}: AOTInductor package could not be loaded ({exc})") from None

    # ------------------------------------------------------------------ forward
    def forward(self, metadata: ModelMetadata, queue: pk.Queue | None = None, *,
                batch_size: int | None = None) -> None:
        """Enqueue the model on ``queue`` (default: the bound one) reading ``metadata.inputs``'
        blocks and writing its outputs into ``metadata.outputs``' blocks. Outputs are checked
        (shape, dtype) before anything is written; a mismatch leaves the collection unchanged."""
        if not isinstance(metadata, ModelMetadata):
            raise TypeError(f"forward needs a ModelMetadata(inputs, outputs), got {type(metadata).__name__}")
        q = self._resolve_queue(queue)
        for what, meta in (("input", metadata.inputs), ("output", metadata.outputs)):
            dev = meta.collection.device
            if not q.device.can_access(dev):
                raise pk.DeviceMismatch(f"the {what} collection is on {dev}; the model's queue is on "
                                        f"{q.device}. Copy it there first (coll.to(device, queue))")
        bs = metadata.batch_size if batch_size is None else check_batch_size(
            batch_size, metadata.inputs, metadata.outputs)
        dev = q.device
        cached = self._for_device.get(dev)  # the hot path: one dict lookup per call
        if cached is None:
            cached = self._for_device[dev] = (self.module_for(dev), memory_path(dev))
        fn, path = cached
        run = _Pass(self.kind, fn, metadata, bs)
        if path == "cuda":
            with queue_stream(q):
                run.execute(run.device_inputs(), run.device_outputs())
        elif path == "host":
            q.enqueue_host(lambda: run.execute(run.device_inputs(), run.device_outputs()))
        else:
            ins, outs = metadata.inputs, metadata.outputs
            staged_in = ins.stage_in(q, ins.block_names, wait=False)
            # the output spans are staged too, so a failed pass copies back what was there
            staged_out = outs.stage_in(q, outs.block_names, wait=False)
            q.enqueue_host(lambda: run.execute(
                [staged_in[n].tensor() for n in ins.block_names],
                {n: s.tensor() for n, s in staged_out.items()},
            ))
            outs.stage_out(q, staged_out)

    def __call__(self, metadata: ModelMetadata, queue: pk.Queue | None = None, **kw: Any) -> None:
        self.forward(metadata, queue, **kw)

    def __repr__(self) -> str:
        q = self.queue
        where = f" on {q.device} ({PATH_NAMES[memory_path(q.device)]})" if q is not None else " (no queue bound)"
        aot = f", compiled for {self.aot_device}" if self.kind == "aot" else ""
        return f"<Model {self.kind} {self.source!r}{aot}{where}>"


class _Pass:
    """One forward pass: inputs -> model (in mini-batches) -> checked outputs -> written."""

    def __init__(self, kind: str, fn: Callable[..., Any], metadata: ModelMetadata, batch_size: int | None) -> None:
        self.kind, self.fn, self.meta, self.batch_size = kind, fn, metadata, batch_size

    def device_inputs(self) -> list[torch.Tensor]:
        ins = self.meta.inputs
        return [ins.device_tensor(n) for n in ins.block_names]

    def device_outputs(self) -> dict[str, torch.Tensor]:
        outs = self.meta.outputs
        return {n: outs.device_tensor(n) for n in outs.block_names}

    def _prepare(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        dtype = self.meta.input_dtype
        out = [t if dtype is None else t.to(dtype) for t in tensors]
        if self.kind == "aot":
            # AOTInductor kernels are compiled for the example inputs' (contiguous) strides
            out = [t.contiguous() for t in out]
        return out

    def execute(self, inputs: list[torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
        n = self.meta.inputs.size
        bs = self.batch_size
        ranges = [(0, n)] if bs is None or bs >= n else [(s, min(s + bs, n)) for s in range(0, n, bs)]
        blocks = {b.name: b for b in self.meta.outputs.blocks}
        results: list[tuple[int, int, dict[str, torch.Tensor]]] = []
        with torch.inference_mode():
            for start, stop in ranges:
                batch = inputs if len(ranges) == 1 else [t[start:stop] for t in inputs]
                raw = self.fn(*self._prepare(batch))
                mapped = map_outputs(raw, list(blocks))
                rows = None if len(ranges) == 1 else stop - start
                checked = {k: check_output(blocks[k], v, cast=self.meta.cast_outputs, rows=rows)
                           for k, v in mapped.items()}
                results.append((start, stop, checked))
            # every batch's outputs were checked: now write them
            for start, stop, checked in results:
                for name, value in checked.items():
                    target = outputs[name] if len(results) == 1 else outputs[name][start:stop]
                    target.copy_(value)


def map_outputs(raw: Any, names: list[str]) -> dict[str, Any]:
    """The model's result as ``{output block: value}``: a tensor for one block, a tuple/list in
    block order, a dict by block name."""
    if isinstance(raw, torch.Tensor):
        if len(names) != 1:
            raise ValueError(f"the model returned one tensor; the outputs define {len(names)} blocks {names}; "
                             "return a tuple (in block order) or a dict (by block name)")
        return {names[0]: raw}
    if isinstance(raw, (tuple, list)):
        if len(raw) != len(names):
            raise ValueError(f"the model returned {len(raw)} outputs; the outputs define {len(names)} blocks {names}")
        return dict(zip(names, raw))
    if isinstance(raw, Mapping):
        missing = [k for k in names if k not in raw]
        extra = [k for k in raw if k not in names]
        if missing or extra:
            raise KeyError(f"the model's outputs {list(raw)} do not match the output blocks {names} "
                           f"(missing {missing}, unexpected {extra})")
        return {k: raw[k] for k in names}
    raise TypeError(f"the model returned {type(raw).__name__}; expected a tensor, a tuple/list or a dict of tensors")
