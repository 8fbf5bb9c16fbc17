"""The I/O binding of ONNX Runtime's whole-collection passes on host memory (:class:`HostBinding`,
one per block geometry): what a pass binds in place, gathers, or copies back after the run."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from portable import ArgumentError

from ._block import Block
from ._onnx import Decl, row_major

if TYPE_CHECKING:
    from ._onnx import OnnxRunner


def host_binding(runner: OnnxRunner, inputs: Sequence[Block], outputs: Sequence[Block]) -> HostBinding | None:
    """The reusable binding of ``runner``'s whole-collection passes over these blocks on the CPU
    EP, or None where the general path is needed (another device, no rows, converted dtypes)."""
    if runner.tdev.type != "cpu" or not inputs:
        return None
    pairs = runner.output_blocks(outputs)
    if any(b.size == 0 or b.kind == "scalar" for b in outputs) or any(b.size == 0 for b in inputs):
        return None
    if any(d.dtype != b.dtype for d, b in zip(runner.program.inputs, inputs)) or any(
        d.dtype != b.dtype for d, b in pairs
    ):
        return None
    return HostBinding(runner, runner.current_session(), inputs, outputs, pairs)


class HostBinding:
    """The I/O binding of the whole-collection passes of one block geometry on the CPU EP, made
    once per geometry (``PassSpec.host``) and shared by every metadata of it, so metadata built
    anew per event binds nothing: blocks that are not row-major are gathered into arrays it owns,
    row-major ones are bound in place (rebound when a pass brings other memory: an address
    comparison per pass), outputs go to arrays it owns, shaped as the blocks (ORT refuses a result
    of another shape), and are copied into the blocks after the run, so a failed run writes
    nothing. One pass at a time (``lock``; a pass that finds it taken takes the general path).

    Per-event sizes are copied with numpy's ``copyto`` (its call costs a third of torch's
    ``copy_`` at ``[4, 16]``), larger blocks with :func:`inference._gather.gather` and torch's
    ``copy_``; ORT is called through its native session (the Python wrapper's checks are for
    WebGPU graph capture), with run options made once."""

    __slots__ = (
        "runner",
        "lock",
        "binding",
        "call",
        "native",
        "options",
        "gathered",
        "in_place",
        "last",
        "results",
        "in_blocks",
        "out_blocks",
        "one",
    )

    def __init__(
        self,
        runner: OnnxRunner,
        session: Any,
        inputs: Sequence[Block],
        outputs: Sequence[Block],
        pairs: Sequence[tuple[Decl, Block]],
    ) -> None:
        ort = runner.program.ort
        self.runner, self.lock = runner, threading.Lock()
        self.in_blocks, self.out_blocks = tuple(inputs), tuple(outputs)
        self.binding = binding = session.io_binding()
        native, native_binding = getattr(session, "_sess", None), getattr(binding, "_iobinding", None)
        if native is not None and native_binding is not None and hasattr(native, "run_with_iobinding"):
            self.call, self.native, self.options = native.run_with_iobinding, native_binding, ort.RunOptions()
        else:  # another ORT's wrapper: its public call
            self.call, self.native, self.options = session.run_with_iobinding, binding, None
        self.gathered: list[tuple[int, np.ndarray]] = []  # (input index, row-major array bound once)
        self.in_place: list[tuple[int, str, np.dtype, tuple[int, ...]]] = []  # bound per pass, by address
        for i, (decl, b) in enumerate(zip(runner.program.inputs, inputs)):
            if row_major(b):
                self.in_place.append((i, decl.name, b.dtype, tuple(b.shape)))
            else:
                buf = np.empty(b.shape, dtype=b.dtype)
                binding.bind_input(decl.name, "cpu", 0, b.dtype, tuple(b.shape), buf.ctypes.data)
                self.gathered.append((i, buf))
        self.last = [0] * len(self.in_place)  # the addresses the in-place inputs are bound to
        by_block = {}
        for decl, b in pairs:
            shape = (b.size,) if len(decl.dims) == 1 and b.shape[1:] == (1,) else tuple(b.shape)
            res = np.empty(shape, dtype=b.dtype)
            binding.bind_output(decl.name, "cpu", 0, b.dtype, shape, res.ctypes.data)
            by_block[b.name] = res.reshape(b.shape)
        #: the arrays ORT writes, in block order, viewed with the blocks' shapes
        self.results: list[np.ndarray] = [by_block[b.name] for b in outputs]
        self.one = (
            len(self.gathered) == 1
            and not self.in_place
            and len(self.results) == 1
            and max(self.gathered[0][1].nbytes, self.results[0].nbytes) <= SMALL_COPY_BYTES
        )

    def bind(
        self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], general: Callable[[], None]
    ) -> Callable[[], None]:
        """The pass over one metadata's blocks (``ins``/``outs``: numpy views of the input and
        output blocks, in block order): a callable that gathers, runs and writes; ``general``
        runs the pass without this binding (taken when another thread holds it)."""
        lock, call, native, options, fail = self.lock, self.call, self.native, self.options, self._failed
        if self.one:  # one gathered input, one output, per-event sizes: the usual case, no loops
            (i, buf), res, dst = self.gathered[0], self.results[0], outs[0]
            src, copyto = ins[i], np.copyto

            def run_one() -> None:
                if not lock.acquire(False):
                    general()
                    return
                try:
                    copyto(buf, src)
                    try:
                        call(native, options)
                    except Exception as exc:  # noqa: BLE001 - ORT's own exception types
                        fail(exc)
                    copyto(dst, res)
                finally:
                    lock.release()

            return run_one
        gathers = tuple(_copier(buf, ins[i], True) for i, buf in self.gathered)
        writes = tuple(_copier(outs[k], res, False) for k, res in enumerate(self.results))
        in_place = tuple(
            (j, name, dtype, shape, ins[i], ins[i].ctypes.data)
            for j, (i, name, dtype, shape) in enumerate(self.in_place)
        )
        last, binding = self.last, self.binding

        def run() -> None:
            if not lock.acquire(False):
                general()
                return
            try:
                for copy, dst, src in gathers:
                    copy(dst, src)
                for j, name, dtype, shape, _, ptr in in_place:  # the view (_) keeps the memory
                    if last[j] != ptr:
                        binding.bind_input(name, "cpu", 0, dtype, shape, ptr)
                        last[j] = ptr
                try:
                    call(native, options)
                except Exception as exc:  # noqa: BLE001 - ORT's own exception types
                    fail(exc)
                for copy, dst, src in writes:
                    copy(dst, src)
            finally:
                lock.release()

        return run

    def _failed(self, exc: Exception) -> None:
        text = " ".join(str(exc).split())
        raise ArgumentError(
            f"{os.path.basename(self.runner.program.path)} failed on these blocks "
            f"(outputs {[b.name for b in self.out_blocks]}): {text}; nothing was written"
        ) from None


#: blocks up to this many bytes are copied with numpy's ``copyto`` (see :class:`HostBinding`)
SMALL_COPY_BYTES = 64 << 10


def _copier(dst: np.ndarray, src: np.ndarray, gather_in: bool) -> tuple[Callable[[Any, Any], Any], Any, Any]:
    """``(copy, dst, src)`` with ``copy(dst, src)`` the cheapest copy for the size: numpy's
    ``copyto`` for small blocks; the compiled gather (inputs) or torch's ``copy_`` (outputs)."""
    if dst.nbytes <= SMALL_COPY_BYTES:
        return np.copyto, dst, src
    import torch

    if gather_in:
        from ._gather import gather

        return (lambda d, s: gather(s, d)), torch.from_numpy(dst), torch.from_numpy(src)
    return torch.Tensor.copy_, torch.from_numpy(dst), torch.from_numpy(src)
