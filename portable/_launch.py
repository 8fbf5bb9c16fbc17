"""Kernel launches: the checks before a kernel is enqueued, and the hand-over to the backend.

``pk.exec`` and ``Queue.enqueue`` (portable._queue, one layer up) both launch through here.
"""

from __future__ import annotations

from typing import Any

from ._errors import WorkDivError
from ._graph import active as _capturing, record_launch
from ._handoff import note_queue
from ._registry import get_backend
from ._workdiv import WorkDiv


def launch(queue: Any, workdiv: WorkDiv, kernel: Any, args: tuple) -> None:
    """Enqueue ``kernel(acc, *args)`` over ``workdiv`` on ``queue`` (a checked pk.Queue).

    The work division and the arguments are checked before anything is enqueued.
    """
    if not isinstance(workdiv, WorkDiv):
        raise WorkDivError(f"exec needs a pk.WorkDiv second, got {type(workdiv).__name__}")
    if not hasattr(kernel, "__alpyka_kernel__"):
        raise TypeError(f"{getattr(kernel, '__name__', kernel)!r} is not a kernel; decorate it with @pk.kernel")
    dev = queue.device
    seen = _checked.get(id(workdiv))
    if seen is None or seen[0] is not workdiv or seen[1] is not dev:  # checked once per device
        workdiv.check(dev)
        if len(_checked) > 1024:
            _checked.clear()
        _checked[id(workdiv)] = (workdiv, dev)  # holds the (immutable) WorkDiv: its id stays its own
    if _capturing and record_launch(queue, workdiv, kernel, args):  # inside pk.capture (portable/_graph.py)
        return
    get_backend(dev.backend_name).launch(queue, workdiv, kernel, args)
    note_queue(queue, args)  # interchange consumers of these buffers wait for this queue


#: id(work division) -> (work division, the device it last passed ``WorkDiv.check`` for)
_checked: dict[int, tuple] = {}
