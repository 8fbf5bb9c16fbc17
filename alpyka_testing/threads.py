"""Running test work in other threads: exceptions reach the test, a hang fails it."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(work: Callable[[int], None], count: int, timeout: float = 120.0) -> None:
    """``work(t)`` in ``count`` threads at once; the first exception any raised is raised here,
    and a thread still running after ``timeout`` seconds fails the test."""
    errors: list[BaseException] = []

    def guarded(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:  # noqa: BLE001 - reported by the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=timeout)
    assert not any(th.is_alive() for th in threads), "a thread did not finish"
    if errors:
        raise errors[0]
