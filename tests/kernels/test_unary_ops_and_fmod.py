"""Integer unary operators keep their operand's type (numba's rule,
so ``-np.uint32(x)`` wraps in 32 bits on every backend) and ``math.fmod`` compiles on the CPU
backends; checked against numpy on random inputs."""

import math

import numpy as np

import portable as pk
from alpyka_testing.kernels import download, upload


@pk.kernel
def unary_integer_ops(acc, out, u, s, n):
    for i in acc.uniform_elements(n):
        out[i, 0] = -u[i]  # uint32: 2**32 - u
        out[i, 1] = ~u[i]  # uint32: 2**32 - 1 - u
        out[i, 2] = 1 if -u[i] < 0 else 0  # never: -u stays unsigned
        out[i, 3] = (~u[i]) >> 16  # high bits of the 32-bit complement
        out[i, 4] = -s[i]  # int8: -(-128) wraps to -128
        out[i, 5] = ~s[i]


@pk.kernel
def fmod_kernel(acc, out32, out64, a32, b32, a64, b64, n):
    for i in acc.uniform_elements(n):
        out32[i] = math.fmod(a32[i], b32[i])
        out64[i] = math.fmod(a64[i], b64[i])


def test_unary_minus_and_invert_keep_the_integer_type(device, queue):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n = 300
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(-128, 128, n).astype(np.int8)
    s[:3] = -128
    out = upload(queue, np.zeros((n, 6), np.int64))
    pk.exec(queue, pk.make_workdiv(device, 4, 16), unary_integer_ops, out, upload(queue, u), upload(queue, s), n)
    got = download(queue, out)
    u64 = u.astype(np.int64)
    want = np.stack(
        [
            (2**32 - u64) % 2**32,
            2**32 - 1 - u64,
            np.zeros(n, np.int64),
            (2**32 - 1 - u64) >> 16,
            (-s).astype(np.int64),
            (~s).astype(np.int64),
        ],
        axis=1,
    )  # numpy wraps int8 like numba
    np.testing.assert_array_equal(got, want, err_msg=f"seed={seed}")


def test_math_fmod_matches_numpy(device, queue):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n = 257
    a64 = rng.uniform(-20, 20, n)
    b64 = rng.uniform(0.5, 4, n) * rng.choice([-1, 1], n)
    a32, b32 = a64.astype(np.float32), b64.astype(np.float32)
    o32, o64 = upload(queue, np.zeros(n, np.float32)), upload(queue, np.zeros(n))
    pk.exec(
        queue,
        pk.make_workdiv(device, 3, 32),
        fmod_kernel,
        o32,
        o64,
        upload(queue, a32),
        upload(queue, b32),
        upload(queue, a64),
        upload(queue, b64),
        n,
    )
    np.testing.assert_allclose(download(queue, o32), np.fmod(a32, b32), rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")
    np.testing.assert_allclose(download(queue, o64), np.fmod(a64, b64), rtol=1e-12, atol=1e-12, err_msg=f"seed={seed}")
