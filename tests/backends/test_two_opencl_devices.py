"""Two OpenCL devices of two runtimes in one process (Intel's CPU runtime and PoCL here): one
kernel launched on each by turns, each device with its own queues and buffers. A launch plan
holds a program and kernel built in one device's context, so everything that caches it (the
backend's plans per kernel, the fast launchers per queue, the work divisions checked per device)
must tell the devices apart: a plan used on the other device's queue fails there (an invalid
context) or reads the other device's memory."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk


@pk.kernel
def scale_add(acc, out, x, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i] + 1.0


def _two_runtimes() -> list:
    """One OpenCL device per runtime (platform), or a skip naming what is here."""
    by_platform: dict = {}
    for dev in pk.devices("opencl"):
        by_platform.setdefault(dev.properties.get("platform"), dev)
    if len(by_platform) < 2:
        pytest.skip(f"one OpenCL runtime only here: {list(by_platform)} (this test needs two, e.g. Intel's and PoCL)")
    return list(by_platform.values())[:2]


#: the plugin's matrix: the opencl row only, skipped (saying why) unless selected and available
pytestmark = pytest.mark.alpyka_backends("opencl")


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
def test_one_kernel_by_turns_on_two_runtimes_devices(backend, blocking):
    devs = _two_runtimes()
    assert devs[0].memory_space != devs[1].memory_space, [d.memory_space for d in devs]
    n = 1000
    wd = pk.WorkDiv(8, 128, 1)  # one work division object for both devices
    x = np.arange(n, dtype=np.float32)
    sides = []
    for dev in devs:
        q = pk.Queue(dev, blocking=blocking)
        xb, ob = pk.Buffer(dev, (n,), np.float32), pk.Buffer(dev, (n,), np.float32)
        pk.memcpy(q, xb, x)
        sides.append((dev, q, xb, ob))
    # by turns, more than twice each: the checked path, then each queue's fast launcher
    for step in range(6):
        for k, (dev, q, xb, ob) in enumerate(sides):
            a = np.float32(2 + k + step)  # another value each launch: arguments set again
            pk.exec(q, wd, scale_add, ob, xb, a, n)
            got = np.zeros(n, np.float32)
            pk.memcpy(q, got, ob)
            q.wait()
            np.testing.assert_array_equal(got, a * x + 1, err_msg=f"{dev}, launch {step}")
    # both queues in flight at once, then waited for
    for k, (_dev, q, xb, ob) in enumerate(sides):
        pk.exec(q, wd, scale_add, ob, xb, np.float32(10 + k), n)
    for k, (dev, q, _xb, ob) in enumerate(sides):
        got = np.zeros(n, np.float32)
        pk.memcpy(q, got, ob)
        q.wait()
        np.testing.assert_array_equal(got, np.float32(10 + k) * x + 1, err_msg=str(dev))


def test_a_buffer_of_one_runtime_is_refused_on_the_others_queue(backend):
    """The two devices' memories are not one memory space: a kernel argument on the other
    device is refused before anything is enqueued."""
    devs = _two_runtimes()
    n = 64
    q1 = pk.Queue(devs[1], blocking=True)
    xb0 = pk.Buffer(devs[0], (n,), np.float32)
    ob1 = pk.Buffer(devs[1], (n,), np.float32)
    with pytest.raises(pk.DeviceMismatch, match="copy it there first"):
        pk.exec(q1, pk.WorkDiv(1, 64, 1), scale_add, ob1, xb0, np.float32(1), n)
