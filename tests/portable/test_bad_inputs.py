"""The mistakes a new user makes with the public calls (a misspelt backend, a string for a device,
a dtype numpy does not know, a memcpy of two sizes) raise alpyka's own errors, which derive from
``pk.AlpykaError`` and from the builtin a caller may catch (``ValueError``, ``TypeError``), and
whose message names what the call takes."""

from __future__ import annotations

import numpy as np

import portable as pk
from alpyka_testing.errors import raises_root as _raises


@pk.kernel
def _scale(acc, out, x, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * x[i]


def test_backend_names():
    with _raises(pk.ArgumentError, ValueError, r"unknown backend 'cuad'; did you mean 'cuda'\?.*available_backends"):
        pk.device("cuad")
    with _raises(pk.ArgumentError, ValueError, r"pk\.devices\('cpu_serial'\)\[1\] is device 1"):
        pk.device("cpu_serial:1")
    with _raises(pk.ArgumentError, ValueError, r"unknown backend 'nope'; known backends are cpu_serial"):
        pk.devices("nope")
    with _raises(pk.ArgumentTypeError, TypeError, r"a backend is named by a str \(cpu_serial.*got int"):
        pk.device(3)


def test_devices_queues_and_events_are_objects_not_names():
    with _raises(pk.ArgumentTypeError, TypeError, r"Queue needs a pk\.Device \(from pk\.device\(\.\.\.\)\), got str"):
        pk.Queue("cpu_serial")
    with _raises(pk.ArgumentTypeError, TypeError, r"Event needs a pk\.Device"):
        pk.Event("cpu_serial")


def test_device_indices(device):
    """an index past the devices was a bare IndexError, a string one a TypeError from a comparison"""
    name = device.backend_name
    match = rf"backend '{name}' has \d+ device\(s\).*index 99 is out of range.*pk\.devices"
    with _raises(pk.NoSuchDevice, IndexError, match):
        pk.device(name, 99)
    with _raises(pk.NoSuchDevice, ValueError, r"index -1 is out of range"):
        pk.device(name, -1)
    for bad in ("0", 0.0, True, None):
        with _raises(pk.ArgumentTypeError, TypeError, r"pk\.device's index is an int"):
            pk.device(name, bad)
    assert pk.device(name, np.int64(0)) is pk.device(name)


def test_devices_list_index_past_the_end(device):
    """``pk.devices(name)[99]`` (DESIGN's ``pk.devices("cuda")[1]``) was list's bare IndexError
    "list index out of range"; it is still a list, and still an IndexError"""
    name = device.backend_name
    devs = pk.devices(name)
    with _raises(pk.NoSuchDevice, IndexError, rf"backend '{name}' has {len(devs)} device\(s\).*index 99 is out"):
        devs[99]
    assert isinstance(devs, list) and devs[0] is pk.device(name) and devs[-1] is devs[len(devs) - 1]
    assert devs[:1] == [devs[0]] and list(devs) == [pk.device(name, i) for i in range(len(devs))]
    assert type(devs)(devs) == devs and type(devs)() == []  # (as list(iterable), for generic code)
    with _raises(pk.NoSuchDevice, IndexError, rf"backend '{name}' has no device; index 0 is out"):
        type(devs)([], name)[0]


def test_queue_blocking_is_true_or_false(device):
    """``blocking="no"`` made a blocking queue, silently"""
    for bad in ("no", "False", 0, 1, None):
        with _raises(pk.ArgumentTypeError, TypeError, r"Queue blocking takes True or False, got"):
            pk.Queue(device, blocking=bad)
    assert pk.Queue(device, blocking=np.bool_(True)).blocking is True
    assert pk.Queue(device, blocking=False).blocking is False


def test_memcpy_of_a_strided_or_read_only_array_names_the_fix(device):
    """the messages said what was wrong, not what to do"""
    q = pk.Queue(device, blocking=True)
    buf = pk.Buffer(device, 10, np.float32)
    with _raises(pk.ArgumentError, ValueError, r"source: numpy array must be C-contiguous .*np\.ascontiguousarray"):
        pk.memcpy(q, buf, np.arange(20, dtype=np.float32)[::2])
    with _raises(pk.ArgumentError, ValueError, r"destination: numpy array must be C-contiguous .*arr\[\.\.\.\] = tmp"):
        pk.memcpy(q, np.empty(20, np.float32)[::2], buf)
    frozen = np.empty(10, np.float32)
    frozen.flags.writeable = False
    with _raises(pk.ArgumentError, ValueError, r"read-only; copy into a writable array \(arr\.copy\(\)\)"):
        pk.memcpy(q, frozen, buf)


def test_buffer_dtype_and_shape(device):
    with _raises(pk.ArgumentTypeError, TypeError, r"dtype 'flaot32' is not a numpy dtype; pass one such as np\."):
        pk.Buffer(device, 8, "flaot32")
    with _raises(pk.ArgumentTypeError, TypeError, r"holds Python objects; use a numeric dtype"):
        pk.Buffer(device, 8, object)
    with _raises(pk.ArgumentTypeError, TypeError, r"buffer shape is an int or a tuple of ints, got 2\.5"):
        pk.Buffer(device, 2.5, np.float32)
    with _raises(pk.ArgumentError, ValueError, r"non-negative integers, got -1"):
        pk.Buffer(device, -1, np.float32)


def test_memcpy_and_memset(device):
    q = pk.Queue(device)
    buf = pk.Buffer(device, 8, np.float32)
    for wrong in (np.zeros(4, np.float32), np.zeros(8, np.float64)):
        with _raises(pk.ArgumentError, ValueError, r"memcpy copies bytes, so both sides need the same number"):
            pk.memcpy(q, buf, wrong)
    with _raises(pk.ArgumentError, ValueError, r"memset value is a byte \(0\.\.255\), got 'a'.*by a kernel"):
        pk.memset(q, buf, "a")
    with _raises(pk.ArgumentTypeError, TypeError, r"memcpy needs a pk\.Queue first, got Device"):
        pk.memcpy(device, buf, np.zeros(8, np.float32))


def test_exec_takes_a_queue_and_a_kernel(device):
    q = pk.Queue(device)
    out, x = pk.Buffer(device, 8, np.float32), pk.Buffer(device, 8, np.float32)
    wd = pk.make_workdiv(device, 1, 8)
    with _raises(pk.ArgumentTypeError, TypeError, r"is not a kernel; decorate it with @pk\.kernel"):
        pk.exec(q, wd, lambda acc, out: None, out)
    with _raises(pk.ArgumentTypeError, TypeError, r"exec needs a pk\.Queue first, got Device"):
        pk.exec(device, wd, _scale, out, x, 2.0, 8)
    pk.memcpy(q, x, np.arange(8, dtype=np.float32))
    pk.exec(q, wd, _scale, out, x, 2.0, 8)  # the queue is still usable
    got = np.zeros(8, np.float32)
    pk.memcpy(q, got, out)
    q.wait()
    assert got.tolist() == [2.0 * i for i in range(8)]
