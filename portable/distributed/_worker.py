"""What runs on a Dask worker for ``pk.distributed.run``: the setup plugin and the chunk task.

Imported on the workers by reference (``portable.distributed._worker``), and on the client only when a
run starts: it imports ``distributed`` at the top.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from distributed import WorkerPlugin, get_worker

from portable._errors import NoSuchDevice, StateError
from portable.env import env_number


def pick_device(worker: Any, backend: str | None) -> Any:
    """The device this worker uses: ``ALPYKA_DEVICE`` (an index) if set; else, where the backend
    has several devices and the worker declares a ``GPU`` Dask resource, the worker's ordinal
    (its name, as LocalCluster and ``dask worker --name N`` give it) modulo the device count;
    else the first device."""
    import portable as pk

    name = backend or pk.default_backend()
    devs = pk.devices(name)
    index = 0
    if os.environ.get("ALPYKA_DEVICE", "").strip():
        index = env_number("ALPYKA_DEVICE", 0, int, minimum=0)
    elif len(devs) > 1 and worker.state.total_resources.get("GPU"):
        try:
            index = int(worker.name) % len(devs)
        except (TypeError, ValueError):
            index = 0
    if not 0 <= index < len(devs):
        raise NoSuchDevice(
            f"worker {worker.name}: device {index} of {name} requested, it has {len(devs)}; "
            f"set ALPYKA_DEVICE to 0..{len(devs) - 1} on the workers (or leave it unset)"
        )
    return devs[index]


#: what each setup built on this worker, by plugin name (a hash of the setup and the backend):
#: a later run with the same setup on the same cluster finds it here instead of running it again.
#: The :data:`KEEP` most recently used are kept (a state may hold models: not every one forever).
_STATES: collections.OrderedDict[str, tuple[Any, BaseException | None, int | None]] = collections.OrderedDict()
_STATES_LOCK = threading.Lock()
KEEP = 4


def _remember(name: str, kept: tuple[Any, BaseException | None, int | None]) -> None:
    with _STATES_LOCK:
        _STATES[name] = kept
        _STATES.move_to_end(name)
        while len(_STATES) > KEEP:
            _STATES.popitem(last=False)


def _recall(name: str) -> tuple[Any, BaseException | None, int | None] | None:
    with _STATES_LOCK:
        kept = _STATES.get(name)
        if kept is not None:
            _STATES.move_to_end(name)
        return kept


class DeviceSetup(WorkerPlugin):
    """Runs ``setup(device)`` once on every worker (also on workers that join or restart later)
    and keeps what it returns as the worker's state for ``process(state, chunk)``; the same
    setup registered again (a later run on the same cluster) reuses that state."""

    def __init__(self, name: str, setup: Callable[[Any], Any] | None, backend: str | None) -> None:
        self.name = name
        self._setup = setup
        self._backend = backend
        self.state: Any = None
        self.error: BaseException | None = None
        #: torch's intra-op thread count as ``setup`` left it (alpyka's Model sets its policy,
        #: ALPYKA_TORCH_THREADS, default 1), or None when torch was not imported
        self.torch_threads: int | None = None

    def setup(self, worker: Any) -> None:
        kept = _recall(self.name)
        if kept is not None and kept[1] is None:
            self.state, self.error, self.torch_threads = kept
            return
        try:
            device = pick_device(worker, self._backend)
            self.state = self._setup(device) if self._setup is not None else device
            self.torch_threads = _torch_threads()
        except BaseException as exc:  # noqa: BLE001 - reported with the first chunk this worker runs
            self.error = exc
        _remember(self.name, (self.state, self.error, self.torch_threads))

    def teardown(self, worker: Any) -> None:
        self.state = None  # the state itself stays in _STATES for the next run of this setup


def run_chunk(plugin_name: str, process: Callable[[Any, Any], Any], chunk: Any) -> Any:
    """One chunk on this worker: ``process(state, chunk)`` with the state its setup built."""
    worker = get_worker()
    plugin = worker.plugins.get(plugin_name)
    if plugin is None:
        # another run registering the same setup replaces the plugin (Dask removes, then adds):
        # its state is the same, kept here
        kept = _recall(plugin_name)
        if kept is None:
            raise StateError(
                f"worker {worker.name}: setup plugin {plugin_name} is not installed: run again, "
                "pk.distributed.run installs it on every worker of its client"
            )
        plugin = DeviceSetup(plugin_name, None, None)
        plugin.state, plugin.error, plugin.torch_threads = kept
    if plugin.error is not None:
        raise StateError(
            f"setup(device) failed on worker {worker.name}: {plugin.error!r}; fix the setup function "
            "(its error is the __cause__)"
        ) from plugin.error
    if plugin.torch_threads is not None:
        # torch's thread count is per OS thread once a thread has used torch: setup ran in another
        # thread than this task thread, which may still have the process default (one thread per
        # core, too many with several workers on the cores; measured 2 on 2 cores with 2 workers)
        torch = sys.modules["torch"]
        if torch.get_num_threads() != plugin.torch_threads:
            torch.set_num_threads(plugin.torch_threads)
    return process(plugin.state, chunk)


def _torch_threads() -> int | None:
    """torch's intra-op thread count in this thread, if torch is imported."""
    torch = sys.modules.get("torch")
    return None if torch is None else int(torch.get_num_threads())
