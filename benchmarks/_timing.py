"""Timing of the benchmark scripts: repeated calls after warm-up (:func:`measure`), contenders
timed round-robin in a shuffled order so that load hits them alike (:func:`interleaved`,
:func:`paired_ratio`), and client threads in a closed loop (:func:`closed_loop`). The scripts
reach these through ``_common`` (``common.measure``)."""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    """Wall-clock times (seconds) of repeated calls, after warm-up."""

    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.times) if len(self.times) > 1 else 0.0

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100), linear interpolation."""
        s = sorted(self.times)
        pos = (len(s) - 1) * q / 100.0
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    def as_dict(self, prefix: str = "time", scale: float = 1e3, unit: str = "ms") -> dict[str, float | int]:
        """``{prefix_median_ms, prefix_mean_ms, prefix_min_ms, prefix_p90_ms, prefix_stdev_ms, repeats}``."""
        return {
            f"{prefix}_median_{unit}": self.median * scale,
            f"{prefix}_mean_{unit}": self.mean * scale,
            f"{prefix}_min_{unit}": self.min * scale,
            f"{prefix}_p90_{unit}": self.percentile(90) * scale,
            f"{prefix}_stdev_{unit}": self.stdev * scale,
            "repeats": len(self.times),
        }


def measure(
    fn: Callable[[], Any],
    *,
    warmup: int = 1,
    repeats: int = 5,
    min_repeats: int = 1,
    budget_s: float | None = None,
    sync: Callable[[], Any] | None = None,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then time up to ``repeats`` calls (each followed by
    ``sync`` when given, e.g. a queue or stream wait); with ``budget_s`` stop early once that
    much time was spent and at least ``min_repeats`` calls were timed."""
    if repeats < 1 or min_repeats < 1:
        raise ValueError(f"repeats and min_repeats must be >= 1, got {repeats} and {min_repeats}")
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
    timing = Timing()
    spent = 0.0
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        dt = time.perf_counter() - t0
        timing.times.append(dt)
        spent += dt
        if budget_s is not None and i + 1 >= min_repeats and spent >= budget_s:
            break
    return timing


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    rounds: int,
    *,
    calls: int = 1,
    warmup: int = 1,
    min_rounds: int = 1,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, Timing], dict[str, str]]:
    """Time every function of ``fns`` round-robin, each round in a new order (a seeded shuffle),
    so that load from other processes hits all of them alike, and so does what a call leaves
    behind for the next one (evicted caches, a core clocked down after wide vector code): in a
    rotated order every function always followed the same one, which biased some by 10-30%
    (AOTInductor after ONNX Runtime, measured). ``warmup`` untimed calls each, then up to
    ``rounds`` rounds of ``calls`` calls per function (a sample is the time per call); with
    ``budget_s`` stop once that much time per function was spent and ``min_rounds`` were done.
    A function that raises is dropped from the rotation: ``({name: Timing}, {name: error})``.
    ``clock``: what a round is timed with (``time.thread_time``: the calling thread's CPU time,
    for work that runs on it alone, immune to other processes taking the core)."""
    if rounds < 1 or min_rounds < 1 or calls < 1:
        raise ValueError(f"rounds, min_rounds and calls must be >= 1, got {rounds}, {min_rounds}, {calls}")
    errors: dict[str, str] = {}
    live = dict(fns)

    def call(name: str, fn: Callable[[], Any], times: int) -> float | None:
        t0 = clock()
        try:
            for _ in range(times):
                fn()
        except Exception as exc:  # one failing contender must not lose the others
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
            live.pop(name, None)
            return None
        return clock() - t0

    for _ in range(warmup):
        for name, fn in list(live.items()):
            call(name, fn, 1)
    timings = {name: Timing() for name in live}
    spent = 0.0
    order = random.Random(0x5EED)
    for r in range(rounds):
        names = list(live)
        if not names:
            break
        order.shuffle(names)
        for name in names:
            dt = call(name, live[name], calls)
            if dt is not None:
                timings[name].times.append(dt / calls)
                spent += dt
        if budget_s is not None and r + 1 >= min_rounds and spent >= budget_s * len(names):
            break
    return {k: t for k, t in timings.items() if k in live}, errors


def closed_loop(n: int, seconds: float, make_step: Callable[[int], Callable[[], int]]) -> float:
    """Events per second of ``n`` client threads for ``seconds``: thread ``i`` makes its step
    (``make_step(i)``, before the clock starts) and calls it, each call returning the events it
    did, until the time is up; a client's error is raised here."""
    counts = [0] * n
    errors: list[BaseException] = []
    start, stop = threading.Barrier(n + 1), threading.Event()

    def loop(i: int) -> None:
        try:
            step = make_step(i)
        except BaseException as exc:
            errors.append(exc)
            start.abort()
            return
        start.wait()
        try:
            while not stop.is_set():
                counts[i] += step()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        raise errors[0] from None
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def paired_ratio(numerator: Timing, denominator: Timing) -> float | None:
    """The median over rounds of ``numerator / denominator`` for two contenders of one
    :func:`interleaved` run (each round's pair saw the same load)."""
    pairs = [a / b for a, b in zip(numerator.times, denominator.times) if b > 0]
    return statistics.median(pairs) if pairs else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator
