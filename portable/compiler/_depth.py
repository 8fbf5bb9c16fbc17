"""Room for deep expressions: a 1000-term sum is a 1000-deep tree that the front-end, the IR
walks and the emitters recurse through (about four Python frames a level), past CPython's default
limit of 1000 frames. :func:`deep_recursion` raises the limit while they run and puts it back
after the last of them (kernels may compile in several threads at once)."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

#: frames allowed while compiling a kernel: room for expressions of some 4000 terms (CPython's own
#: compiler refuses a kernel's source well before: about 3000 terms of ``+``)
FRAMES = 20_000

_lock = threading.Lock()
_users = 0
_saved = 0

F = TypeVar("F", bound=Callable[..., Any])


def deep_recursion(fn: F) -> F:
    """Decorate ``fn`` to run with the recursion limit at least :data:`FRAMES`."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        global _users, _saved
        with _lock:
            if _users == 0:
                _saved = sys.getrecursionlimit()
                sys.setrecursionlimit(max(_saved, FRAMES))
            _users += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                _users -= 1
                if _users == 0:
                    sys.setrecursionlimit(_saved)

    return run  # type: ignore[return-value]
