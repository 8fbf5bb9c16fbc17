"""torch on the cupy stand-in: what replaces torch's CUDA device when ``cuda``/``rocm`` are the
stand-in (fake_cupy.py) and this torch has no CUDA.

The inference layer runs a model on a CUDA/ROCm queue as torch CUDA work on the queue's stream
(``torch.cuda.ExternalStream``) over tensors that alias the buffers (``__cuda_array_interface__``
on CUDA, DLPack on HIP). Here the stand-in's device memory is host memory, so:

- ``torch_device`` gives ``cpu``, and the tensors made through the real code path (cupy array
  -> CAI / DLPack -> tensor) are CPU tensors over the same bytes, zero copies (``as_tensor`` of
  a stand-in array goes through numpy: this torch cannot initialise CUDA for its CAI);
- ``queue_stream(queue)`` is :class:`TorchOnStream`: torch's work runs on the host, so on entry
  it waits for the stream's earlier work (the reads torch's kernels would make behind it) and
  records which stream torch would have used; on exit, :attr:`TorchOnStream.device_work`
  (when set) is enqueued on that stream, standing for torch's kernels still running on the GPU
  after the host returned;
- torch's streams are named by their handles: the queue's inside such a block, the host's
  default stream (0) outside. Torch work is synchronous on the host, so a stream's wait for
  another's event and ``record_stream`` only record what a GPU would be asked
  (:attr:`TorchOnStream.stream_waits`, :attr:`TorchOnStream.kept_for`).

Everything else (``Model.forward``, ``run_on_queue``, the tensor path, the queue) is the real code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


class TorchOnStream:
    """The stand-in for ``inference._torch_queue.queue_stream`` (module docstring)."""

    def __init__(self) -> None:
        self.streams: list[int] = []  # the native stream of each block entered, in order
        self.active = 0  # blocks entered and not left (torch work "on the stream" now)
        self.device_work: Callable[[], None] | None = None
        self.current: list[int] = []  # the native streams of the blocks entered and not left
        self.stream_waits: list[tuple[int, int]] = []  # (waiting stream, stream its event was recorded on)
        self.kept_for: list[tuple[Any, int]] = []  # (tensor, stream) of each record_stream

    def keep_for_stream(self, consumer: Any, tensors: Any) -> None:
        """``inference._torch_queue.keep_for_stream`` on the stand-in: recorded."""
        self.kept_for.extend((t, consumer.cuda_stream) for t in tensors)

    @contextlib.contextmanager
    def __call__(self, queue: Any) -> Iterator[None]:
        from inference._torch_queue import memory_path

        if queue is None or memory_path(queue.device) != "cuda":
            yield
            return
        impl = queue.impl
        stream = impl.stream
        stream.synchronize()  # torch on the host reads what the stream's earlier work wrote
        self.streams.append(int(queue.native_handle))
        self.current.append(int(queue.native_handle))
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            self.current.pop()
            work = self.device_work
            if work is not None:
                stream.ex.submit(work)  # torch's kernels, still running after the host returned


class _TorchOnTheHost:
    """``torch`` as ``inference._tensors`` sees it: ``as_tensor`` of a stand-in device array is
    a CPU tensor over the same bytes (a CUDA torch would give a CUDA tensor over them through
    ``__cuda_array_interface__``; this one cannot initialise CUDA). Everything else is torch."""

    def __init__(self, torch: Any, recorder: TorchOnStream) -> None:
        self._torch, self._recorder = torch, recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def as_tensor(self, data: Any, dtype: Any = None, device: Any = None) -> Any:
        from backends.emulator.fake_cupy import FakeDeviceArray

        if isinstance(data, FakeDeviceArray):
            tensor = self._torch.from_numpy(np.asarray(data).view(np.ndarray))
            return tensor if dtype is None else tensor.to(dtype)
        return self._torch.as_tensor(data, dtype=dtype, device=device)

    @property
    def cuda(self) -> Any:
        """``torch.cuda`` whose current stream is the host's: torch work here is synchronous."""
        return _HostCuda(self._torch.cuda, self._recorder)


class _HostCuda:
    def __init__(self, cuda: Any, recorder: TorchOnStream) -> None:
        self._cuda, self._recorder = cuda, recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cuda, name)

    def current_stream(self, device: Any = None) -> Any:
        current = self._recorder.current
        return _HostStream(current[-1] if current else 0, self._recorder)

    def Event(self, *args: Any, **kwargs: Any) -> Any:
        return _HostEvent()


class _HostStream:
    """A torch stream by its native handle (module docstring)."""

    def __init__(self, handle: int, recorder: TorchOnStream) -> None:
        self.cuda_stream, self._recorder = handle, recorder

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _HostStream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(self.cuda_stream)

    def synchronize(self) -> None:
        """Nothing to wait for: torch on the host finished each operation as it returned."""

    def wait_event(self, event: _HostEvent) -> None:
        self._recorder.stream_waits.append((self.cuda_stream, event.stream))


class _HostEvent:
    stream: int | None = None

    def record(self, stream: _HostStream) -> None:
        self.stream = stream.cuda_stream


def patch_torch(monkeypatch: Any) -> TorchOnStream:
    """Route the inference layer's torch CUDA device and stream onto the stand-in (module
    docstring) with ``monkeypatch``; returns the stream recorder."""
    import torch

    from inference import _metadata, _model, _tensors, _torch_queue

    def torch_device(device: Any) -> Any:
        return torch.device("cpu")

    recorder = TorchOnStream()
    monkeypatch.setattr(_tensors, "torch", _TorchOnTheHost(torch, recorder))
    monkeypatch.setattr(_metadata, "torch", _TorchOnTheHost(torch, recorder))
    monkeypatch.setattr(_metadata, "keep_for_stream", recorder.keep_for_stream, raising=False)
    for module in (_tensors, _model, _torch_queue, _metadata):
        if hasattr(module, "torch_device"):
            monkeypatch.setattr(module, "torch_device", torch_device)
        if hasattr(module, "queue_stream"):
            monkeypatch.setattr(module, "queue_stream", recorder)
    return recorder
