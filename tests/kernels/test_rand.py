"""Philox4x32-10: Random123's known answers on the host, and the same bits from acc.rand_* on every backend."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, raised_by_the_front_end, upload
from portable.compiler import KernelSyntaxError


def test_known_answer_vectors():
    # Random123's kat_vectors for philox4x32_10 (counter, key -> output)
    cases = [
        ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        (
            [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
            [0xA4093822, 0x299F31D0],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ),
    ]
    for counter, key, want in cases:
        got = pk.rand.philox4x32_10(np.array(counter, np.uint32), np.array(key, np.uint32))
        assert got.dtype == np.uint32
        assert got.tolist() == want, [hex(x) for x in got]
    many = pk.rand.philox4x32_10(
        np.array([c for c, _, _ in cases], np.uint32), np.array([k for _, k, _ in cases], np.uint32)
    )
    assert many.tolist() == [w for _, _, w in cases]


def test_stream_is_counter_blocks():
    s = pk.rand.stream(2**40 + 5, 2**33 + 9, 10)
    key = [5, 2**8]
    for m in range(3):
        block = pk.rand.philox4x32_10(np.array([m, 0, 9, 2], np.uint32), np.array(key, np.uint32))
        assert s[4 * m : 4 * m + 4].tolist() == block.tolist()[: len(s[4 * m : 4 * m + 4])]
    assert pk.rand.stream(1, 2, 0).size == 0


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, True])
def test_stream_refuses_what_a_kernel_cannot_take(bad):
    with pytest.raises((ValueError, TypeError), match="seed"):
        pk.rand.stream(bad, 0, 4)


@pk.kernel
def draws(acc, out, seed, n_threads, per_thread):
    """Thread t of the grid draws per_thread values of subsequence t."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(seed, t)
        for k in range(per_thread):
            out[t, k] = acc.rand_u32(eng)


@pk.kernel
def real_draws(acc, u32, u64, n32, n64, seed, n_threads, per_thread):
    for t in acc.uniform_elements(n_threads):
        a = acc.rand_engine(seed, t)
        b = acc.rand_engine(seed + 1, t)
        for k in range(per_thread):
            u32[t, k] = acc.rand_uniform(a, np.float32)
            u64[t, k] = acc.rand_uniform(b, np.float64)
        c = acc.rand_engine(seed + 2, t)
        d = acc.rand_engine(seed + 3, t)
        for k in range(per_thread):
            n32[t, k] = acc.rand_normal(c, np.float32)
            n64[t, k] = acc.rand_normal(d)


def _workdiv(device, n):
    return pk.make_workdiv(device, 4, 8) if device.kind == "gpu" else pk.WorkDiv(4, 1, (n + 3) // 4)


@pytest.mark.parametrize("seed", [0, 12345, 2**63 + 11])
def test_same_bits_as_the_host_stream(device, queue, seed):
    n, per = 40, 11  # 11 draws: two full blocks of four and part of a third per thread
    out = upload(queue, np.zeros((n, per), np.uint32))
    pk.exec(queue, _workdiv(device, n), draws, out, np.uint64(seed), n, per)
    got = download(queue, out)
    for t in range(n):
        np.testing.assert_array_equal(got[t], pk.rand.stream(seed, t, per), err_msg=f"subsequence {t}")


@pk.kernel
def ragged_draws(acc, out, seed, n_threads, per_thread):
    """Thread t draws t % (per_thread + 1) values: neighbouring lanes at every engine state (no
    block yet, the first block, a block computed ahead)."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(seed, t)
        for k in range(t % (per_thread + 1)):
            out[t, k] = acc.rand_u32(eng)


def test_ragged_draws_per_thread_are_the_stream(device, queue):
    n, per = 48, 13
    out = upload(queue, np.zeros((n, per), np.uint32))
    pk.exec(queue, _workdiv(device, n), ragged_draws, out, np.uint64(77), n, per)
    got = download(queue, out)
    for t in range(n):
        k = t % (per + 1)
        assert got[t, :k].tolist() == pk.rand.stream(77, t, k).tolist(), t
        assert not got[t, k:].any()


@pk.kernel
def draws_across_the_carry(acc, out, n_threads, per_thread):
    """Thread t's engine set two blocks before its counter's low word wraps (the engine's layout:
    portable/rand.py), then per_thread draws: the blocks ahead carry into the high word too."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(9, t)
        eng[0] = 0xFFFFFFFE
        for k in range(per_thread):
            out[t, k] = acc.rand_u32(eng)


def test_draws_carry_into_the_counters_high_word(device, queue):
    n, per = 8, 18
    out = upload(queue, np.zeros((n, per), np.uint32))
    pk.exec(queue, _workdiv(device, n), draws_across_the_carry, out, n, per)
    got = download(queue, out)
    for t in range(n):
        counters = np.array([[lo, hi, t, 0] for lo, hi in ((2**32 - 2, 0), (2**32 - 1, 0), (0, 1), (1, 1), (2, 1))])
        want = pk.rand.philox4x32_10(counters.astype(np.uint32), np.array([9, 0], np.uint32)).reshape(-1)
        assert got[t].tolist() == want[:per].tolist(), t


@pk.kernel
def mixed_draws(acc, out, kinds, seed, n_threads, n_draws):
    """Thread t draws per kinds[(k + t) % n_draws]: 0 a rand_u32, 1 a float64 uniform (two words),
    2 a float32 uniform: pairs that start at every word of a block, refills between their words."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(seed, t)
        for k in range(n_draws):
            kind = kinds[(k + t) % n_draws]
            if kind == 0:
                out[t, k] = np.float64(acc.rand_u32(eng))
            elif kind == 1:
                out[t, k] = acc.rand_uniform(eng, np.float64)
            else:
                out[t, k] = np.float64(acc.rand_uniform(eng, np.float32))


def _mixed_want(seed: int, t: int, kinds: list[int]) -> list[float]:
    words = pk.rand.stream(seed, t, 2 * len(kinds)).tolist()
    want, w = [], 0
    for k in range(len(kinds)):
        kind = kinds[(k + t) % len(kinds)]
        if kind == 1:
            want.append(((words[w] >> 5) * 67108864.0 + (words[w + 1] >> 6)) * 2.0**-53)
        else:
            want.append(float(words[w]) if kind == 0 else float(np.float32(words[w] >> 8) * np.float32(2.0**-24)))
        w += 2 if kind == 1 else 1
    return want


def test_mixed_draws_are_the_stream(device, queue):
    kinds = np.random.default_rng(1).integers(0, 3, 37)
    n = 24
    out = upload(queue, np.zeros((n, kinds.size), np.float64))
    pk.exec(queue, _workdiv(device, n), mixed_draws, out, upload(queue, kinds), np.uint64(5), n, kinds.size)
    got = download(queue, out)
    for t in range(n):
        assert got[t].tolist() == _mixed_want(5, t, kinds.tolist()), t


@pk.kernel
def jump_after_draws(acc, out, n_threads):
    """Five draws (a block computed ahead on the CPU backends), then the counter set to block 100
    and the rest of the block dropped by the engine's own words (portable/rand.py), four more."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(9, t)
        for k in range(5):
            out[t, k] = acc.rand_u32(eng)
        eng[0] = 100
        eng[1] = 0
        eng[10] = 4
        for k in range(4):
            out[t, 5 + k] = acc.rand_u32(eng)


def test_a_kernels_own_engine_words_decide_the_next_block(device, queue):
    n = 6
    out = upload(queue, np.zeros((n, 9), np.uint32))
    pk.exec(queue, _workdiv(device, n), jump_after_draws, out, n)
    got = download(queue, out)
    for t in range(n):
        block = pk.rand.philox4x32_10(np.array([100, 0, t, 0], np.uint32), np.array([9, 0], np.uint32))
        assert got[t].tolist() == pk.rand.stream(9, t, 5).tolist() + block.tolist(), t


@pk.kernel
def stores_mid_stream(acc, out, n_threads, how):
    """Five draws (on the CPU backends the second block is then computed ahead), a store to the
    engine's words, then seven draws: ``how`` 0 stores a key word's own value back (nothing
    changes), 1 adds 3 to the counter (a jump of three blocks)."""
    for t in acc.uniform_elements(n_threads):
        eng = acc.rand_engine(7, t)
        for k in range(5):
            out[t, k] = acc.rand_u32(eng)
        if how == 0:
            eng[4] = eng[4]
        else:
            eng[0] += 3
        for k in range(7):
            out[t, 5 + k] = acc.rand_u32(eng)


@pytest.mark.parametrize("how", [0, 1], ids=["same_key_word", "counter_plus_3"])
def test_a_store_mid_stream_gives_the_same_draws_on_every_backend(device, queue, how):
    """The counter names the block after the current one on every backend, the CPU backends'
    block computed ahead included: a store that changes nothing leaves the stream as it was,
    and a jump of the counter skips exactly as many blocks everywhere."""
    n = 5
    out = upload(queue, np.zeros((n, 12), np.uint32))
    pk.exec(queue, _workdiv(device, n), stores_mid_stream, out, n, how)
    got = download(queue, out)
    for t in range(n):
        stream = pk.rand.stream(7, t, 40).tolist()
        # draws 0-4, the rest of block 1 (5-7), then block 2 or, jumped, block 5 and on
        want = stream[:12] if how == 0 else stream[:8] + stream[20:24]
        assert got[t].tolist() == want, t


def test_uniform_and_normal_match_the_host(device, queue):
    n, per, seed = 24, 9, 77
    bufs = [upload(queue, np.zeros((n, per), dt)) for dt in (np.float32, np.float64, np.float32, np.float64)]
    pk.exec(queue, _workdiv(device, n), real_draws, *bufs, seed, n, per)
    u32, u64, n32, n64 = (download(queue, b) for b in bufs)
    for t in range(n):
        np.testing.assert_array_equal(u32[t], pk.rand.uniform(seed, t, per, np.float32))
        np.testing.assert_array_equal(u64[t], pk.rand.uniform(seed + 1, t, per, np.float64))
        # the device's log/cos may differ from numpy's in the last bits
        np.testing.assert_allclose(n32[t], pk.rand.normal(seed + 2, t, per, np.float32), rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(n64[t], pk.rand.normal(seed + 3, t, per, np.float64), rtol=1e-13, atol=1e-13)
    assert 0.0 <= u32.min() and u32.max() < 1.0 and 0.0 <= u64.min() and u64.max() < 1.0


def test_distributions_are_sane():
    u = pk.rand.uniform(3, 0, 200_000)
    z = pk.rand.normal(3, 1, 200_000, np.float32)
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01 and np.isfinite(z).all()
    bits = np.unpackbits(pk.rand.stream(9, 9, 4096).view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.01


def test_engine_errors_name_the_fix():
    """Front-end errors: the same on every backend (tests/kernels/test_kernel_errors.py), checked
    once, on cpu_serial."""
    queue = host_queue()

    @pk.kernel
    def not_an_engine(acc, out):
        out[0] = acc.rand_u32(out)

    @pk.kernel
    def float_seed(acc, out):
        eng = acc.rand_engine(1.5, 0)
        out[0] = acc.rand_u32(eng)

    @pk.kernel
    def engine_as_value(acc, out):
        out[0] = acc.rand_u32(acc.rand_engine(1, 0))

    @pk.kernel
    def int_dtype(acc, out):
        eng = acc.rand_engine(1, 0)
        out[0] = acc.rand_uniform(eng, np.int32)

    out = upload(queue, np.zeros(1, np.uint32))
    for k, text in [
        (not_an_engine, "random engine first"),
        (float_seed, "seed must be an integer"),
        (engine_as_value, "assign acc.rand_engine"),
        (int_dtype, "np.float32 or np.float64"),
    ]:
        with pytest.raises(KernelSyntaxError, match=text) as err:
            pk.exec(queue, pk.WorkDiv(1, 1, 1), k, out)
        assert raised_by_the_front_end(err)


# Known answers of the float64 uniform's recipe (docs: 27 bits of one draw, 26 of the next, on
# the grid of 2**-53), written out here from the words: (a >> 5) * 2**26 + (b >> 6), times 2**-53.
_F64_CASES = [
    (0x00000000, 0x00000000, 0.0),
    (0xFFFFFFFF, 0xFFFFFFFF, 1.0 - 2.0**-53),  # the largest value: below 1
    (0x80000000, 0x00000000, 0.5),
    (0x00000000, 0x00000040, 2.0**-53),  # the smallest step: bit 6 of the second word
    (0x0000001F, 0x0000003F, 0.0),  # the bits the recipe drops: 5 of the first word, 6 of the second
    (0x00000020, 0x00000000, 2.0**-27),  # bit 5 of the first word
    (0x00000000, 0xFFFFFFFF, (2.0**26 - 1) * 2.0**-53),
    (0xFFFFFFFF, 0x00000000, (2.0**27 - 1) * 2.0**-27),
    (0x12345678, 0x9ABCDEF0, (0x12345678 // 32 * 2**26 + 0x9ABCDEF0 // 64) / 2**53),
]


@pk.kernel
def uniform_of_words(acc, out, words, n):
    """acc.rand_uniform(eng, np.float64) of given draws: the engine's block (words 6-9) set to
    them, none of it used yet (word 10), so the conversion reads exactly those words."""
    for i in acc.uniform_elements(n):
        eng = acc.rand_engine(0, 0)
        eng[6] = words[i, 0]
        eng[7] = words[i, 1]
        eng[8] = words[i, 0]
        eng[9] = words[i, 1]
        eng[10] = 0
        out[i, 0] = acc.rand_uniform(eng, np.float64)
        out[i, 1] = acc.rand_uniform(eng, np.float64)  # the block's other two words


def test_float64_uniform_of_known_words(device, queue):
    words = np.array([(a, b) for a, b, _ in _F64_CASES], np.uint32)
    want = np.array([u for _, _, u in _F64_CASES])
    assert want[1] < 1.0 and want[1] == np.nextafter(1.0, 0.0)
    n = len(_F64_CASES)
    out = upload(queue, np.full((n, 2), -1.0))
    pk.exec(queue, _workdiv(device, n), uniform_of_words, out, upload(queue, words), n)
    got = download(queue, out)
    np.testing.assert_array_equal(got[:, 0], want)
    np.testing.assert_array_equal(got[:, 1], want)


def test_host_float64_uniform_is_the_recipe_on_the_stream():
    u = pk.rand.stream(5, 3, 2 * 64).reshape(64, 2).astype(np.int64)
    want = [float(((a >> 5) * 2**26 + (b >> 6)) / 2**53) for a, b in u.tolist()]  # exact: under 2**53
    assert pk.rand.uniform(5, 3, 64).tolist() == want


@pytest.mark.parametrize("name", ["draws", "ragged_draws", "uniform_of_words"])
def test_cuda_keeps_the_engine_in_registers(name):
    """NVRTC's PTX of drawing kernels has no thread-local memory: the engine's sixteen words are
    addressed by constant indices only (a run-time index would put it in local memory)."""
    from backends._c_build import CUPY_NVRTC_APPENDED, nvrtc_available, nvrtc_compile
    from backends._c_emit import emit

    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")

    def h(shape, dtype):
        return pk.Buffer(pk.host(), shape, dtype)

    kernel, args = {
        "draws": (draws, (h((8, 11), np.uint32), np.uint64(5), 8, 11)),
        "ragged_draws": (ragged_draws, (h((8, 11), np.uint32), np.uint64(5), 8, 11)),
        "uniform_of_words": (uniform_of_words, (h((8, 2), np.float64), h((8, 2), np.uint32), 8)),
    }[name]
    src = emit(kernel.ir(kernel.signature(args), 1, False), "cuda", unit_elements=True)
    ptx = nvrtc_compile(src, "compute_90", CUPY_NVRTC_APPENDED)
    assert f".entry {src.entry}" in ptx and ".local" not in ptx
