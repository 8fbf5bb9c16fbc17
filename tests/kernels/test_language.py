"""Types, arithmetic (numba promotion, Python // and %), math, control flow, device functions and
SoA vector/matrix/scalar fields, checked against numpy on random inputs."""

import math

import numpy as np

import portable as pk
from alpyka_testing.kernels import (
    Particles,
    control_flow,
    download,
    early_break,
    floor_mod,
    math_funcs,
    mixed_types,
    soa_fields,
    upload,
    use_device_functions,
)


def _seed():
    return int(np.random.SeedSequence().entropy % 2**32)


def _random_particles(rng, n):
    return {
        "x": rng.standard_normal(n).astype(np.float32),
        "y": rng.standard_normal(n),
        "i32": rng.integers(-1000, 1000, n).astype(np.int32),
        "i64": rng.integers(0, 10**6, n).astype(np.int64),
        "p": rng.standard_normal((n, 3)).astype(np.float32),
        "c": rng.standard_normal((n, 2, 3)),
        "count": np.int32(rng.integers(0, 100)),
        "total": np.float64(rng.standard_normal()),
    }


def test_mixed_type_columns(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 1001
    d = _random_particles(rng, n)
    inp = pk.PortableCollection.from_dict(Particles, d, queue)
    out = pk.PortableCollection(Particles, n, queue)
    a32, b64 = np.float32(rng.standard_normal()), float(rng.standard_normal())
    pk.exec(queue, pk.make_workdiv(device, 7, 16), mixed_types, out.view(), inp.const_view(), a32, b64, n)
    got = out.to_dict(queue)
    x, y, i32, i64 = d["x"], d["y"], d["i32"], d["i64"]
    # numba promotion: float32 * float32 + int32 -> float64, stored as float32
    want_x = (x * a32).astype(np.float64) + i32
    np.testing.assert_allclose(got["x"], want_x.astype(np.float32), rtol=1e-6, err_msg=f"seed={seed}")
    want_y = y / (i64 + 1) - x.astype(np.float64) * b64
    np.testing.assert_allclose(got["y"], want_y, rtol=1e-12, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(
        got["i32"], (i32.astype(np.int64) * 3 - i64 // 7).astype(np.int32), err_msg=f"seed={seed}"
    )
    np.testing.assert_array_equal(got["i64"], i64 * i32 + i64 % 5, err_msg=f"seed={seed}")


def test_floor_division_and_modulo_follow_python(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 500
    a = rng.integers(-50, 50, n).astype(np.int32)
    b = rng.integers(1, 9, n).astype(np.int64) * rng.choice([-1, 1], n)
    af = rng.uniform(-20, 20, n)
    bf = rng.uniform(0.5, 4, n) * rng.choice([-1, 1], n)
    outs = [upload(queue, np.zeros(n, t)) for t in (np.int64, np.int64, np.float64, np.float64)]
    pk.exec(
        queue,
        pk.make_workdiv(device, 4, 32),
        floor_mod,
        *outs,
        upload(queue, a),
        upload(queue, b),
        upload(queue, af),
        upload(queue, bf),
        n,
    )
    qi, ri, qf, rf = (download(queue, o) for o in outs)
    np.testing.assert_array_equal(qi, [int(x) // int(y) for x, y in zip(a, b)], err_msg=f"seed={seed}")
    np.testing.assert_array_equal(ri, [int(x) % int(y) for x, y in zip(a, b)], err_msg=f"seed={seed}")
    np.testing.assert_allclose(qf, [x // y for x, y in zip(af, bf)], err_msg=f"seed={seed}")
    np.testing.assert_allclose(rf, [x % y for x, y in zip(af, bf)], rtol=1e-12, atol=1e-12, err_msg=f"seed={seed}")


def test_math_functions(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 300
    x = rng.uniform(0, 2, n)
    out = upload(queue, np.zeros((n, 8)))
    pk.exec(queue, pk.make_workdiv(device, 3, 8), math_funcs, out, upload(queue, x), n)
    got = download(queue, out)
    i = np.arange(n)
    want = np.stack(
        [
            np.sqrt(x),
            np.exp(-x) + np.log(x + 1),
            np.sin(x) * np.cos(x) + np.tanh(x),
            np.arctan2(x, 2.0) + np.hypot(x, 1.0),
            np.minimum(x, 0.5) + np.maximum(x, 0.3) + np.abs(x - 1),
            np.floor(x * 10) + np.ceil(x * 3),
            (x.astype(np.float32) * np.float32(2)).astype(np.float64) + np.where(x > 0.5, 1.0, -1.0),
            x**2 + math.pi + np.trunc(x * 7) + i % 3,
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"seed={seed}")


def test_control_flow(device, queue):
    n = 64
    out = upload(queue, np.zeros(n, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 3, 5), control_flow, out, n)
    want = []
    for i in range(n):
        k, steps = i, 0
        while k != 1 and k > 0:
            if k % 2 == 0:
                k //= 2
            elif k % 5 == 0:
                k -= 1
                continue
            else:
                k = 3 * k + 1
            steps += 1
            if steps > 50:
                break
        want.append(steps if i == n - 1 else steps + 1000 * (i % 3))
    np.testing.assert_array_equal(download(queue, out), want)


def test_break_leaves_the_whole_element_loop(device, queue):
    n, limit = 40, 13
    wd = pk.make_workdiv(device, 2, 5)
    out = upload(queue, np.zeros(n, np.int32))
    pk.exec(queue, wd, early_break, out, limit, n)
    got = download(queue, out)
    # each thread walks its indices in increasing order and stops at its first index >= limit
    e, gt = wd.elements[0], wd.blocks[0] * wd.threads[0]
    want = np.zeros(n, np.int32)
    for t in range(gt):
        for base in range(t * e, n, gt * e):
            idx = [i for i in range(base, min(base + e, n))]
            stop = next((k for k, i in enumerate(idx) if i >= limit), None)
            for i in idx[:stop]:
                want[i] = 1
            if stop is not None:
                break
        else:
            continue
    np.testing.assert_array_equal(got, want)


def test_device_functions(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 257
    d = _random_particles(rng, n)
    inp = pk.PortableCollection.from_dict(Particles, d, queue)
    out = pk.PortableCollection(Particles, n, queue)
    w = np.float32(1.7)
    pk.exec(queue, pk.make_workdiv(device, 4, 8), use_device_functions, out.view(), inp.const_view(), w, n)
    got = out.to_dict(queue)
    want = np.clip(d["x"] * w, -1.0, 1.0).astype(np.float64)
    np.testing.assert_allclose(got["y"], want, rtol=1e-6, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(got["i32"], d["i32"] + 1)


def test_vector_matrix_scalar_fields(device, queue):
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = 130
    d = _random_particles(rng, n)
    inp = pk.PortableCollection.from_dict(Particles, d, queue)
    out = pk.PortableCollection(Particles, n, queue)
    pk.exec(queue, pk.make_workdiv(device, 3, 16), soa_fields, out.view(), inp.const_view(), n)
    got = out.to_dict(queue)
    np.testing.assert_allclose(got["p"], d["p"] * np.array([1, 2, 3], np.float32), rtol=1e-6, err_msg=f"seed={seed}")
    np.testing.assert_allclose(got["x"], d["p"].astype(np.float64).sum(axis=1).astype(np.float32), rtol=1e-5)
    offs = np.arange(2)[:, None] * 10 + np.arange(3)[None, :]
    np.testing.assert_allclose(got["c"], d["c"] + offs, rtol=1e-12)
    assert got["count"] == d["count"] + 1
    assert got["total"] == d["total"] * 2
