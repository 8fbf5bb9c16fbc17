"""The long kernel of the stream hand-off checks, shared by
tests/inference/test_stream_handoffs.py (every backend, the cupy stand-in included) and
benchmarks/gpu_checks/stream_handoffs.py (a real GPU): a consumer that reads its output without
waiting for the queue sees zeros instead of ``expected(n)``.
"""

from __future__ import annotations

import numpy as np

import portable as pk


@pk.kernel
def slow_fill(acc, out, sink, reps, n):
    """``out[i] = 2 i + 1`` after a long dependent chain per element (stored in ``sink``, so kept)."""
    for i in acc.uniform_elements(n):
        v = 1.0
        for _ in range(reps):
            v = v * 1.0000001 + 1e-9
        sink[i] = v
        out[i] = 2.0 * i + 1.0


def launch_slow_fill(queue: pk.Queue, out: pk.Buffer, sink: pk.Buffer, reps: int, n: int) -> None:
    """Enqueue :func:`slow_fill` on ``n`` elements, ``reps`` multiply-adds each."""
    pk.exec(queue, pk.valid_workdiv(queue.device, n), slow_fill, out, sink, np.int64(reps), np.int64(n))


def expected(n: int) -> np.ndarray:
    """What :func:`slow_fill` writes to ``out[0:n]`` (float32)."""
    return (2.0 * np.arange(n) + 1.0).astype(np.float32)
