"""What the numba emitter folds and renames to compile less (portable/compiler/_known_values.py,
portable/compiler/_definitions.py): a device function given a constant size (CMSSW's ``template
<int N>``) leaves no branch, no loop and no array behind it, no local assigned twice; and values
that flow around a loop, out of a ``break`` or out of a branch keep their meaning on every backend,
with the bits of the same Python code."""

from __future__ import annotations

import ast
import collections
import functools

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload


@pk.device_function
def band(acc, s, n):
    """``if n == 3``, ``h = n // 2`` and ``range(1, n - 1)`` reading ``s[i - 1]`` and, under
    ``if i > 1``, ``s[i - 2]``: all known once ``n`` is a constant."""
    if n == 3:
        return s[1] * s[2]
    h = n // 2
    total = 0.0
    for i in range(1, n - 1):
        total += s[i - 1] * s[i + 1] - s[i]
        if i > 1:
            total += s[i - 2]
    return total + s[h]


def band_reference(s: list[float]) -> float:
    n = len(s)
    if n == 3:
        return s[1] * s[2]
    total = 0.0
    for i in range(1, n - 1):
        total += s[i - 1] * s[i + 1] - s[i]
        if i > 1:
            total += s[i - 2]
    return total + s[n // 2]


@functools.cache
def known_size(size: int):
    """One kernel per size, as the Broken Line fit's one per hit count."""

    @pk.kernel
    def known(acc, xs, out, m):
        s = acc.local_array(size, np.float64)
        for k in acc.uniform_elements(m):
            for i in range(size):
                s[i] = xs[k, i]
            out[k] = band(acc, s, size)

    known.__name__ = known.__qualname__ = f"known_{size}"
    return known


def _launch_source(kernel, *args) -> str:
    from backends._numba_emit import emit_numba

    return emit_numba(kernel.ir(kernel.signature(args), 1, False), True).source.split("@_jit\ndef launch")[1]


def _assigned_twice(source: str) -> list[str]:
    tree = ast.parse("def launch" + source)
    names = collections.Counter(
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    )
    return sorted(name for name, count in names.items() if count > 1)


@pytest.mark.parametrize("size", [3, 4, 6])
def test_known_sizes_fold_away(device, queue, size):
    m = 37
    xs = np.random.default_rng(size).uniform(0.5, 2.0, (m, size))
    out = upload(queue, np.zeros(m))
    pk.exec(queue, pk.make_workdiv(device, 3, 8), known_size(size), upload(queue, xs), out, m)
    np.testing.assert_array_equal(download(queue, out), [band_reference(list(row)) for row in xs])
    if device.backend_name == "cpu_serial":
        src = _launch_source(known_size(size), xs, np.zeros(m), m)
        assert "np.empty" not in src and "\n        if " not in src and "range(1" not in src, src
        assert not [name for name in _assigned_twice(src) if name.startswith(("lv_", "v_", "i"))], src


@pk.kernel
def flows(acc, xs, out, m):
    """A value carried around a loop, one leaving it by a ``break``, one assigned in a branch."""
    for k in acc.uniform_elements(m):
        t = 0.0
        last = -1.0
        for i in range(4):
            if xs[k, i] > 1.8:
                last = t
                break
            t = t + xs[k, i]
            t = t * 0.5
        u = 0.0
        for i in range(4):
            u = xs[k, i]
            if u > 1.5:
                break
            u = u * 3.0
        w = xs[k, 0]
        if xs[k, 1] > 1.0:
            w = w * 2.0
        w = w + 1.0
        out[k, 0] = t
        out[k, 1] = last
        out[k, 2] = u
        out[k, 3] = w


def flows_reference(row: np.ndarray) -> list[float]:
    x = [float(v) for v in row]
    t, last = 0.0, -1.0
    for i in range(4):
        if x[i] > 1.8:
            last = t
            break
        t = (t + x[i]) * 0.5
    u = 0.0
    for i in range(4):
        u = x[i]
        if u > 1.5:
            break
        u = u * 3.0
    w = x[0] * 2.0 if x[1] > 1.0 else x[0]
    return [t, last, u, w + 1.0]


def test_values_keep_their_meaning(device, queue):
    m = 64
    xs = np.random.default_rng(5).uniform(0.0, 2.0, (m, 4))
    out = upload(queue, np.zeros((m, 4)))
    pk.exec(queue, pk.make_workdiv(device, 4, 8), flows, upload(queue, xs), out, m)
    want = np.array([flows_reference(row) for row in xs])
    np.testing.assert_array_equal(download(queue, out), want)
    assert (want[:, 1] >= 0).any() and (want[:, 1] < 0).any()  # both ways out of the first loop
