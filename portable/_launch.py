"""``pk.exec``: enqueue a kernel over a work division on a queue."""

from __future__ import annotations

from typing import Any

from ._errors import WorkDivError
from ._queue import Queue
from ._registry import get_backend
from ._workdiv import WorkDiv


def exec(queue: Queue, workdiv: WorkDiv, kernel: Any, *args: Any) -> None:  # noqa: A001 (alpaka's name)
    """Enqueue ``kernel(acc, *args)`` over ``workdiv`` on ``queue``.

    The work division and the arguments are checked before anything is enqueued.
    """
    if not isinstance(queue, Queue):
        raise TypeError(f"exec needs a pk.Queue first, got {type(queue).__name__}")
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
    get_backend(dev.backend_name).launch(queue, workdiv, kernel, args)


#: id(work division) -> (work division, the device it last passed ``WorkDiv.check`` for)
_checked: dict[int, tuple] = {}
