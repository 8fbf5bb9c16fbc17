"""alpaka's own warp unit tests (test/unit/warp: activemask, all, any, ballot, shfl), written for
alpyka, and in their style the warp functions alpaka's tests leave out (CUDA's match_any/match_all,
shfl's width argument): shared by tests/kernels/test_warps_alpaka.py (every backend, the emulated cuda and rocm
included) and benchmarks/gpu_check.py (a real GPU).

As in alpaka, a block is one warp (``warp_size`` threads, two blocks) and part of the warp returns
before the rest votes or shuffles: alpaka's warp functions act on the active threads, so a lane
that returned is left out (a ballot has no bit for it, ``all`` ignores it). On warps of one lane
(the CPU backends, OpenCL devices without sub-groups) the single-thread kernels run instead, as
alpaka's tests do. Each kernel counts the checks that fail in ``fails[0]`` (0: alpaka's answers).
"""

from __future__ import annotations

import numpy as np

import portable as pk
from alpyka_testing.kernels import download, upload


@pk.device_function
def _low_bits(n):
    """The mask of lanes 0 .. n-1 (n up to 64) as a uint64."""
    return np.uint64(0) if n == 0 else np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - n)


@pk.device_function
def _bit(k):
    return np.uint64(1) << np.uint64(k)


@pk.kernel
def ballot_single(acc, fails):
    if acc.warp_size != 1 or acc.warp_ballot(42 != 0) != 1 or acc.warp_ballot(0 != 0) != 0:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def ballot_multiple(acc, fails):
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_ballot(42 != 0) != _low_bits(ws) or acc.warp_ballot(0 != 0) != 0:
        acc.atomic_add(fails, 0, 1)
    if lane >= ws // 2:  # half the warp returns: the operations below act on the other half
        return
    for idx in range(ws // 2):
        if acc.warp_ballot(lane == idx) != _bit(idx):
            acc.atomic_add(fails, 0, 1)
        if acc.warp_ballot(lane != idx) != _low_bits(ws // 2) & ~_bit(idx):
            acc.atomic_add(fails, 0, 1)


@pk.kernel
def all_single(acc, fails):
    if acc.warp_size != 1 or not acc.warp_all(42 != 0) or acc.warp_all(0 != 0):
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def all_multiple(acc, fails):
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws or acc.warp_all(0 != 0) or not acc.warp_all(42 != 0):
        acc.atomic_add(fails, 0, 1)
    if lane % 3 != 0:  # two lanes in three return
        return
    for idx in range(ws):
        if acc.warp_all(lane == idx):
            acc.atomic_add(fails, 0, 1)
        if acc.warp_all(lane != idx) != (idx % 3 != 0):
            acc.atomic_add(fails, 0, 1)


@pk.kernel
def any_single(acc, fails):
    if acc.warp_size != 1 or not acc.warp_any(42 != 0) or acc.warp_any(0 != 0):
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def any_multiple(acc, fails):
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws or acc.warp_any(0 != 0) or not acc.warp_any(42 != 0):
        acc.atomic_add(fails, 0, 1)
    if lane % 3 != 0:
        return
    for idx in range(ws):
        if acc.warp_any(lane == idx) != (idx % 3 == 0):
            acc.atomic_add(fails, 0, 1)
        if not acc.warp_any(lane != idx):
            acc.atomic_add(fails, 0, 1)


@pk.kernel
def activemask_single(acc, fails, inactive):
    if acc.warp_size != 1 or acc.warp_active_mask() != 1:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def activemask_multiple(acc, fails, inactive):
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if lane == inactive:
        return
    if acc.warp_active_mask() != _low_bits(ws) & ~_bit(inactive):
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def shfl_single(acc, fails):
    if acc.warp_size != 1 or acc.warp_shfl(42, -1) != 42 or acc.warp_shfl(12, 0) != 12:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(np.float32(3.3), 0) != np.float32(3.3):
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def shfl_multiple(acc, fails):
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(42, 0) != 42 or acc.warp_shfl(lane, 0) != 0 or acc.warp_shfl(lane, 1) != 1:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(5, -1) != 5:  # CUDA and HIP wrap the lane differently; every lane holds 5
        acc.atomic_add(fails, 0, 1)
    if lane >= ws // 2:  # half the warp returns: the other half shuffles among itself
        return
    for idx in range(ws // 2):
        if acc.warp_shfl(lane, idx) != idx:
            acc.atomic_add(fails, 0, 1)
        if acc.warp_shfl(np.float32(4.0) - np.float32(lane), idx) != np.float32(4.0) - np.float32(idx):
            acc.atomic_add(fails, 0, 1)


@pk.device_function
def _lanes_where(ws, lane, modulus):
    """The lanes k < ws with k % modulus == lane % modulus."""
    m = np.uint64(0)
    for k in range(ws):
        if k % modulus == lane % modulus:
            m |= _bit(k)
    return m


@pk.kernel
def match_any_single(acc, fails):
    if acc.warp_size != 1 or acc.warp_match_any(42) != 1 or acc.warp_match_any(np.float32(-0.5)) != 1:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def match_any_multiple(acc, fails):
    """``warp_match_any`` (CUDA's __match_any_sync) over the whole warp, then over the half that stays."""
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_any(lane % 3) != _lanes_where(ws, lane, 3):
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_any(np.float64(lane % 2) * 0.5) != _lanes_where(ws, lane, 2):
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_any(np.uint64(lane % 4) << np.uint64(40)) != _lanes_where(ws, lane, 4):  # high bits count
        acc.atomic_add(fails, 0, 1)
    if lane >= ws // 2:  # half the warp returns: the others match among themselves
        return
    half = _low_bits(ws // 2)
    if acc.warp_match_any(np.int8(lane % 3)) != _lanes_where(ws, lane, 3) & half:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_any(np.float32(7.0)) != half:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def match_all_single(acc, fails):
    if acc.warp_size != 1 or acc.warp_match_all(42) != 1 or acc.warp_match_all(acc.thread_idx) != 1:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def match_all_multiple(acc, fails):
    """``warp_match_all``: the active lanes when they all hold the same bits, else 0."""
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_all(np.int64(7)) != _low_bits(ws) or acc.warp_match_all(lane) != 0:
        acc.atomic_add(fails, 0, 1)
    if lane % 3 != 0:  # two lanes in three return
        return
    active = _lanes_where(ws, 0, 3)
    if acc.warp_match_all(np.float32(lane % 3)) != active:  # every active lane holds 0.0
        acc.atomic_add(fails, 0, 1)
    if acc.warp_match_all(lane == 0) != (active if ws <= 3 else 0):  # lane 0 differs from lane 3
        acc.atomic_add(fails, 0, 1)


@pk.device_function
def _segment_source(ws, lane, k, width):
    """The lane alpaka's shfl(value, k, width) reads: lane k % w of the caller's segment of w lanes."""
    w = width if width < ws else ws
    return (lane & ~(w - 1)) | (k & (w - 1))


@pk.kernel
def shfl_width_single(acc, fails):
    if acc.warp_size != 1 or acc.warp_shfl(42, 3, width=4) != 42 or acc.warp_shfl(np.float32(1.5), 0, width=1) != 1.5:
        acc.atomic_add(fails, 0, 1)


@pk.kernel
def shfl_width_multiple(acc, fails):
    """alpaka's shfl with a width: lanes in segments of ``width``; a width above the warp is the warp."""
    ws = acc.warp_size
    lane = acc.thread_idx
    if ws <= 1 or acc.block_threads != ws:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(lane, 1, width=2) != _segment_source(ws, lane, 1, 2):
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(lane, 5, width=4) != _segment_source(ws, lane, 5, 4):  # 5 % 4: lane 1 of the four
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(lane, -1, width=8) != _segment_source(ws, lane, -1, 8):  # the segment's last lane
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(np.float64(lane) * 0.25, 3, width=32) != np.float64(_segment_source(ws, lane, 3, 32)) * 0.25:
        acc.atomic_add(fails, 0, 1)
    if acc.warp_shfl(lane, 2, width=64) != 2 or acc.warp_shfl(lane, 0, width=1) != lane:
        acc.atomic_add(fails, 0, 1)
    if lane >= ws // 2:  # half the warp returns: the rest shuffles within its segments
        return
    for idx in range(ws // 2):
        if acc.warp_shfl(lane, idx, width=4) != _segment_source(ws, lane, idx, 4):
            acc.atomic_add(fails, 0, 1)
        if acc.warp_shfl(np.int16(lane), idx, width=2) != _segment_source(ws, lane, idx, 2):
            acc.atomic_add(fails, 0, 1)


#: name -> (the kernel on warps of several lanes, the kernel on warps of one lane)
CASES = {
    "activemask": (activemask_multiple, activemask_single),
    "all": (all_multiple, all_single),
    "any": (any_multiple, any_single),
    "ballot": (ballot_multiple, ballot_single),
    "shfl": (shfl_multiple, shfl_single),
    "match_any": (match_any_multiple, match_any_single),
    "match_all": (match_all_multiple, match_all_single),
    "shfl_width": (shfl_width_multiple, shfl_width_single),
}


def warp_size(queue) -> int:
    """The warp size kernels see on ``queue``'s device."""
    out = upload(queue, np.zeros(1, np.int64))
    pk.exec(queue, pk.WorkDiv(1, 1, 1), _warp_size, out)
    return int(download(queue, out)[0])


@pk.kernel
def _warp_size(acc, out):
    out[0] = acc.warp_size


def run(queue, name: str) -> dict:
    """Run alpaka's ``name`` test on ``queue``: ``{"case", "warp", "launches", "fails"}`` (fails: the
    checks that failed over every launch; activemask runs once per inactive lane, as in alpaka)."""
    multiple, single = CASES[name]
    ws = warp_size(queue)
    fails = upload(queue, np.zeros(1, np.int32))
    extra: list = [None]
    if name == "activemask":
        extra = list(range(ws)) if ws > 1 else [0]
    for e in extra:
        args = () if e is None else (np.uint64(e),)
        if ws > 1:
            pk.exec(queue, pk.WorkDiv(2, ws, 1), multiple, fails, *args)
        else:
            pk.exec(queue, pk.WorkDiv(4, 1, 1), single, fails, *args)
    return {"case": name, "warp": ws, "launches": len(extra), "fails": int(download(queue, fails)[0])}


@pk.kernel
def masked_halves(acc, out):
    """CMSSW's explicit-mask forms: each half of the warp ballots and shuffles among its own lanes
    (``ballot_mask``/``shfl_mask`` with the half's mask, at a call site of its own)."""
    ws = acc.warp_size
    t = acc.thread_idx
    lane = t % ws
    half = ws // 2 if ws > 1 else 1
    low = _low_bits(half)
    if lane < half:
        out[t, 0] = np.int64(acc.warp_ballot_mask(low, lane % 3 == 0))
        out[t, 1] = acc.warp_shfl_mask(low, t * 10, half - 1)
    else:
        high = low << np.uint64(half)
        out[t, 0] = np.int64(acc.warp_ballot_mask(high, lane % 3 == 0))
        out[t, 1] = acc.warp_shfl_mask(high, t * 10, ws - 1)


def run_masked_halves(queue) -> np.ndarray:
    """``masked_halves`` on one block of a warp's lanes: ``(got, want)``."""
    ws = warp_size(queue)
    out = upload(queue, np.zeros((ws, 2), np.int64))
    pk.exec(queue, pk.WorkDiv(1, ws, 1), masked_halves, out)
    got = download(queue, out)
    half = ws // 2 if ws > 1 else 1
    want = np.zeros((ws, 2), np.int64)
    for t in range(ws):
        first = 0 if t < half else half
        lanes = range(first, min(first + half, ws))
        bits = sum(1 << k for k in lanes if k % 3 == 0)
        want[t, 0] = bits - (1 << 64) if bits >= 1 << 63 else bits  # the uint64 as the int64 stored
        want[t, 1] = 10 * (lanes[-1] if ws > 1 else t)
    return got, want
