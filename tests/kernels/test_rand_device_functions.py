"""A random engine passed to device functions (alpaka's ``TEngine& engine``): by reference, its
draws there continue the caller's stream, bit for bit the draws made inline, on every backend;
through nested calls, with other per-thread arrays, in loops and both branches of an if; what stays
refused (returning, storing or aliasing an engine) and NVRTC keeping it in registers."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, host_queue, raised_by_the_front_end, upload
from portable.compiler import KernelSyntaxError


def _workdiv(device, n):
    return pk.make_workdiv(device, 4, 8) if device.kind == "gpu" else pk.WorkDiv(4, 1, (n + 3) // 4)


def _f32(word: int) -> float:
    return float(np.float32(word >> 8) * np.float32(2.0**-24))


def _f64(a: int, b: int) -> float:
    return ((a >> 5) * 67108864.0 + (b >> 6)) * 2.0**-53


@pk.device_function
def smear(acc, eng, x):
    return x + 0.1 * acc.rand_normal(eng, np.float64)


@pk.kernel
def smeared(acc, out, words, seed, n):
    """A normal drawn by ``smear``, then three words drawn by the kernel from the same engine."""
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        out[t] = smear(acc, eng, 91.19)
        for k in range(3):
            words[t, k] = acc.rand_u32(eng)


@pk.kernel
def smeared_inline(acc, out, words, seed, n):
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        out[t] = 91.19 + 0.1 * acc.rand_normal(eng, np.float64)
        for k in range(3):
            words[t, k] = acc.rand_u32(eng)


def test_draws_in_a_device_function_continue_the_kernels_stream(device, queue):
    n, seed = 24, 42
    got = []
    for k in (smeared, smeared_inline):
        out, words = upload(queue, np.zeros(n)), upload(queue, np.zeros((n, 3), np.uint32))
        pk.exec(queue, _workdiv(device, n), k, out, words, np.uint64(seed), n)
        got.append((download(queue, out), download(queue, words)))
    (out, words), (inline_out, inline_words) = got
    np.testing.assert_array_equal(out, inline_out)  # the same bits as drawing inline
    np.testing.assert_array_equal(words, inline_words)
    for t in range(n):
        assert words[t].tolist() == pk.rand.stream(seed, t, 7)[4:].tolist(), t  # the normal took 4 words
        np.testing.assert_allclose(out[t], 91.19 + 0.1 * pk.rand.normal(seed, t, 1)[0], rtol=1e-13)


@pk.device_function
def uniform_pair(acc, eng):
    return acc.rand_uniform(eng, np.float32), acc.rand_uniform(eng, np.float64)


@pk.device_function
def around(acc, eng, out, t):
    """Calls another device function with the engine, draws itself in between."""
    a, b = uniform_pair(acc, eng)
    out[t, 0] = a
    out[t, 1] = b
    out[t, 2] = np.float64(acc.rand_u32(eng))
    c, d = uniform_pair(acc, eng)
    out[t, 3] = c
    out[t, 4] = d


@pk.kernel
def nested_calls(acc, out, seed, n):
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        out[t, 5] = np.float64(acc.rand_u32(eng))
        around(acc, eng, out, t)
        out[t, 6] = acc.rand_uniform(eng, np.float32)


def test_a_device_function_passes_the_engine_on(device, queue):
    n, seed = 24, 5
    out = upload(queue, np.zeros((n, 7)))
    pk.exec(queue, _workdiv(device, n), nested_calls, out, np.uint64(seed), n)
    got = download(queue, out)
    for t in range(n):
        w = pk.rand.stream(seed, t, 9).tolist()
        want = [_f32(w[1]), _f64(w[2], w[3]), float(w[4]), _f32(w[5]), _f64(w[6], w[7]), float(w[0]), _f32(w[8])]
        assert got[t].tolist() == want, t


@pk.device_function
def fill(acc, eng, u, m):
    """Per-thread arrays beside the engine: u gets uniforms, m their running sums."""
    s = np.float32(0.0)
    for k in range(4):
        u[k] = acc.rand_uniform(eng, np.float32)
        s += u[k]
        m[k] = s


@pk.kernel
def with_local_arrays(acc, out, seed, n):
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        u = acc.local_array(4, np.float32)
        m = acc.local_array(4, np.float32)
        fill(acc, eng, u, m)
        for k in range(4):
            out[t, k] = u[k]
            out[t, 4 + k] = m[k]
        out[t, 8] = acc.rand_uniform(eng, np.float32)


def test_an_engine_beside_other_per_thread_arrays(device, queue):
    n, seed = 20, 8
    out = upload(queue, np.zeros((n, 9), np.float32))
    pk.exec(queue, _workdiv(device, n), with_local_arrays, out, np.uint64(seed), n)
    got = download(queue, out)
    for t in range(n):
        u = pk.rand.uniform(seed, t, 5, np.float32)
        np.testing.assert_array_equal(got[t, :4], u[:4])
        np.testing.assert_array_equal(got[t, 4:8], np.cumsum(u[:4], dtype=np.float32))
        assert got[t, 8] == u[4], t


@pk.device_function
def draw_kinds(acc, eng, out, kinds, t, count):
    """``count`` draws (a run-time count per thread), each by its kind: the lanes of a GPU warp
    take different branches and loop trips."""
    for k in range(count):
        kind = kinds[(k + t) % kinds.shape[0]]
        if kind == 0:
            out[t, k] = np.float64(acc.rand_u32(eng))
        elif kind == 1:
            out[t, k] = acc.rand_uniform(eng, np.float64)
        else:
            out[t, k] = np.float64(acc.rand_uniform(eng, np.float32))


@pk.kernel
def divergent_draws(acc, out, kinds, seed, n):
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        count = t % (out.shape[1] - 1)
        draw_kinds(acc, eng, out, kinds, t, count)
        out[t, count] = np.float64(acc.rand_u32(eng))  # the kernel's next draw after the call


def _divergent_want(seed: int, t: int, kinds: list[int], count: int) -> list[float]:
    words = pk.rand.stream(seed, t, 2 * count + 1).tolist()
    want, w = [], 0
    for k in range(count):
        kind = kinds[(k + t) % len(kinds)]
        if kind == 1:
            want.append(_f64(words[w], words[w + 1]))
        else:
            want.append(float(words[w]) if kind == 0 else _f32(words[w]))
        w += 2 if kind == 1 else 1
    return want + [float(words[w])]


def test_draws_in_a_loop_and_both_branches_of_an_if(device, queue):
    kinds = np.random.default_rng(2).integers(0, 3, 23)
    n, width, seed = 32, 14, 11
    out = upload(queue, np.zeros((n, width)))
    pk.exec(queue, _workdiv(device, n), divergent_draws, out, upload(queue, kinds), np.uint64(seed), n)
    got = download(queue, out)
    for t in range(n):
        count = t % (width - 1)
        assert got[t, : count + 1].tolist() == _divergent_want(seed, t, kinds.tolist(), count), t


@pk.device_function
def jump(eng, block):
    """Sets the engine's counter (portable/rand.py's layout): the next draw is the block's first."""
    eng[0] = block
    eng[1] = 0
    eng[10] = 4


@pk.device_function
def set_first(a, v):
    a[0] = v


@pk.kernel
def jump_in_a_device_function(acc, out, n):
    """Five draws (a block computed ahead on the CPU backends), the counter set to block 100 by a
    device function, four more: the block computed ahead is dropped, as for the kernel's own
    stores. ``set_first`` on a uint32[16] per-thread array is no engine: it sets one word only."""
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(9, t)
        for k in range(5):
            out[t, k] = acc.rand_u32(eng)
        jump(eng, 100)
        for k in range(4):
            out[t, 5 + k] = acc.rand_u32(eng)
        words = acc.local_array(16, np.uint32)
        set_first(words, 7)
        out[t, 9] = words[0] + words[11]


def test_a_device_functions_store_to_engine_words_drops_the_block_ahead(device, queue):
    n = 6
    out = upload(queue, np.zeros((n, 10), np.uint32))
    pk.exec(queue, _workdiv(device, n), jump_in_a_device_function, out, n)
    got = download(queue, out)
    for t in range(n):
        block = pk.rand.philox4x32_10(np.array([100, 0, t, 0], np.uint32), np.array([9, 0], np.uint32))
        assert got[t].tolist() == pk.rand.stream(9, t, 5).tolist() + block.tolist() + [7], t


@pk.device_function
def add_draw(acc, j, out, t, eng):
    out[t, j] = acc.rand_u32(eng)


@pk.device_function
def repeat(acc, m, fn, *args):
    for j in range(m):
        fn(acc, j, *args)


@pk.kernel
def passed_through_args_and_captured(acc, out, seed, n):
    """The engine in ``*args`` (pk.tools' style of passing a function and its arguments) and
    captured by a nested def: the same engine each time."""
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(seed, t)
        repeat(acc, 3, add_draw, out, t, eng)

        def more(acc, j):
            out[t, 3 + j] = acc.rand_u32(eng)

        repeat(acc, 2, more)


def test_an_engine_in_star_args_and_captured_by_a_nested_def(device, queue):
    n, seed = 12, 3
    out = upload(queue, np.zeros((n, 5), np.uint32))
    pk.exec(queue, _workdiv(device, n), passed_through_args_and_captured, out, np.uint64(seed), n)
    got = download(queue, out)
    for t in range(n):
        assert got[t].tolist() == pk.rand.stream(seed, t, 5).tolist(), t


def test_what_stays_refused_names_the_fix():
    """Front-end errors, the same on every backend: checked once, on cpu_serial."""
    queue = host_queue()

    @pk.device_function
    def give_back(acc, eng):
        return eng

    @pk.kernel
    def returns_an_engine(acc, out):
        eng = acc.rand_engine(1, 0)
        e = give_back(acc, eng)
        out[0] = acc.rand_u32(e)

    @pk.device_function
    def keep(out, eng):
        out[0] = eng

    @pk.kernel
    def stores_an_engine(acc, out):
        eng = acc.rand_engine(1, 0)
        keep(out, eng)

    @pk.kernel
    def aliases_an_engine(acc, out):
        eng = acc.rand_engine(1, 0)
        other = eng
        out[0] = acc.rand_u32(other)

    @pk.device_function
    def in_a_tuple(acc, eng):
        pair = (eng, 1)
        return acc.rand_u32(pair[0])

    @pk.kernel
    def tuples_an_engine(acc, out):
        eng = acc.rand_engine(1, 0)
        out[0] = in_a_tuple(acc, eng)

    @pk.device_function
    def makes_one(acc, seed):
        eng = acc.rand_engine(seed, 0)
        return acc.rand_u32(eng)

    @pk.kernel
    def engine_in_a_device_function(acc, out):
        out[0] = makes_one(acc, 1)

    @pk.device_function
    def draws_from(acc, words):
        return acc.rand_u32(words)

    @pk.kernel
    def words_are_no_engine(acc, out):
        words = acc.local_array(16, np.uint32)
        out[0] = draws_from(acc, words)

    out = upload(queue, np.zeros(1, np.uint32))
    for k, text in [
        (returns_an_engine, "random engine 'eng' \\(a parameter of device function 'give_back'\\), per-thread state"),
        (stores_an_engine, "expected a number here, got a random engine 'eng'"),
        (aliases_an_engine, "'other' = random engine 'eng': an engine is not assigned to another name"),
        (tuples_an_engine, "'pair' = random engine 'eng'"),
        (engine_in_a_device_function, "make the engine there and pass it"),
        (words_are_no_engine, "random engine first.*array parameter 'words'"),
    ]:
        with pytest.raises(KernelSyntaxError, match=text) as err:
            pk.exec(queue, pk.WorkDiv(1, 1, 1), k, out)
        assert raised_by_the_front_end(err)


@pk.device_function
def move_counter(eng, block):
    set_first(eng, block)  # the store is a function's further down


@pk.kernel
def counter_moved_two_calls_down(acc, out, n):
    """Five draws, the counter's low word set to 100 two calls down (the block's last three words
    are still drawn), seven more; ``set_first`` also on a per-thread uint32[16] array."""
    for t in acc.uniform_elements(n):
        eng = acc.rand_engine(9, t)
        words = acc.local_array(16, np.uint32)
        for k in range(5):
            out[t, k] = acc.rand_u32(eng)
        move_counter(eng, 100)
        set_first(words, 7)
        for k in range(7):
            out[t, 5 + k] = acc.rand_u32(eng)
        out[t, 12] = words[0] + words[11]


def test_a_store_to_engine_words_two_calls_down_drops_the_block_ahead(device, queue):
    """``set_first`` is specialised twice, for the engine and for the per-thread array: only the
    engine's store drops the block computed ahead (word 11 of the array stays 0)."""
    n = 6
    out = upload(queue, np.zeros((n, 13), np.uint32))
    pk.exec(queue, _workdiv(device, n), counter_moved_two_calls_down, out, n)
    got = download(queue, out)
    for t in range(n):
        block = pk.rand.philox4x32_10(np.array([100, 0, t, 0], np.uint32), np.array([9, 0], np.uint32))
        assert got[t].tolist() == pk.rand.stream(9, t, 8).tolist() + block.tolist() + [7], t


@pytest.mark.parametrize("name", ["divergent_draws", "nested_calls"])
def test_cuda_keeps_an_engine_passed_to_device_functions_in_registers(name):
    """NVRTC's PTX has no thread-local memory for an engine drawn from inside device functions:
    they are ``__forceinline__``, so its words stay addressed by constant indices."""
    from backends._c_build import CUPY_NVRTC_APPENDED, nvrtc_available, nvrtc_compile
    from backends._c_emit import emit

    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")

    def h(shape, dtype):
        return pk.Buffer(pk.host(), shape, dtype)

    kernel, args = {
        "divergent_draws": (divergent_draws, (h((8, 14), np.float64), h(23, np.int64), np.uint64(5), 8)),
        "nested_calls": (nested_calls, (h((8, 7), np.float64), np.uint64(5), 8)),
    }[name]
    src = emit(kernel.ir(kernel.signature(args), 1, False), "cuda", unit_elements=True)
    ptx = nvrtc_compile(src, "compute_90", CUPY_NVRTC_APPENDED)
    assert f".entry {src.entry}" in ptx and ".local" not in ptx
