"""``if acc.requires_single_thread_per_block:`` (CMSSW's ``requires_single_thread_per_block_v``):
the CPU backends compile its body, OpenCL, CUDA and HIP its ``else``; only as an ``if``'s whole
condition. pk.rand chooses its engine's schedule by it (tests/kernels/test_rand.py: same bits)."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

SCALAR_BACKENDS = ("cpu_serial", "cpu_threads")  #: one thread a block, as scalar code


@pk.kernel
def which_branch(acc, out, n):
    for i in acc.uniform_elements(n):
        if acc.requires_single_thread_per_block:
            out[i] = 101
        else:
            out[i] = 202
        if acc.requires_single_thread_per_block:  # no else: nothing on lanes in lockstep
            out[i] += 303


def test_each_backend_compiles_its_branch(device, queue):
    n = 40
    out = upload(queue, np.zeros(n, np.int64))
    pk.exec(queue, pk.valid_workdiv(device, n), which_branch, out, n)
    want = 404 if device.backend_name in SCALAR_BACKENDS else 202
    assert download(queue, out).tolist() == [want] * n


@pk.kernel
def trait_as_a_value(acc, out):
    out[0] = 1 if acc.requires_single_thread_per_block else 0


@pk.kernel
def trait_in_a_condition(acc, out):
    if acc.requires_single_thread_per_block and out[0] > 0:
        out[0] = 1


@pytest.mark.parametrize("kernel", [trait_as_a_value, trait_in_a_condition], ids=["value", "and"])
def test_the_trait_elsewhere_is_refused_on_every_backend(queue, kernel):
    """Only the whole condition of an if: anywhere else one backend's value would be compiled into
    arithmetic, and the front end cannot say which."""
    with pytest.raises(pk.KernelSyntaxError, match=r"acc.requires_single_thread_per_block is the whole condition"):
        pk.exec(queue, pk.WorkDiv(1, 1, 1), kernel, upload(queue, np.zeros(1, np.int64)))


def test_the_emitters_write_one_branch():
    """The numba source has the body only, the C sources the else only (no run-time test)."""
    from backends._c_emit import emit
    from backends._numba_emit import emit_numba

    args = (pk.Buffer(pk.host(), 8, np.int64), 8)
    ir = which_branch.ir(which_branch.signature(args), 1, False)
    numba = emit_numba(ir, True).source.split("def launch")[1]
    assert "101" in numba and "202" not in numba and "303" in numba, numba
    for dialect in ("opencl", "cuda", "hip"):
        text = emit(ir, dialect).text
        assert "202" in text and "101" not in text and "303" not in text, text
