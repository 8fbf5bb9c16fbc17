"""Block-level tools on the hardware's own terms: OpenCL's work-group collectives where the device
has them (``pk.tools.block_prefix_scan``, the block predicates), one-work-item groups' plain
shared-memory atomics, and ``pk.valid_workdiv(kernel=...)``'s one-thread blocks for synchronising
kernels on a CPU-shaped device. Every path gives the bits of the one it replaces."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

THREADS = 64


@pk.kernel
def scan_blocks(acc, src, dst, counts, n, seg):
    """Each block scans its segment of ``seg`` values, counts, ands and ors its threads' odd values
    and sums them (``pk.tools.block_sum``)."""
    ws = acc.shared_array(1024, np.int64)
    wsum = acc.shared_array(1024, np.int64)
    for b in acc.independent_groups((n + seg - 1) // seg):
        last = min((b + 1) * seg, n)
        pk.tools.block_prefix_scan_range(acc, src, dst, b * seg, last, ws)
        i = b * seg + acc.thread_idx
        odd = i < last and src[i] % 2 == 1
        c = acc.sync_block_threads_count(odd)
        a = acc.sync_block_threads_and(odd)
        o = acc.sync_block_threads_or(odd)
        total = pk.tools.block_sum(acc, np.int64(src[i]) if i < last else np.int64(0), wsum)
        if acc.thread_idx == 0:
            counts[b, 0] = c
            counts[b, 1] = 1 if a else 0
            counts[b, 2] = 1 if o else 0
            counts[b, 3] = total


@pk.kernel
def scan_floats(acc, src, dst, n):
    ws = acc.shared_array(1024, np.float64)
    pk.tools.block_prefix_scan(acc, src, dst, n, ws)


@pk.kernel
def shared_atomics(acc, keys, vals, out, n):
    """Every shared-memory atomic of one block's histogram of ``keys``, written out per block."""
    add = acc.shared_array(8, np.int32)
    sub = acc.shared_array(8, np.int64)
    fmax = acc.shared_array(8, np.float32)
    imin = acc.shared_array(8, np.int32)
    bits = acc.shared_array(8, np.uint32)
    cas = acc.shared_array(8, np.int32)
    for b in acc.independent_groups(out.shape[0]):
        for k in acc.independent_group_elements(8):
            add[k] = 0
            sub[k] = 0
            fmax[k] = -1.0
            imin[k] = 1 << 30
            bits[k] = np.uint32(0)
            cas[k] = 0
        acc.sync_block_threads()
        for i in acc.independent_group_elements(b * 512, min((b + 1) * 512, n)):
            k = keys[i]
            acc.atomic_add(add, k, vals[i], hierarchy="block")
            acc.atomic_sub(sub, k, np.int64(vals[i]) * 3, hierarchy="block")
            acc.atomic_max(fmax, k, np.float32(vals[i]) * np.float32(0.5), hierarchy="block")
            acc.atomic_min(imin, k, vals[i], hierarchy="block")
            acc.atomic_or(bits, k, np.uint32(1) << np.uint32(vals[i] % 32), hierarchy="block")
            acc.atomic_cas(cas, k, 0, vals[i], hierarchy="block")  # the first value each key meets
        acc.sync_block_threads()
        for k in acc.independent_group_elements(8):
            out[b, k, 0] = add[k]
            out[b, k, 1] = sub[k]
            out[b, k, 2] = np.int64(fmax[k] * np.float32(2.0))
            out[b, k, 3] = imin[k]
            out[b, k, 4] = bits[k]
            out[b, k, 5] = 1 if cas[k] != 0 else 0
        acc.sync_block_threads()


@pk.kernel
def axpy(acc, out, x, n):
    for i in acc.uniform_elements(n):
        out[i] = 2.0 * x[i] + 1.0


def _threads(device) -> int:
    return 1 if device.limits.max_threads_per_block == 1 else THREADS


def _run_scan(queue, src: np.ndarray, seg: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    n = src.size
    blocks = -(-n // seg)
    dst = upload(queue, np.zeros(n, src.dtype))
    counts = upload(queue, np.zeros((blocks, 4), np.int64))
    pk.exec(queue, pk.WorkDiv(blocks, threads, 1), scan_blocks, upload(queue, src), dst, counts, n, seg)
    return download(queue, dst), download(queue, counts)


def _want(src: np.ndarray, seg: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Each segment's scan, and the count / and / or of the odd values its block's threads hold
    (thread t the segment's value t)."""
    dst = np.concatenate([np.cumsum(src[s : s + seg], dtype=src.dtype) for s in range(0, src.size, seg)])
    held = [src[s : s + min(seg, threads)] for s in range(0, src.size, seg)]
    with np.errstate(over="ignore"):  # int64 sums wrap, as the kernel's
        rows = [
            [int((h % 2 == 1).sum()), int((h % 2 == 1).all()), int((h % 2 == 1).any()), h.astype(np.int64).sum()]
            for h in held
        ]
    return dst, np.array(rows, np.int64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_block_scans_and_predicates_give_the_reference(device, queue, dtype):
    """Wrapping sums included: int32 values near the top of their range."""
    threads = _threads(device)
    seg = threads if threads > 1 else 64
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    src = rng.integers(info.max // 4, info.max // 2, 7 * seg - 5).astype(dtype)
    got, counts = _run_scan(queue, src, seg, threads)
    want, want_counts = _want(src, seg, threads)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(counts, want_counts)


def _opencl_collectives(device):
    """The OpenCL device's ``-cl-std`` for work-group collectives, or a skip saying it has none."""
    from backends._opencl_launch import collectives_std

    std = collectives_std(device.native.device)
    if std is None:
        pytest.skip(f"{device} has no work-group collectives (OpenCL C 2.0, or 3.0 with the feature)")
    return std


def _plans(device, kernel) -> list:
    return list(device.backend.plans(kernel).values())


@pytest.mark.alpyka_backends("opencl")
def test_opencl_takes_the_collective_path_and_gives_the_fallbacks_bits(device, queue, monkeypatch):
    import pyopencl as cl

    from backends import _opencl_launch

    std = _opencl_collectives(device)
    rng = np.random.default_rng(5)
    src = rng.integers(-(2**31), 2**31 - 1, 5 * THREADS + 3).astype(np.int32)
    device.backend.plans(scan_blocks).clear()
    native = _run_scan(queue, src, THREADS, THREADS)
    (plan,) = _plans(device, scan_blocks)
    assert "work_group_scan_inclusive_add" in plan.src.text and "work_group_reduce_add((u64)(" in plan.src.text
    options = plan.program.get_build_info(device.native.device, cl.program_build_info.OPTIONS)
    assert std in options and "-DALPYKA_WG_COLLECTIVES" in options, options
    monkeypatch.setattr(_opencl_launch, "collectives_std", lambda device: None)  # the device without them
    device.backend.plans(scan_blocks).clear()
    fallback = _run_scan(queue, src, THREADS, THREADS)
    (plan,) = _plans(device, scan_blocks)
    options = plan.program.get_build_info(device.native.device, cl.program_build_info.OPTIONS)
    assert "ALPYKA_WG_COLLECTIVES" not in options and "-cl-std" not in options, options
    device.backend.plans(scan_blocks).clear()
    want = _want(src, THREADS, THREADS)
    for got in (native, fallback):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.alpyka_backends("opencl")
def test_a_device_whose_collectives_do_not_build_gets_the_fallback(device, queue, monkeypatch):
    """A runtime that claims the collectives but fails to build them (here: under OpenCL C 1.2,
    which has no work_group_* functions) builds the fallback, with the same answers, and is not
    asked again."""
    import pyopencl as cl

    from backends import _opencl_launch

    monkeypatch.setattr(_opencl_launch, "collectives_std", lambda device: "-cl-std=CL1.2")
    monkeypatch.setattr(_opencl_launch, "_COLLECTIVES_FAILED", set())
    rng = np.random.default_rng(8)
    src = rng.integers(0, 1000, 3 * THREADS).astype(np.int64)
    device.backend.plans(scan_blocks).clear()
    try:
        got = _run_scan(queue, src, THREADS, THREADS)
        (plan,) = _plans(device, scan_blocks)
        options = plan.program.get_build_info(device.native.device, cl.program_build_info.OPTIONS)
    finally:
        device.backend.plans(scan_blocks).clear()
    assert "-cl-std" not in options and "ALPYKA_WG_COLLECTIVES" not in options, options
    assert _opencl_launch._COLLECTIVES_FAILED == {device.native.device.int_ptr}
    want = _want(src, THREADS, THREADS)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.alpyka_backends("opencl", "cuda", "rocm")
def test_a_float_scan_and_the_other_dialects_keep_the_hillis_steele_steps(device, queue):
    """A work-group scan adds floats in the runtime's order: float scans keep their own steps;
    CUDA and HIP have no collectives: their source is the loop it was."""
    n = 300
    src = np.linspace(0.1, 30.0, n)
    dst = upload(queue, np.zeros(n))
    pk.exec(queue, pk.WorkDiv(1, THREADS, 1), scan_floats, upload(queue, src), dst, n)
    got = download(queue, dst)
    np.testing.assert_allclose(got, np.cumsum(src), rtol=1e-12)
    (plan,) = _plans(device, scan_floats)
    assert "work_group_scan" not in plan.src.text and "ALPYKA_WG_COLLECTIVES" not in plan.src.text
    ints = (upload(queue, np.arange(4, dtype=np.int32)), upload(queue, np.zeros(4, np.int32)))
    pk.exec(queue, pk.WorkDiv(1, THREADS, 1), scan_blocks, *ints, upload(queue, np.zeros((1, 4), np.int64)), 4, 4)
    queue.wait()
    text = _plans(device, scan_blocks)[0].src.text
    if device.capabilities.c_dialect == "opencl":
        assert "#ifdef ALPYKA_WG_COLLECTIVES" in text and "work_group_scan_inclusive_add" in text
    else:
        assert "work_group" not in text and "ALPYKA_WG_COLLECTIVES" not in text and "v_off < v_nt" in text


def _histograms(queue, keys, vals, wd) -> np.ndarray:
    n = keys.size
    out = upload(queue, np.zeros((-(-n // 512), 8, 6), np.int64))
    pk.exec(queue, wd, shared_atomics, upload(queue, keys), upload(queue, vals), out, n)
    return download(queue, out)


def _histogram_reference(keys, vals) -> np.ndarray:
    out = np.zeros((-(-keys.size // 512), 8, 6), np.int64)
    for b in range(out.shape[0]):
        k, v = keys[b * 512 : (b + 1) * 512], vals[b * 512 : (b + 1) * 512]
        for key in range(8):
            sel = v[k == key]
            out[b, key] = [
                sel.sum(),
                -3 * sel.astype(np.int64).sum(),
                int(np.float32(sel.max()) * np.float32(0.5) * np.float32(2.0)) if sel.size else -2,
                sel.min() if sel.size else 1 << 30,
                int(np.bitwise_or.reduce(np.uint32(1) << (sel % 32).astype(np.uint32))) if sel.size else 0,
                1 if sel.size else 0,
            ]
    return out


def test_shared_atomics_in_one_work_item_groups_and_in_many(device, queue):
    """One-work-item groups (a CPU shape) update shared memory plainly on OpenCL: the same bits as
    the atomics of many-work-item groups and of every other backend."""
    rng = np.random.default_rng(11)
    n = 3 * 512 + 100
    keys = rng.integers(0, 8, n).astype(np.int32)
    vals = rng.integers(1, 1000, n).astype(np.int32)
    want = _histogram_reference(keys, vals)
    blocks = want.shape[0]
    shapes = [pk.WorkDiv(blocks, 1, 64)]
    if _threads(device) > 1:
        shapes.append(pk.WorkDiv(blocks, THREADS, 1))
    for wd in shapes:
        np.testing.assert_array_equal(_histograms(queue, keys, vals, wd), want, err_msg=str(wd))
    if device.capabilities.c_dialect == "opencl":
        text = "\n".join(p.src.text for p in _plans(device, shared_atomics))
        assert "if (get_local_size(0) == 1) { i32 cur = *p; *p = (i32)((u32)cur + (u32)v); return cur; }" in text
    elif device.capabilities.c_dialect in ("cuda", "hip"):
        assert "get_local_size" not in "\n".join(p.src.text for p in _plans(device, shared_atomics))


@pytest.mark.alpyka_backends("opencl")
def test_valid_workdiv_gives_a_synchronising_kernel_one_thread_blocks_on_a_cpu(device, queue):
    """On OpenCL on a CPU, valid_workdiv with a kernel that meets barriers moves the block's
    threads into elements (the same grid), and keeps a barrier-free kernel's many work-items."""
    if not device.capabilities.cpu_shaped:
        pytest.skip(f"{device} runs on a {device.capabilities.hardware}: its blocks keep their threads")
    n = 100_000
    seg = 256
    src = np.arange(n, dtype=np.int64) % 7
    counts = np.zeros((-(-n // seg), 4), np.int64)
    args = (upload(queue, src), upload(queue, np.zeros(n, np.int64)), upload(queue, counts), n, seg)
    plain = pk.valid_workdiv(device, n)
    wd = pk.valid_workdiv(device, n, kernel=scan_blocks, args=args)
    assert wd.threads == (1,) and wd.blocks == plain.blocks and wd.elements == plain.threads, (wd, plain)
    elementwise = (upload(queue, np.zeros(n)), upload(queue, np.ones(n)), n)
    assert pk.valid_workdiv(device, n, kernel=axpy, args=elementwise).threads == plain.threads
    assert scan_blocks.synchronises_blocks(args, 1) and not axpy.synchronises_blocks(elementwise, 1)
    pk.exec(queue, wd, scan_blocks, *args)
    want = _want(src, seg, 1)
    np.testing.assert_array_equal(download(queue, args[1]), want[0])
    np.testing.assert_array_equal(download(queue, args[2]), want[1])


@pk.kernel
def collectives_as_a_value(acc, out):
    out[0] = 1 if acc.block_collectives else 0


@pk.kernel
def scan_outside_its_if(acc, out):
    out[0] = acc.block_scan_add(out[0])


@pytest.mark.parametrize(
    "kernel, text",
    [
        (collectives_as_a_value, "acc.block_collectives is the whole condition of an if"),
        (scan_outside_its_if, "acc.block_scan_add(value) goes in the body of if acc.block_collectives:"),
    ],
    ids=["value", "outside"],
)
def test_collectives_outside_their_if_are_refused_on_every_backend(queue, kernel, text):
    """Where a collective is met outside ``if acc.block_collectives:`` one backend would have it and
    another not: the front end refuses it, whatever the backend."""
    with pytest.raises(pk.KernelSyntaxError, match=text.replace("(", r"\(").replace(")", r"\)")):
        pk.exec(queue, pk.WorkDiv(1, 1, 1), kernel, upload(queue, np.zeros(1, np.int64)))
