"""A non-ASCII name in a kernel or device function (a local, a parameter, the function's own) is
a KernelSyntaxError at its line on every backend (issue 38 item 11's "non-ASCII on every backend
or refused there too"): NVRTC refused the generated CUDA ("unrecognized token" for ``v_é``) while
the CPU backends, OpenCL and the emulator's C++ compiler took it."""

import os

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import upload
from portable.compiler import KernelSyntaxError


@pk.kernel
def local_name(acc, out):
    é = 2.0  # LINE:local
    out[acc.thread_idx] = é


@pk.kernel
def parameter_name(acc, out, größe):  # LINE:parameter
    out[acc.thread_idx] = größe


@pk.device_function
def plus_one(acc, zähler):  # LINE:device
    return zähler + 1.0


@pk.kernel
def calls_device(acc, out):
    out[acc.thread_idx] = plus_one(acc, 1.0)


@pk.device_function
def dévice(acc, x):
    return x + 1.0


@pk.kernel
def calls_non_ascii_device(acc, out):
    out[acc.thread_idx] = dévice(acc, 1.0)  # LINE:call


def _line(marker):
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# LINE:{marker}"))


@pytest.mark.parametrize(
    "kern, args, marker, name, what",
    [
        (local_name, (), "local", "é", "kernel 'local_name'"),
        (parameter_name, (2.0,), "parameter", "größe", "kernel 'parameter_name'"),
        (calls_device, (), "device", "zähler", "device function 'plus_one'"),
        (calls_non_ascii_device, (), "call", "dévice", "kernel 'calls_non_ascii_device'"),
    ],
    ids=["local", "parameter", "device-function-parameter", "device-function-name"],
)
def test_a_non_ascii_name_is_a_syntax_error_at_its_line(device, queue, kern, args, marker, name, what):
    out = upload(queue, np.zeros(4))
    with pytest.raises(KernelSyntaxError) as err:
        pk.exec(queue, pk.WorkDiv(1, 1, 1), kern, out, *args)
    msg = str(err.value)
    assert f"{os.path.basename(__file__)}:{_line(marker)}: {what}: the name {name!r} is not ASCII" in msg, msg
    assert err.value.lineno == _line(marker)
    queue.wait()
