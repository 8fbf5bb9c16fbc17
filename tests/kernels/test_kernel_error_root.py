"""What a user's bad kernel code or a misused decorator meets is alpyka's error root, still the
builtin a caller may catch, with the fix in the message: the decorators and a kernel or device
function called like a Python function (``pk.ArgumentTypeError``, a TypeError), a kernel the
language refuses (``pk.KernelSyntaxError`` at the launch, on every backend), an atomic the GPU
backends have no instruction for (refused naming the backend)."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_root, raises_type
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError


@pk.device_function
def _down(n):
    if n > 0:
        return _down(n - 1)
    return n


@pk.device_function
def _twice(x):
    return 2 * x


@pk.kernel
def _recurses(acc, out, n):
    out[0] = _down(n)


@pk.kernel
def _too_few_arguments(acc, out, n):
    out[0] = _twice()


@pk.kernel
def _inverts_a_float(acc, out, x):
    out[0] = ~x


@pk.kernel
def _shifts_a_float(acc, out, x):
    out[0] = x << 1


@pk.kernel
def _popcount_of_a_float(acc, out, x):
    out[0] = acc.popcount(x)


#: kernel, its scalar argument, what the KernelSyntaxError says (the fix included)
REFUSED = [
    (_recurses, 3, r"device function '_down' calls itself: recursion is not allowed in kernels; write it as a loop"),
    (_too_few_arguments, 3, r"device function '_twice' takes 1 argument\(s\), got 0"),
    (_inverts_a_float, 1.5, r"operator ~ needs an integer operand, got float64; convert it first, e\.g\. ~int\(x\)"),
    (_shifts_a_float, 1.5, r"operator << needs integer operands, got float64 and int64; convert the float first"),
    (_popcount_of_a_float, 1.5, r"acc\.popcount\(x\) takes a 32- or 64-bit integer, got float64: convert it first"),
]


@pytest.mark.parametrize("kern,arg,text", REFUSED, ids=[k.__name__ for k, _, _ in REFUSED])
def test_a_kernel_the_language_refuses_names_the_fix_on_every_backend(device, queue, kern, arg, text):
    out = upload(queue, np.zeros(1))
    with raises_root(KernelSyntaxError, SyntaxError, text) as info:
        pk.exec(queue, pk.make_workdiv(device, 1, 1), kern, out, arg)
    assert info.value.filename.endswith("test_kernel_error_root.py") and info.value.lineno > 0


@pk.kernel
def _atomic_add_int8(acc, counts, n):
    for i in acc.uniform_elements(n):
        acc.atomic_add(counts, i % 2, 1)


def test_an_atomic_on_8_bit_integers_runs_on_the_host_and_is_refused_on_a_gpu(device, queue):
    """numba has 8-bit atomics; the GPU backends have none (CUDA, HIP and OpenCL atomics take 32
    and 64 bits): the launch is refused naming the backend and the array types that work."""
    counts = upload(queue, np.zeros(2, np.int8))
    work = pk.make_workdiv(device, 1, 16)
    if device.capabilities.c_dialect is None:  # numba
        pk.exec(queue, work, _atomic_add_int8, counts, 10)
        np.testing.assert_array_equal(download(queue, counts), [5, 5])
        return
    text = (
        r"atomic_add on int8 .*use an int32, int64, uint32, uint64, float32 or float64 array "
        rf"\(not supported by the {device.capabilities.c_dialect} backend\)"
    )
    with raises_root(KernelSyntaxError, SyntaxError, text):
        pk.exec(queue, work, _atomic_add_int8, counts, 10)


def test_a_kernel_or_device_function_called_like_a_function():
    with raises_type(r"kernel '_recurses' is launched with pk\.exec\(queue, workdiv, kernel, \*args\), not called"):
        _recurses(None, None, 1)
    with raises_type(r"device function '_twice' can only be called from inside a kernel; launch a @pk\.kernel"):
        _twice(1)
    assert _twice.__wrapped__(2) == 4  # the undecorated function, as the message says


def _plain(acc, out):
    out[0] = 1


def test_the_decorators_take_what_they_say():
    with raises_type(r"@pk\.kernel decorates a function, got int: put it above a def"):
        pk.kernel(3)
    with raises_type(r"@pk\.device_function decorates a function, got str: put it above a def"):
        pk.device_function("f")
    with raises_type(r"@pk\.kernel\(fast_math=\.\.\.\) takes True or False, got 1"):
        pk.kernel(fast_math=1)(_plain)
    with raises_type(r"min_shared takes a dict \{parameter: lambda block_threads: elements\}, got list"):
        pk.device_function(min_shared=[1])(_plain)
    with raises_type(r"min_shared names 'ws', which is not a parameter of '_plain' after acc \(out\)"):
        pk.device_function(min_shared={"ws": lambda n: n})(_plain)
    with raises_type(r"min_shared\['out'\] must be a function of block_threads, got 32: e\.g\. lambda n: n"):
        pk.device_function(min_shared={"out": 32})(_plain)
