"""Where a cuda launch's time goes on a real GPU: ``pk.exec`` of a tiny kernel beside the same
RawKernel called by hand (in the queue's stream, and with the stream entered once), then a
cProfile of 20,000 launches. Run from the repository root: ``PYTHONPATH=. python3 <this file>``."""

import cProfile
import pstats
import sys
import time

import numpy as np

import portable as pk
from benchmarks.bench_backends import tiny


def best_us(fn, sync, n=5000, repeats=15):
    """Best of ``repeats`` per-call times (us) of ``n`` calls followed by ``sync()``."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / n)
    return 1e6 * best


def main():
    dev = pk.device("cuda")
    q = pk.Queue(dev)
    out = pk.Buffer(dev, 1, np.float32, queue=q)
    wd, v = pk.WorkDiv(1, 1, 1), np.float32(1.5)
    pk.exec(q, wd, tiny, out, v)
    q.wait()
    plan = next(p for k, p in dev.backend.plans(tiny).items() if k[0] == dev.memory_space)
    impl, fn = q._impl, plan.function
    vals = tuple(plan.pack((out, v), wd, 0))

    def raw():
        with impl.stream:
            fn((1,), (1,), vals)

    print(dev, file=sys.stderr)
    print(f"{'pk.exec':40s} {best_us(lambda: pk.exec(q, wd, tiny, out, v), q.wait):7.2f} us (best of 15)")
    print(f"{'raw RawKernel in stream':40s} {best_us(raw, impl.stream.synchronize):7.2f} us (best of 15)")
    with impl.stream:
        bare = best_us(lambda: fn((1,), (1,), vals), impl.stream.synchronize)
    print(f"{'raw RawKernel, stream entered once':40s} {bare:7.2f} us (best of 15)")
    print(f"{'scope enter/exit':40s} {best_us(lambda: impl.scope.__enter__(), lambda: None):7.2f} us")
    print(f"{'prune (event query)':40s} {best_us(impl._retained.prune, lambda: None):7.2f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20000):
        pk.exec(q, wd, tiny, out, v)
    q.wait()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
