"""``Model``: a PyTorch model run on SoA collections, in order with the work of an alpyka queue.

    model = Model("gnn.pt2")     # torch.export program (run as is) or AOTInductor package, by content;
                                 # "gnn.onnx" -> ONNX Runtime; "gnn.pt" -> TorchScript (legacy); nn.Module -> eager
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
import functools
import json
import os
import threading
import zipfile
from collections.abc import Callable
from typing import Any

import torch

import portable as pk
from portable import ArgumentTypeError, StateError
from portable.caches import LRUCache

from ._exported_check import check_exported_inputs
from ._loading import (
    ModelFileError,
    detect_format,
    exported_module,
    jit_load,
    jit_save_bytes,
    read_exported,
    read_torchscript,
    refuse,
)
from ._metadata import ModelMetadata, check_batch_size
from ._onnx import OnnxProgram
from ._plan import Pass, PassSpec, Plan, Workspace, map_outputs, write  # noqa: F401 - map_outputs, write: re-exported
from ._runtime import ensure_torch_threads
from ._torch_queue import PATH_NAMES, memory_path, run_on_queue_stream, torch_device

_KINDS = ("exported", "aot", "onnx", "jit", "eager")
#: pass specs a model keeps per device (one per block geometry and settings; sizes that change
#: every event: the least recently used dropped first)
_SPECS_PER_DEVICE = 64


def _aot_package_device(path: str) -> str:
    """The device an AOTInductor package was compiled for (``"cpu"``, ``"cuda"``...)."""
    with zipfile.ZipFile(path) as zf:
        for n in zf.namelist():
            if "/aotinductor/" in n and n.endswith("_metadata.json") and "wrapper" in n:
                meta = json.loads(zf.read(n))
                return str(meta.get("AOTI_DEVICE_KEY", "cpu"))
    return "cpu"


class Model:
    """A model for SoA collections: ``Model(source)`` with ``source`` a ``.pt2`` file (a
    ``torch.export`` program, run without compiling, or an AOTInductor package), an ``.onnx``
    file (ONNX Runtime), a TorchScript file (legacy), a ``torch.jit.ScriptModule`` or an
    ``nn.Module``. ``kind`` says which: ``exported``, ``aot``, ``onnx``, ``jit`` or ``eager``."""

    def __init__(self, source: Any) -> None:
        ensure_torch_threads()
        self._lock = threading.Lock()
        self._deployed: dict[torch.device, Callable[..., Any]] = {}
        # device -> (deployed model, memory path, workspace, {geometry: PassSpec})
        self._for_device: dict[pk.Device, tuple[Callable[..., Any], str, Workspace, LRUCache]] = {}
        self._access_ok: set[tuple[pk.Device, pk.Device, pk.Device]] = set()  # (queue, inputs, outputs) devices
        self._local = threading.local()
        self._default_queue: pk.Queue | None = None
        self._module: torch.nn.Module | None = None
        self._script: bytes | None = None
        self._package: str | None = None
        self._exported: Any = None  # a torch.export.ExportedProgram
        self._onnx: Any = None  # an inference._onnx.OnnxProgram
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
            elif fmt == "exported":
                self.kind, self._exported = "exported", read_exported(path)
            elif fmt == "onnx":
                self.kind, self._onnx = "onnx", OnnxProgram(path)
            else:
                raise refuse(path, fmt)
            self.source = path
        else:
            raise ArgumentTypeError(
                f"Model needs a .pt2, .onnx or TorchScript file, a ScriptModule or an nn.Module, "
                f"got {type(source).__name__}"
            )

    # ------------------------------------------------------------------ binding
    def to(self, queue: pk.Queue) -> Model:
        """Bind the queue's device and stream: for this thread, and as the default of threads
        that bound none. Deployment on the device happens at the first forward there."""
        if not isinstance(queue, pk.Queue):
            raise ArgumentTypeError(f"Model.to needs a pk.Queue, got {type(queue).__name__}")
        self._local.queue = queue
        self._default_queue = queue
        return self

    @property
    def queue(self) -> pk.Queue | None:
        """The queue bound for this thread (else the default one)."""
        return getattr(self._local, "queue", None) or self._default_queue

    def _resolve_queue(self, queue: pk.Queue | None) -> pk.Queue:
        q = queue if queue is not None else (getattr(self._local, "queue", None) or self._default_queue)
        if q is None:
            raise StateError("no queue: call model.to(queue) first or pass forward(..., queue=q)")
        if not isinstance(q, pk.Queue):
            raise ArgumentTypeError(f"queue must be a pk.Queue, got {type(q).__name__}")
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
        if self.kind == "exported":
            return exported_module(self._exported, tdev)
        if self.kind == "onnx":
            return self._onnx.runner(tdev)
        assert self._package is not None
        if self.aot_device != tdev.type:
            raise ModelFileError(
                f"{self.source} was compiled for {self.aot_device}; this queue runs the model on {tdev}. "
                f"Compile a package for it: inference.aot.compile(module, inputs, path, device={tdev.type!r})"
            )
        index = tdev.index if tdev.index is not None else -1
        from . import aot  # here: `python -m inference.aot` must find it not yet imported

        return aot.load(self._package, device_index=index)  # a damaged package: ModelFileError

    # ------------------------------------------------------------------ forward
    def forward(self, metadata: ModelMetadata, queue: pk.Queue | None = None, *, batch_size: int | None = None) -> None:
        """Enqueue the model on ``queue`` (default: the bound one) reading ``metadata.inputs``'
        blocks and writing its outputs into ``metadata.outputs``' blocks. Outputs are checked
        (shape, dtype) before anything is written; a mismatch leaves the collection unchanged.

        The checks of the metadata against this model and queue are done once: the pass is
        prepared (a :class:`inference._plan.Plan`) and reused while the metadata is unchanged."""
        if queue is None:
            queue = getattr(self._local, "queue", None) or self._default_queue
        if batch_size is None and isinstance(metadata, ModelMetadata):  # the hot path: prepared before
            plan = metadata.plan(self)
            if plan is not None and plan.queue is queue and plan.current(metadata):
                plan.launch()
                return
        self._prepare(metadata, queue, batch_size).launch()

    def _prepare(self, metadata: ModelMetadata, queue: pk.Queue | None, batch_size: int | None) -> Plan:
        """Check the metadata against this model and the queue and prepare the pass (kept in
        the metadata for the next forward unless ``batch_size`` overrides the metadata's)."""
        if not isinstance(metadata, ModelMetadata):
            raise ArgumentTypeError(f"forward needs a ModelMetadata(inputs, outputs), got {type(metadata).__name__}")
        q = self._resolve_queue(queue)
        dev = q.device
        access = (dev, metadata.inputs.collection.device, metadata.outputs.collection.device)
        if access not in self._access_ok:  # checked once per combination of devices
            for what, meta in (("input", metadata.inputs), ("output", metadata.outputs)):
                if not dev.can_access(meta.collection.device):
                    raise pk.DeviceMismatch(
                        f"the {what} collection is on {meta.collection.device}; the model's "
                        f"queue is on {dev}. Copy it there first (coll.to(device, queue))"
                    )
            self._access_ok.add(access)
        bs = (
            metadata.batch_size
            if batch_size is None
            else check_batch_size(batch_size, metadata.inputs, metadata.outputs)
        )
        cached = self._for_device.get(dev)
        if cached is None:
            cached = self._for_device[dev] = (
                self.module_for(dev),
                memory_path(dev),
                Workspace(),
                LRUCache(_SPECS_PER_DEVICE),
            )
        fn, path, work, specs = cached
        # one spec per geometry: a Block is one cached object per geometry (inference._block), so the
        # key is the blocks' identities (no field hashed per event); the spec holds the blocks, so
        # an identity in a kept key is never another block's. Equal blocks that are other objects
        # (after the block cache was cleared) get a spec of their own: the same pass.
        ins, outs = metadata.inputs, metadata.outputs
        in_blocks, out_blocks = ins.ordered()[1], outs.ordered()[1]
        key = (
            tuple(map(id, in_blocks)),
            tuple(map(id, out_blocks)),
            bs,
            metadata.cast_outputs,
            metadata.input_dtype,
            metadata.layout,
        )
        spec = specs.get(key)
        if spec is None:
            if self.kind == "onnx":  # blocks vs the model's declared inputs/outputs
                fn.check(in_blocks, out_blocks, metadata.input_dtype, metadata.cast_outputs)
            elif self.kind == "exported":  # blocks vs the program's declared inputs
                check_exported_inputs(self._exported, self.source, in_blocks, metadata.input_dtype)
            spec = specs[key] = PassSpec(self.kind, fn, metadata, bs, work, host=path == "host")
        if path == "host" and spec.host is not None:  # ONNX Runtime on the CPU: the geometry's binding
            launch = functools.partial(q.enqueue_native, spec.host_pass(ins, outs), ins.collection, outs.collection)
            return self._keep(metadata, Plan(q, metadata, launch, spec), batch_size)
        run = Pass(spec, ins, outs)
        if path == "cuda":  # in the queue's order, tracked by it (see inference/_torch_queue.py)
            launch = functools.partial(
                run_on_queue_stream, q, run.bind().run, metadata.inputs.collection, metadata.outputs.collection
            )
        elif path == "host":  # enqueue_native: a host task that marks the collections as the queue's
            launch = functools.partial(
                q.enqueue_native, run.bind().task(), metadata.inputs.collection, metadata.outputs.collection
            )
        else:
            launch = functools.partial(_launch_staged, q, run)
        return self._keep(metadata, Plan(q, metadata, launch, spec), batch_size)

    def input_layout(self, metadata: ModelMetadata, queue: pk.Queue | None = None) -> str:
        """How this model reads the inputs of ``metadata`` on ``queue`` (default: the bound one):
        ``"zero_copy"`` (the columns in place), ``"gather"`` (copied into row-major tensors first)
        or ``"measuring"`` (``layout="auto"`` still timing both on this geometry). Prepares the
        pass when no forward did yet (nothing runs)."""
        if queue is None:
            queue = getattr(self._local, "queue", None) or self._default_queue
        plan = metadata.plan(self) if isinstance(metadata, ModelMetadata) else None
        if plan is None or plan.queue is not queue or not plan.current(metadata):
            plan = self._prepare(metadata, queue, None)
        spec = plan.spec
        return "measuring" if spec.trial is not None else spec.layout

    def _keep(self, metadata: ModelMetadata, plan: Plan, batch_size: int | None) -> Plan:
        """Keep ``plan`` in the metadata for the next forward (not one for a per-call batch size)."""
        if batch_size is None:
            metadata.keep_plan(self, plan)
        return plan

    def __call__(self, metadata: ModelMetadata, queue: pk.Queue | None = None, **kw: Any) -> None:
        self.forward(metadata, queue, **kw)

    def __repr__(self) -> str:
        q = self.queue
        where = f" on {q.device} ({PATH_NAMES[memory_path(q.device)]})" if q is not None else " (no queue bound)"
        aot = f", compiled for {self.aot_device}" if self.kind == "aot" else ""
        if self.kind == "onnx" and q is not None:
            runner = self._for_device.get(q.device, (None,))[0]
            if runner is not None:
                gathered = (
                    f"; blocks {list(runner.gathered)} gathered into row-major tensors (one copy each)"
                    if runner.gathered
                    else "; inputs bound in place (I/O binding, zero-copy)"
                )
                aot = f", ONNX Runtime {runner.stream_note}{gathered}"
            else:
                aot = ", ONNX Runtime"
        return f"<Model {self.kind} {self.source!r}{aot}{where}>"


def _launch_staged(q: pk.Queue, run: Pass) -> None:
    """The copy path: the input blocks (and the output spans, so a failed pass copies back what
    was there) staged into host memory on ``q``, the pass as a host task, the outputs copied back."""
    ins, outs = run.ins, run.outs
    in_names = list(run.spec.in_names)
    staged_in = ins.stage_in(q, in_names, wait=False)
    staged_out = outs.stage_in(q, list(run.spec.names), wait=False)
    q.enqueue_host(
        lambda: run.execute([staged_in[n].tensor() for n in in_names], {n: s.tensor() for n, s in staged_out.items()})
    )
    outs.stage_out(q, staged_out)
