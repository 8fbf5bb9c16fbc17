"""Long expressions compile on every backend: a 1000-term sum was a RecursionError in the
front-end, and a 300-term one a SyntaxError in numba's generated source (CPython nests at most 200
parentheses; clang, under PoCL, 256)."""

import functools
import importlib.util

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

TERMS = 400  # the RecursionError case; 1000 terms run in the device-function test below


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """One directory for the whole file: a kernel's generated code names its source file, so
    the backends that generate the same code (cpu_serial, cpu_threads) reuse one compile
    (about 25 s of CPU for the 400-term kernel) instead of compiling a copy from another path."""
    return tmp_path_factory.mktemp("long_kernels")


@functools.cache
def _kernels(tmp_path):
    """A module of kernels with long expressions, written as a user would (pytest's rewriting,
    which compiles an AST and has its own depth limit, never sees it)."""
    fsum = " + ".join(f"x[{k % 7}]" for k in range(TERMS))
    isum = " ".join(f"{'+' if k % 3 else '-'} n[{k % 5}]" for k in range(300)).lstrip("+ ")
    prod = " * ".join(f"y[{k % 3}]" for k in range(300))
    mixed = " + ".join(f"x[{k % 7}] * y[{k % 3}] - x[{(k + 1) % 7}] / y[{k % 3}]" for k in range(100))
    src = f"""import portable as pk


@pk.kernel
def long_expressions(acc, out, iout, x, y, n):
    if acc.once_per_grid():
        out[0] = {fsum}
        iout[0] = {isum}
        out[1] = {prod}
        out[2] = {mixed}
"""
    path = tmp_path / "long_kernels.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("long_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, (fsum, isum, prod, mixed)


@pytest.mark.slow  # numba types and compiles the 400-term kernel in about 25 s of CPU per CPU backend
def test_long_expressions_compile_and_compute(device, queue, kernel_dir):
    mod, exprs = _kernels(kernel_dir)
    x = np.arange(1.0, 8.0)
    y = np.array([2.0, 0.5, 1.0])
    n = np.array([2**62, 3, -5, 2**61, 7], np.int64)
    out, iout = upload(queue, np.zeros(3)), upload(queue, np.zeros(1, np.int64))
    pk.exec(
        queue,
        pk.make_workdiv(device, 1, 1),
        mod.long_expressions,
        out,
        iout,
        upload(queue, x),
        upload(queue, y),
        upload(queue, n),
    )
    with np.errstate(over="ignore"):  # the int64 sum wraps, as numpy's
        want_i = eval(exprs[1], {"n": n})
    want = [eval(e, {"x": x, "y": y}) for e in (exprs[0], exprs[2], exprs[3])]
    assert download(queue, iout).tolist() == [int(want_i)]
    np.testing.assert_array_equal(download(queue, out), want)  # same order of operations: same bits


@pytest.mark.parametrize("terms", [300, 1000])
def test_long_sum_in_a_device_function(device, queue, kernel_dir, terms):
    mod = _device_function_module(kernel_dir, terms)
    out = upload(queue, np.arange(4.0))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), mod.calls_weigh, out, 4)
    weight = sum(k % 4 for k in range(terms))
    np.testing.assert_array_equal(download(queue, out), np.arange(4.0) * weight)


@functools.cache
def _device_function_module(tmp_path, terms):
    body = " + ".join(f"a * {k % 4}" for k in range(terms))
    path = tmp_path / f"long_device_{terms}.py"
    path.write_text(f"""import portable as pk


@pk.device_function
def weigh(a):
    return {body}


@pk.kernel
def calls_weigh(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = weigh(out[i])
""")
    spec = importlib.util.spec_from_file_location(f"long_device_{terms}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
