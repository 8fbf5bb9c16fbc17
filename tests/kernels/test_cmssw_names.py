"""Did-you-mean for the names of code ported from CMSSW and alpaka: alpakatools' loops under their
old and new names, alpaka's camelCase and CUDA spellings, CMSSW's free functions written on a
module: each message names the acc member that exists (checked against acc's members)."""

import re

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import host_queue, raised_by_the_front_end
from portable.compiler._expressions import ACC_MEMBERS
from portable.compiler._vocabulary import acc_member_suggestions


def _error(kernel) -> str:
    q = host_queue()
    with pytest.raises(pk.KernelSyntaxError) as err:
        pk.exec(q, pk.WorkDiv(1, 1, 1), kernel, np.zeros(4), 4)
    assert raised_by_the_front_end(err)
    return str(err.value)


@pk.kernel
def strided(acc, out, n):
    for i in acc.elements_with_stride(n):
        out[i] = 1.0


@pk.kernel
def blocks_strided(acc, out, n):
    for b in acc.blocks_with_stride(n):
        out[b] = 1.0


@pk.kernel
def in_block(acc, out, n):
    for i in acc.elements_in_block(0, n):
        out[i] = 1.0


@pk.kernel
def along_x(acc, out, n):
    for i in acc.uniform_elements_x(n):
        out[i] = 1.0


@pk.kernel
def free_function(acc, out, n):
    for i in pk.tools.uniform_elements(acc, n):
        out[i] = 1.0


@pk.kernel
def free_once(acc, out, n):
    if pk.tools.once_per_block(acc):
        out[0] = 1.0


@pk.kernel
def shared_var(acc, out, n):
    found = acc.declareSharedVar(np.int32)
    out[0] = found


@pytest.mark.parametrize(
    "kernel, text",
    [
        (strided, "acc has no member 'elements_with_stride'; did you mean acc.uniform_elements?"),
        (blocks_strided, "acc has no member 'blocks_with_stride'; did you mean acc.uniform_groups?"),
        (in_block, "acc has no member 'elements_in_block'; did you mean acc.uniform_group_elements?"),
        (along_x, "did you mean acc.uniform_elements? (in 2D/3D kernels the 1D loops take dim=d)"),
        (free_function, "tools.uniform_elements is no kernel function: CMSSW's uniform_elements(acc, ...) is "),
        (free_once, "is acc.once_per_block(...)"),
        (shared_var, "did you mean acc.shared_scalar or acc.shared_array?"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[:20],
)
def test_ported_names_suggest_the_acc_member(kernel, text):
    assert text in _error(kernel)


@pytest.mark.parametrize(
    "name, members",
    [
        ("elements_with_stride", ["uniform_elements"]),
        ("elements_with_stride_nd", ["uniform_elements_nd"]),
        ("blocks_with_stride", ["uniform_groups"]),
        ("elements_in_block", ["uniform_group_elements"]),
        ("for_each_element_in_block_strided", ["independent_group_elements"]),
        ("independent_group_elements_y", ["independent_group_elements"]),
        ("uniform_groups_along", ["uniform_groups"]),
        ("uniformElements", ["uniform_elements"]),  # alpaka's camelCase
        ("independentGroups", ["independent_groups"]),
        ("onceperblock", ["once_per_block"]),  # a close spelling
        ("declareSharedVar", ["shared_scalar", "shared_array"]),
        ("syncBlockThreadsPredicate", ["sync_block_threads_count", "sync_block_threads_and", "sync_block_threads_or"]),
        ("shflUp", ["warp_shfl_up"]),
        ("__float_as_uint", ["bit_cast"]),
    ],
)
def test_every_suggestion_is_an_acc_member(name, members):
    got = acc_member_suggestions(name)
    assert got == members
    assert set(got) <= set(ACC_MEMBERS)


@pk.kernel
def alpaka_vec_index(acc, out, n):
    i = acc.global_thread_idx[0]  # alpaka's getIdx<Grid, Threads>(acc)[0u]
    if i < n:
        out[i] = 1.0


@pk.kernel
def alpaka_vec_index_call(acc, out, n):
    if acc.block_idx()[0] < n:
        out[acc.block_idx] = 1.0


@pk.kernel
def vec_index_2d(acc, out, n):
    i = acc.block_idx[0] * acc.grid_blocks[1] + acc.block_idx[1]
    if i < n:
        out[i] = 1.0


def test_an_alpaka_vec_index_on_a_1d_query_names_the_int():
    """``acc.global_thread_idx[0]`` in a 1-D kernel said 'cannot index a int64 number'."""
    for kernel, query, written in (
        (alpaka_vec_index, "global_thread_idx", r"acc\.global_thread_idx\[0\]"),
        (alpaka_vec_index_call, "block_idx", r"acc\.block_idx\(\)\[0\]"),
    ):
        msg = _error(kernel)
        assert f"acc.{query} is an int in a 1-D kernel" in msg and f"write acc.{query}, not" in msg, msg
        assert re.search(written, msg), msg
    q = host_queue()  # a 2-D kernel's queries are tuples: [0] is theirs
    out = np.zeros(4)
    pk.exec(q, pk.WorkDiv((2, 2), (1, 1), (1, 1)), vec_index_2d, out, 4)
    q.wait()
    assert (out == 1.0).all()
