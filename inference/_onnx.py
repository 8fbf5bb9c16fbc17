"""ONNX models through ONNX Runtime: sessions per device (and CUDA stream), I/O binding over
torch tensors, and the checks of blocks against the model's declared inputs and outputs.

    program = OnnxProgram("particlenet.onnx")      # read and validated once (a CPU session)
    run = program.runner(torch.device("cpu"))       # a callable on torch tensors
    run.check(inputs, outputs, input_dtype)         # blocks vs the model's declarations (cached)
    results = run(out_shapes, *tensors)             # {block: tensor} or a tuple in model order
    program.runner(HOST).run_arrays(*arrays)        # numpy arrays on the CPU, without torch

Inputs are bound with ``IOBinding.bind_input`` over the tensors' own memory: ORT needs dense
row-major tensors, so a block is bound without a copy only when its strided tensor is
row-major contiguous (one plain column ``[n, 1]``, one scalar-free vector of one component...);
a block of several SoA columns is column-major (strides ``[1, padded]``) and is gathered once
into a row-major tensor (:func:`gathered_blocks` names them; ``Model``'s repr says so). Outputs
are bound to fresh row-major tensors of the blocks' shapes; the caller checks and copies them
into the SoA columns, so a failing run leaves the collection untouched. On host memory a
whole-collection pass uses a binding made once per block geometry (the same arrangement, its
arrays and binding shared by every metadata of the geometry: inference/_onnx_host.py).

Execution providers: the CPU EP on CPU backends (and the copy path); the CUDA EP on cuda,
with the queue's stream as its compute stream (``user_compute_stream``; one session per
stream, made on first use) and no synchronisation after a run, so ORT's kernels are ordered
with the queue's. ROCm has no EP on PyPI: the cuda/rocm memory path refuses it by name.

torch is imported where tensors are made or read, not by this module: a served ONNX model on the
CPU (``serve``'s server process) runs on numpy arrays and loads no torch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from portable import ArgumentError, ArgumentTypeError

from ._block import Block
from ._loading import ModelFileError
from ._onnx_files import external_data_files

if TYPE_CHECKING:
    import torch

#: ONNX tensor element types (as ORT spells them) -> numpy dtypes
_ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}

#: the execution provider each torch device type needs, and what to install for it
_PROVIDERS = {
    "cpu": ("CPUExecutionProvider", "pip install 'alpyka[onnx]' (onnxruntime)"),
    "cuda": ("CUDAExecutionProvider", "pip install 'alpyka[onnx-gpu]' (onnxruntime-gpu, in place of onnxruntime)"),
}


def import_ort() -> Any:
    """``onnxruntime``, or an ImportError that names the extra to install."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(f"ONNX models need ONNX Runtime: pip install 'alpyka[onnx]' ({exc})") from None
    return onnxruntime


def choose_provider(device_type: str, available: Sequence[str]) -> str:
    """The execution provider for models run on torch device type ``device_type``; a clear error
    naming the provider and the extra when this ONNX Runtime lacks it."""
    if device_type not in _PROVIDERS:
        raise ModelFileError(
            f"ONNX Runtime models run on the CPU or CUDA here; this queue runs models on "
            f"{device_type!r}, for which alpyka has no execution provider"
        )
    name, install = _PROVIDERS[device_type]
    if name not in available:
        raise ModelFileError(f"this ONNX Runtime has no {name} (it has {list(available)}); {install}")
    return name


class Decl:
    """One declared input or output of an ONNX model: name, numpy dtype, dims (str or None = dynamic)."""

    def __init__(self, arg: Any) -> None:
        self.name: str = arg.name
        dtype = _ONNX_TYPES.get(arg.type)
        self.type_name: str = arg.type
        self.dtype: np.dtype | None = None if dtype is None else np.dtype(dtype)
        self.dims: tuple[Any, ...] = tuple(d if isinstance(d, int) else None for d in (arg.shape or ()))

    def __repr__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.dims)
        dtype = self.dtype.name if self.dtype is not None else self.type_name
        return f"{self.name} {dtype}[{dims}]"

    def fits(self, shape: Sequence[int]) -> bool:
        """Whether a tensor of ``shape`` (batch axis first) fits the declared dims (ignoring the batch)."""
        return len(shape) == len(self.dims) and all(
            d is None or d == s for i, (d, s) in enumerate(zip(self.dims, shape)) if i > 0
        )


def row_major(block: Block) -> bool:
    """Whether the block's strided tensor is dense row-major (ORT can read it in place)."""
    expected = 1
    for size, stride in zip(reversed(block.shape), reversed(block.strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


class HostDevice(NamedTuple):
    """The CPU as a runner's device where no torch is loaded (a ``torch.device`` reads the same)."""

    type: str = "cpu"
    index: int | None = None


#: :meth:`OnnxProgram.runner`'s device for :meth:`OnnxRunner.run_arrays` (numpy, no torch)
HOST = HostDevice()


def session_options(ort: Any, intra_op: int | None = None) -> Any:
    """``intra_op`` intra-op threads (None: torch's intra-op count, see :mod:`inference._runtime`;
    0: ONNX Runtime's default) and one inter-op thread (alpyka's queues own the cores),
    sequential, quiet."""
    if intra_op is None:
        from ._runtime import torch_threads

        intra_op = int(torch_threads()["intra_op"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(intra_op)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return opts


class OnnxProgram:
    """An ONNX model file: its bytes and declarations, and its runners per device.

    A model with external data (weights in ``model.onnx.data`` beside it) is loaded by its
    absolute path, so ONNX Runtime reads that data from the model's folder whatever the working
    directory (a model given as bytes would read it from the working directory): its files are
    checked first (:func:`external_data_files`). ``intra_op``: its sessions' intra-op threads
    (default: torch's count, as :func:`session_options` says)."""

    def __init__(self, path: str | os.PathLike, intra_op: int | None = None) -> None:
        self.ort = import_ort()
        self.intra_op = intra_op
        self.path = os.fspath(path)
        with open(self.path, "rb") as fh:
            self.data = fh.read()
        self.external_files = external_data_files(self.data, self.path)
        #: what sessions are made from: the bytes, or the absolute path when there is external data
        self.source: bytes | str = os.path.abspath(self.path) if self.external_files else self.data
        try:
            session = self.ort.InferenceSession(
                self.source, session_options(self.ort, intra_op), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelFileError(
                f"{self.path}: ONNX Runtime cannot load it ({text}); the file is truncated, "
                "damaged or not an ONNX model"
            ) from None
        self.inputs = [Decl(a) for a in session.get_inputs()]
        self.outputs = [Decl(a) for a in session.get_outputs()]
        self._cpu_session = session
        self._lock = threading.Lock()

    def runner(self, tdev: torch.device | HostDevice) -> OnnxRunner:
        """A runner for models run on ``tdev`` (the provider is checked now; :data:`HOST`: the CPU,
        for :meth:`OnnxRunner.run_arrays` without torch)."""
        provider = choose_provider(tdev.type, self.ort.get_available_providers())
        return OnnxRunner(self, tdev, provider)

    def session(self, tdev: torch.device, provider: str, stream: int) -> Any:
        """A new session on ``provider`` (the CUDA EP computes on ``stream`` when non-zero)."""
        if provider == "CPUExecutionProvider":
            return self._cpu_session
        options: dict[str, str] = {"device_id": str(tdev.index or 0)}
        if stream:
            options.update(has_user_compute_stream="1", user_compute_stream=str(stream))
        with self._lock:
            return self.ort.InferenceSession(
                self.source, session_options(self.ort, self.intra_op), providers=[(provider, options)]
            )


class OnnxRunner:
    """Runs an :class:`OnnxProgram` on one device with I/O binding (see the module doc)."""

    def __init__(self, program: OnnxProgram, tdev: torch.device | HostDevice, provider: str) -> None:
        self.program, self.tdev, self.provider = program, tdev, provider
        self._sessions: dict[int, Any] = {}
        self._spare: torch.Tensor | None = None  # see _address
        self._checked: dict[tuple[Any, ...], tuple[str, ...]] = {}
        # None on the CPU: ORT's Python wrapper looks up "gpu_graph_id" in given run options, and a
        # missing entry costs a C++ exception, ~0.1 ms per run
        self._run_options: Any = None
        if tdev.type == "cuda":  # stay asynchronous on the queue's stream
            self._run_options = program.ort.RunOptions()
            self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self.gathered: tuple[str, ...] = ()

    @property
    def stream_note(self) -> str:
        if self.tdev.type == "cuda":
            return "CUDA EP on the queue's stream (user_compute_stream, a session per stream)"
        return "CPU EP"

    # ------------------------------------------------------------------ checks
    def check(
        self, inputs: Sequence[Block], outputs: Sequence[Block], input_dtype: torch.dtype | None, cast: bool = False
    ) -> tuple[str, ...]:
        """Check the blocks against the model's declared inputs and outputs (count, dtype, dims;
        ``cast``: output dtypes are converted, not checked); returns the input blocks that are
        gathered into row-major tensors. Cached per geometry less the batch axis
        (per-candidate collections change their size every event)."""
        key = (
            tuple((b.name, b.dtype, b.shape[1:], row_major(b)) for b in inputs),
            tuple((b.name, b.dtype, b.shape[1:]) for b in outputs),
            input_dtype,
            cast,
        )
        found = self._checked.get(key)
        if found is None:
            found = self._checked[key] = self._check(inputs, outputs, input_dtype, cast)
        self.gathered = found
        return found

    def _check(
        self, inputs: Sequence[Block], outputs: Sequence[Block], input_dtype: torch.dtype | None, cast: bool
    ) -> tuple[str, ...]:
        prog = self.program
        name = os.path.basename(prog.path)
        if len(inputs) != len(prog.inputs):
            raise ArgumentError(
                f"{name} takes {len(prog.inputs)} input(s) {prog.inputs}; the input blocks are "
                f"{len(inputs)}: {[f'{b.name} {b.dtype}{list(b.shape)}' for b in inputs]}"
            )
        for decl, b in zip(prog.inputs, inputs):
            dtype = b.dtype if input_dtype is None else _numpy_dtype(input_dtype)
            if decl.dtype != dtype:
                raise ArgumentTypeError(
                    f"{name}: input {decl} gets block {b.name!r} of dtype {dtype}; convert the "
                    f"columns or pass ModelMetadata(..., input_dtype={decl.dtype})"
                )
            if not decl.fits(b.shape):
                raise ArgumentError(
                    f"{name}: input {decl} gets block {b.name!r} of shape {list(b.shape)} (batch axis first)"
                )
        mapping = self.output_blocks(outputs)
        for decl, b in mapping:
            if decl.dtype is not None and decl.dtype != b.dtype and not cast:
                raise ArgumentTypeError(
                    f"{name}: output {decl} goes to block {b.name!r} of dtype {b.dtype}; "
                    "pass ModelMetadata(..., cast_outputs=True) to convert; nothing was written"
                )
            if not (decl.fits(b.shape) or decl.fits(b.shape[:1]) and b.shape[1:] == (1,)):
                raise ArgumentError(
                    f"{name}: output {decl} does not fit block {b.name!r} "
                    f"[{', '.join(b.columns)}] of shape {list(b.shape)}; nothing was written"
                )
        return tuple(b.name for b in inputs if not row_major(b))

    def output_blocks(self, outputs: Sequence[Block]) -> list[tuple[Decl, Block]]:
        """The model's outputs paired with blocks: by name when they share their names, else in order."""
        decls = self.program.outputs
        by_name = {b.name: b for b in outputs}
        if len(decls) != len(outputs):
            raise ArgumentError(
                f"{os.path.basename(self.program.path)} returns {len(decls)} output(s) {decls}; "
                f"the output blocks are {len(outputs)}: {list(by_name)}; nothing was written"
            )
        if {d.name for d in decls} == set(by_name):
            return [(d, by_name[d.name]) for d in decls]
        return list(zip(decls, outputs))

    # ------------------------------------------------------------------ running
    def current_session(self) -> Any:
        """The ORT session of this runner's device (on cuda, of the current stream; made on first use)."""
        stream = 0
        if self.tdev.type == "cuda":
            import torch

            stream = torch.cuda.current_stream(self.tdev).cuda_stream
        session = self._sessions.get(stream)
        if session is None:
            session = self._sessions[stream] = self.program.session(self.tdev, self.provider, stream)
        return session

    def __call__(
        self, outputs: Sequence[Block], rows: int | None, *tensors: torch.Tensor, memo: dict[str, Any] | None = None
    ) -> dict[str, torch.Tensor]:
        """Run on row-major ``tensors`` (bound in place); ``{output block: tensor}`` of ``rows``
        items on the batch axis (None: each block's own).

        ``memo``: a dict the caller keeps between runs and holds exclusively while it uses the
        results (a prepared pass, under its lock): the I/O binding and the output tensors are
        kept there and reused while the inputs are the same memory, so a repeated run binds nothing."""
        session = self.current_session()
        if memo is not None:
            # the output blocks too (a tuple of immutable Blocks, one per geometry: compared by
            # identity first): the same inputs written into other blocks get their own outputs
            key = (id(session), rows, tuple((t.data_ptr(), t.shape, t.dtype) for t in tensors), tuple(outputs))
            kept = memo.get("onnx")
            if kept is None or kept[0] != key:
                kept = memo["onnx"] = (key, *self._bind(session, outputs, rows, tensors))
            self._run(session, kept[1], outputs)
            return kept[2]
        binding, results = self._bind(session, outputs, rows, tensors)
        self._run(session, binding, outputs)
        return results

    def _bind(
        self, session: Any, outputs: Sequence[Block], rows: int | None, tensors: Sequence[torch.Tensor]
    ) -> tuple[Any, dict[str, torch.Tensor]]:
        import torch

        binding = session.io_binding()
        dev_type, dev_id = ("cuda", self.tdev.index or 0) if self.tdev.type == "cuda" else ("cpu", 0)
        for decl, t in zip(self.program.inputs, tensors):
            binding.bind_input(decl.name, dev_type, dev_id, decl.dtype, tuple(t.shape), self._address(t))
        results: dict[str, torch.Tensor] = {}
        for decl, b in self.output_blocks(outputs):
            items = b.size if rows is None else rows
            shape = (items,) + b.shape[1:]
            if len(decl.dims) == 1 and b.shape[1:] == (1,):
                shape = (items,)
            dtype = decl.dtype if decl.dtype is not None else b.dtype
            t = torch.empty(shape, dtype=_torch_dtype(dtype), device=self.tdev)
            binding.bind_output(decl.name, dev_type, dev_id, dtype, shape, self._address(t))
            results[b.name] = t
        return binding, results

    def _address(self, t: torch.Tensor) -> int:
        """``t``'s data pointer; for an empty tensor (zero rows: an event with no candidates), whose
        pointer is null and which ONNX Runtime refuses, a one-element placeholder's (kept by the
        runner; nothing is read or written there)."""
        ptr = t.data_ptr()
        if ptr:
            return ptr
        if self._spare is None:
            import torch

            self._spare = torch.empty(1, dtype=torch.float64, device=self.tdev)
        return self._spare.data_ptr()

    def _run(self, session: Any, binding: Any, outputs: Sequence[Block]) -> None:
        try:
            session.run_with_iobinding(binding, self._run_options)
        except Exception as exc:  # noqa: BLE001 - ORT's own exception types
            text = " ".join(str(exc).split())
            raise ArgumentError(
                f"{os.path.basename(self.program.path)} failed on these blocks "
                f"(outputs {[b.name for b in outputs]}): {text}; nothing was written"
            ) from None

    def run_tensors(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """The model on plain tensors, one per declared input in order (``serve`` calls it this
        way): inputs bound in place when row-major (else made so), outputs allocated by ORT and
        returned as CPU tensors in the model's output order. A clear error for a wrong count or
        dtype."""
        import torch

        self._count(len(tensors))
        bound = [t.to(self.tdev).contiguous() for t in tensors]  # kept alive until the run returns
        inputs = [(_numpy_dtype(t.dtype), tuple(t.shape), t.data_ptr()) for t in bound]
        return [torch.from_numpy(a) for a in self._run_plain(inputs)]

    def run_arrays(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """:meth:`run_tensors` on numpy arrays on the CPU (a runner of :data:`HOST` or a CPU
        device): the same checks, bindings and errors, no torch; numpy arrays out."""
        if self.tdev.type != "cpu":
            raise ArgumentError(f"run_arrays runs on the CPU; this runner runs on {self.tdev.type!r}: use run_tensors")
        self._count(len(arrays))
        bound = [np.asarray(a, order="C") for a in arrays]  # (0-d stays 0-d); kept alive until the run returns
        return self._run_plain([(a.dtype, tuple(a.shape), a.ctypes.data) for a in bound])

    def _count(self, given: int) -> None:
        prog = self.program
        if given != len(prog.inputs):
            name = os.path.basename(prog.path)
            raise ArgumentError(f"{name} takes {len(prog.inputs)} input(s) {prog.inputs}, got {given}")

    def _run_plain(self, inputs: Sequence[tuple[np.dtype, tuple[int, ...], int]]) -> list[np.ndarray]:
        """Bind ``(dtype, shape, address)`` per declared input, run, and return the outputs ORT
        allocated, copied to host arrays in the model's output order."""
        prog = self.program
        name = os.path.basename(prog.path)
        session = self.current_session()
        binding = session.io_binding()
        dev_type, dev_id = ("cuda", self.tdev.index or 0) if self.tdev.type == "cuda" else ("cpu", 0)
        for decl, (dtype, shape, address) in zip(prog.inputs, inputs):
            if decl.dtype != dtype:
                raise ArgumentTypeError(f"{name}: input {decl} gets a tensor of dtype {dtype}")
            binding.bind_input(decl.name, dev_type, dev_id, decl.dtype, shape, address)
        for decl in prog.outputs:
            binding.bind_output(decl.name, dev_type, dev_id)
        try:
            session.run_with_iobinding(binding, self._run_options)
        except Exception as exc:  # noqa: BLE001 - ORT's own exception types
            raise ArgumentError(
                f"{name} failed on inputs of shape {[list(shape) for _, shape, _ in inputs]}: "
                f"{' '.join(str(exc).split())}"
            ) from None
        return list(binding.copy_outputs_to_cpu())


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    from ._tensors import torch_dtype

    return torch_dtype(dtype)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    import torch

    return np.dtype(torch.empty(0, dtype=dtype).numpy().dtype)
