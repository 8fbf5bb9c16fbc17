"""The CPU backends' main-thread slices (backends/_host_slices.py): every block runs once, in
order; a slow launch is cut into slices about SLICE_S long, a fast one stays one call after its
first slice; off the main thread nothing is cut. Ctrl-C between slices: tests/backends/test_ctrl_c.py."""

import threading
import time

from backends import _host_slices as hs


def _recorder(per_block_s: float):
    calls = []

    def fn(lo, hi, *call):
        calls.append((lo, hi, call))
        if per_block_s:
            time.sleep(per_block_s * (hi - lo))

    return fn, calls


def _covered(calls, n):
    assert [c[0] for c in calls] == [0] + [c[1] for c in calls[:-1]] and calls[-1][1] == n
    assert all(c[2] == ("g", 7) for c in calls)


def test_a_fast_launch_is_its_first_slice_and_one_call():
    fn, calls = _recorder(0.0)
    hs.run_blocks(fn, 100_000, ("g", 7))
    _covered(calls, 100_000)
    assert [c[:2] for c in calls] == [(0, hs.FIRST), (hs.FIRST, 100_000)]


def test_a_slow_launch_runs_in_slices_of_about_slice_s():
    fn, calls = _recorder(0.002)  # 2 ms a block: about 25 blocks a slice
    hs.run_blocks(fn, 200, ("g", 7))
    _covered(calls, 200)
    assert len(calls) >= 4
    assert all(hi - lo <= 2 * hs.SLICE_S / 0.002 for lo, hi, _ in calls[1:])


def test_few_blocks_or_another_thread_are_one_call():
    fn, calls = _recorder(0.0)
    hs.run_blocks(fn, hs.FIRST, ("g", 7))
    assert [c[:2] for c in calls] == [(0, hs.FIRST)]
    fn, calls = _recorder(0.002)
    t = threading.Thread(target=hs.run_blocks, args=(fn, 200, ("g", 7)))
    t.start()
    t.join()
    assert [c[:2] for c in calls] == [(0, 200)]
