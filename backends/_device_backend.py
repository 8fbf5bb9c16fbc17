"""What the device backends (cuda and rocm over cupy, opencl) share: their kernel section.

A device backend's kernels are generated C built for the device: its launch module
(``backends/_cupy_launch.py``, ``backends/_opencl_launch.py``) has ``launch``, ``launcher`` and
``make_plan`` over the shared steps of ``backends/_gpu_launch.py``, and ``pk.capture`` records
with its recorder (``backends/_graph_replay.py``). The launch module is imported with the first
launch (the kernel emitter loads then, not at ``import portable``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from portable.spi import Backend, Device, KernelHandle


class DeviceBackend(Backend):
    """The kernel section of a device backend; a subclass names its launch module and recorder."""

    kind = "gpu"

    def launch_module(self) -> ModuleType:
        """The module with this backend's ``launch``, ``launcher`` and ``make_plan``."""
        raise NotImplementedError

    def recorder_class(self) -> type:
        """The class ``pk.capture`` records with on this backend's queues."""
        raise NotImplementedError

    def launch(self, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> None:
        launch = self.launch_module().launch  # the kernel emitter loads with the first launch
        self.launch = launch  # type: ignore[method-assign] - later launches call it directly
        launch(queue, workdiv, kernel, args)

    def launcher(self, queue: Any, workdiv: Any, kernel: KernelHandle, args: tuple) -> Any:
        """The prepared launch for arguments of the types of ``args`` (portable/_launch.py's
        fast path; the launch module's ``launcher``)."""
        return self.launch_module().launcher(queue, workdiv, kernel, args)

    def recorder(self, queue: Any) -> Any:
        """What ``pk.capture(queue)`` records with (backends/_graph_replay.py)."""
        return self.recorder_class()(self, queue)

    def kernel_thread_limit(self, device: Device, workdiv: Any, kernel: KernelHandle, args: tuple) -> int:
        """The kernel's own thread limit, asked of the compiled kernel (the plan a launch like
        ``workdiv`` with ``args`` uses, built and cached now)."""
        from portable import Queue

        from ._gpu_launch import prepare_launch

        plan = prepare_launch(Queue(device, blocking=True), workdiv, kernel, args, self.launch_module().make_plan)[0]
        return min(plan.max_threads, device.limits.max_threads_per_block)
