"""Kernels and host helpers shared by the kernel tests (tests/kernels; module level: each kernel compiles
once per signature)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

import portable as pk
import soa

SCALE = 3  # a global constant kernels may capture


class Particles(soa.Layout):
    x = soa.column(np.float32)
    y = soa.column(np.float64)
    i32 = soa.column(np.int32)
    i64 = soa.column(np.int64)
    p = soa.vector(np.float32, 3)
    c = soa.matrix(np.float64, 2, 3)
    count = soa.scalar(np.int32)
    total = soa.scalar(np.float64)


def upload(q, arr):
    """A device Buffer holding ``arr``."""
    arr = np.ascontiguousarray(arr)
    buf = pk.Buffer(q.device, arr.shape, arr.dtype)
    pk.memcpy(q, buf, arr)
    return buf


@functools.cache
def host_queue():
    """A cpu_serial queue for the checks made once, not once per backend: the front end's errors
    (:func:`raised_by_the_front_end`) and the host-side argument checks of a call that launches
    nothing yet."""
    if "cpu_serial" not in pk.available_backends():
        pytest.skip("cpu_serial is not available here")
    return pk.Queue(pk.device("cpu_serial"))


def raised_by_the_front_end(err) -> bool:
    """Whether the error in ``err`` (``pytest.raises``' ExceptionInfo) came out of ``Kernel.ir``,
    portable.compiler's typed IR for a signature key, with no frame of anything else inside it:
    raised before any backend's code generation. Its inputs hold nothing of the backend (the key
    names dtypes, dimensions and layouts, not devices; the IR is cached per kernel, shared by
    every backend), so such an error is the same on every backend."""
    frames = [("/".join(Path(e.path).parent.parts[-2:]), Path(e.path).name, e.name) for e in err.traceback]
    if ("portable/compiler", "_kernel.py", "ir") not in frames:
        return False
    entry = frames.index(("portable/compiler", "_kernel.py", "ir"))
    return all(folder == "portable/compiler" for folder, _, _ in frames[entry:])


def download(q, buf):
    """The contents of a Buffer (waits for the queue)."""
    out = np.empty(buf.shape, buf.dtype)
    pk.memcpy(q, out, buf)
    q.wait()
    return out


def fill_collection(q, layout, data):
    return pk.PortableCollection.from_dict(layout, data, q)


def collection_dict(q, coll):
    return coll.to_dict(q)


# --------------------------------------------------------------------- index formulas
@pk.kernel
def record_uniform(acc, owner, hits, n):
    for i in acc.uniform_elements(n):
        owner[i] = acc.block_idx
        hits[i] += 1


@pk.kernel
def record_uniform_first(acc, owner, first, n):
    for i in acc.uniform_elements(first, n):
        owner[i] = acc.global_thread_idx


@pk.kernel
def record_groups(acc, owner, local, n):
    for g in acc.uniform_groups(n):
        for i, l in acc.uniform_group_elements(g, n):
            owner[i] = acc.block_idx() * 100000 + g
            local[i] = l


@pk.kernel
def record_independent(acc, owner, groups, m):
    for g in acc.independent_groups(groups):
        for j in acc.independent_group_elements(m):
            owner[g, j] = acc.block_idx * 1000 + g


@pk.kernel
def record_queries(acc, out):
    t = acc.global_thread_idx
    out[t, 0] = acc.grid_blocks
    out[t, 1] = acc.block_threads
    out[t, 2] = acc.thread_elements
    out[t, 3] = acc.grid_threads
    out[t, 4] = acc.block_idx
    out[t, 5] = acc.thread_idx()
    out[t, 6] = 1 if acc.once_per_grid() else 0
    out[t, 7] = 1 if acc.once_per_block() else 0


@pk.kernel
def record_nd2(acc, owner, n0, n1):
    for i, j in acc.uniform_elements_nd((n0, n1)):
        b0, b1 = acc.block_idx
        owner[i, j] = b0 * 1000 + b1


@pk.kernel
def record_nd3(acc, owner, ext0, ext1, ext2):
    for idx in acc.uniform_elements_nd((ext0, ext1, ext2)):
        bi = acc.block_idx
        owner[idx] = (bi[0] * 100 + bi[1]) * 100 + bi[2]


@pk.kernel
def record_nd2_along(acc, out, n0, n1):
    for i in acc.uniform_elements(n0, dim=0):
        for j in acc.uniform_elements(n1, dim=1):
            out[i, j] = i * SCALE + j


# --------------------------------------------------------------------- shared memory
@pk.kernel
def block_sum(acc, partial, data, n):
    s = acc.shared_array(64, np.float64)
    for g in acc.uniform_groups(n):
        for i, l in acc.uniform_group_elements(g, n):
            s[l] = data[i]
        acc.sync_block_threads()
        if acc.once_per_block():
            tot = 0.0
            size = min(acc.block_threads * acc.thread_elements, n - g * acc.thread_elements * acc.block_threads)
            for k in range(size):
                tot += s[k]
            partial[g] = tot
        acc.sync_block_threads()


def _dyn_bytes(workdiv, *args):
    return workdiv.threads[0] * workdiv.elements[0] * 8


@pk.kernel(dynamic_shared_bytes=_dyn_bytes)
def block_sum_dynamic(acc, partial, data, n):
    s = acc.dynamic_shared_array(np.float64)
    for g in acc.uniform_groups(n):
        for i, l in acc.uniform_group_elements(g, n):
            s[l] = data[i] * 2.0
        acc.sync_block_threads()
        if acc.once_per_block():
            tot = 0.0
            k = 0
            while k < len(s):
                if g * len(s) + k >= n:
                    break
                tot += s[k]
                k += 1
            partial[g] = tot
        acc.sync_block_threads()


# --------------------------------------------------------------------- atomics
@pk.kernel
def histogram(acc, hist, fhist, data, n, nbins):
    for i in acc.uniform_elements(n):
        b = data[i] % nbins
        acc.atomic_add(hist, b, 1)
        acc.atomic_add(fhist, b, 0.5)


@pk.kernel
def contended(acc, cnt, n):
    for i in acc.uniform_elements(n):
        acc.atomic_max(cnt, 0, i)
        acc.atomic_min(cnt, 1, -i)
        acc.atomic_inc(cnt, 2, 1000000)
        acc.atomic_sub(cnt, 3, 1)
        acc.atomic_xor(cnt, 4, i)
        acc.atomic_or(cnt, 5, i & 7)
        old = acc.atomic_cas(cnt, 6, i, i + 1)  # noqa: F841 - a chain: only the holder of the current value moves it


@pk.kernel
def atomic_sequence(acc, a, f, old, fold):
    if acc.once_per_grid():
        old[0] = acc.atomic_add(a, 0, 5)
        old[1] = acc.atomic_sub(a, 0, 2)
        old[2] = acc.atomic_min(a, 1, 3)
        old[3] = acc.atomic_max(a, 1, 10)
        old[4] = acc.atomic_exch(a, 2, 42)
        old[5] = acc.atomic_cas(a, 3, 7, 8)
        old[6] = acc.atomic_cas(a, 3, 7, 9)
        old[7] = acc.atomic_and(a, 4, 6)
        old[8] = acc.atomic_or(a, 4, 9)
        old[9] = acc.atomic_xor(a, 4, 5)
        old[10] = acc.atomic_inc(a, 5, 2)
        old[11] = acc.atomic_inc(a, 5, 2)
        old[12] = acc.atomic_inc(a, 5, 2)
        old[13] = acc.atomic_dec(a, 6, 3)
        old[14] = acc.atomic_dec(a, 6, 3)
        old[15] = acc.atomic_dec(a, 7, 3, hierarchy="block")
        fold[0] = acc.atomic_add(f, 0, 1.5)
        fold[1] = acc.atomic_sub(f, 0, 0.25)
        fold[2] = acc.atomic_min(f, 1, -1.0)
        fold[3] = acc.atomic_max(f, 1, 2.0)
        fold[4] = acc.atomic_exch(f, 2, 7.0)
        fold[5] = acc.atomic_cas(f, 3, 0.0, 3.0)


@pk.kernel
def scalar_field_atomics(acc, v, n):
    for i in acc.uniform_elements(n):
        acc.atomic_add(v.count, 1)
        acc.atomic_add(v.total, v.y[i])


# --------------------------------------------------------------------- types and arithmetic
@pk.kernel
def mixed_types(acc, out, inp, a32, b64, n):
    for i in acc.uniform_elements(n):
        out.x[i] = inp.x[i] * a32 + inp.i32[i]
        out.y[i] = inp.y[i] / (inp.i64[i] + 1) - inp.x[i] * b64
        out.i32[i] = inp.i32[i] * 3 - inp.i64[i] // 7
        out.i64[i] = inp.i64[i] * inp.i32[i] + (inp.i64[i] % 5)


@pk.kernel
def floor_mod(acc, q_i, r_i, q_f, r_f, a, b, af, bf, n):
    for i in acc.uniform_elements(n):
        q_i[i] = a[i] // b[i]
        r_i[i] = a[i] % b[i]
        q_f[i] = af[i] // bf[i]
        r_f[i] = af[i] % bf[i]


@pk.kernel
def math_funcs(acc, out, x, n):
    for i in acc.uniform_elements(n):
        v = x[i]
        out[i, 0] = math.sqrt(v)
        out[i, 1] = math.exp(-v) + math.log(v + 1.0)
        out[i, 2] = math.sin(v) * math.cos(v) + math.tanh(v)
        out[i, 3] = math.atan2(v, 2.0) + math.hypot(v, 1.0)
        out[i, 4] = min(v, 0.5) + max(v, 0.25, 0.3) + abs(v - 1.0)
        out[i, 5] = math.floor(v * 10) + math.ceil(v * 3)
        out[i, 6] = np.float32(v) * np.float32(2) + (1.0 if v > 0.5 else -1.0)
        out[i, 7] = v**2 + math.pi + int(v * 7) + float(i % 3)


@pk.kernel
def control_flow(acc, out, n):
    for i in acc.uniform_elements(n):
        k = i
        steps = 0
        while k != 1 and k > 0:
            if k % 2 == 0:
                k = k // 2
            elif k % 5 == 0:
                k = k - 1
                continue
            else:
                k = 3 * k + 1
            steps += 1
            if steps > 50:
                break
        out[i] = steps
        if i == n - 1:
            return
        out[i] += 1000 * (i % 3)


@pk.kernel
def early_break(acc, out, limit, n):
    for i in acc.uniform_elements(n):
        if i >= limit:
            break
        out[i] = 1


# --------------------------------------------------------------------- device functions
@pk.device_function
def clamp(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@pk.device_function
def weighted(acc, view, i, w):
    return clamp(view.x[i] * w, -1.0, 1.0) + acc.block_idx * 0


@pk.device_function
def bump(arr, i):
    arr[i] = arr[i] + 1


@pk.kernel
def use_device_functions(acc, out, inp, w, n):
    for i in acc.uniform_elements(n):
        out.y[i] = weighted(acc, inp, i, w)
        out.i32[i] = inp.i32[i]
        bump(out.i32, i)


# --------------------------------------------------------------------- SoA fields
@pk.kernel
def soa_fields(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        s = 0.0
        for k in range(3):
            out.p[i, k] = inp.p[i, k] * (k + 1)
            s += inp.p[i, k]
        for r in range(2):
            for c in range(3):
                out.c[i, r, c] = inp.c[i, r, c] + r * 10 + c
        out.x[i] = s
    if acc.once_per_grid():
        out.count = inp.count + 1
        out.total = inp.total * 2


@pk.kernel
def copy_x(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out.x[i] = inp.x[i]
