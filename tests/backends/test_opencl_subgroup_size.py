"""The sub-group size OpenCL kernels require where the device lets them require one
(backends/_opencl_launch.py's ``pinned_subgroup_size``): kernels with warps 8 on a CPU whose native
vectors hold fewer than 16 floats (AVX2), 16 on an AVX-512 CPU and on GPUs, as the warp size the
device reports; kernels without warps 16 everywhere."""

from __future__ import annotations

import types

import numpy as np
import pyopencl as cl
import pytest

import portable as pk
from backends import _opencl_launch as ol
from backends._gpu_launch import plans_of

WARPS = "cl_khr_subgroup_shuffle cl_khr_subgroup_shuffle_relative cl_khr_subgroup_ballot"
PINS = f"{WARPS} cl_intel_required_subgroup_size"
CPU, GPU = int(cl.device_type.CPU), int(cl.device_type.GPU)


def fake(type_bits, width, extensions=PINS, **vendor):
    """A device as pyopencl shows it, with what the sub-group choice reads."""
    return types.SimpleNamespace(type=type_bits, native_vector_width_float=width, extensions=extensions, **vendor)


class Silent:
    """A runtime that answers no question about its vectors."""

    type, extensions = CPU, PINS

    @property
    def native_vector_width_float(self):
        raise cl.LogicError("clGetDeviceInfo", cl.status_code.INVALID_VALUE, "not answered")


@pytest.mark.parametrize(
    ("device", "size"),
    [
        (fake(CPU, 8), 8),  # AVX2 (Intel's CPU runtime on a Zen 3 says 8)
        (fake(CPU, 4), 8),  # SSE4.2: 8, the narrowest size the pin takes
        (fake(CPU, 16), 16),  # AVX-512
        (fake(GPU, 1), 16),  # an Intel GPU: vectors of one float, sub-groups of 16
        (fake(CPU | GPU, 8), 8),
        (fake(CPU, 0), 16),  # a width that says nothing
        (Silent(), 16),
    ],
)
def test_the_pinned_size_follows_the_cpus_vectors(device, size):
    assert ol.pinned_subgroup_size(device) == size
    assert ol.subgroup_size(device) == size  # the warp size limits and capabilities report
    assert ol.subgroup_options(device) == ["-DALPYKA_SUBGROUPS", f"-DALPYKA_SUBGROUP_SIZE={size}"]
    assert ol.subgroup_options(device, warps=False) == ["-DALPYKA_SUBGROUPS", "-DALPYKA_SUBGROUP_SIZE=16"]


def test_a_source_uses_warps_where_it_calls_a_sub_group_builtin():
    attribute = "#define K __attribute__((intel_reqd_sub_group_size(ALPYKA_SUBGROUP_SIZE))) __kernel\n"
    assert not ol.uses_warps(attribute + "K void f(__global int* x) { x[0] = 1; }")
    for call in ("get_max_sub_group_size()", "sub_group_shuffle_down(v, 1u)", "get_sub_group_local_id()"):
        assert ol.uses_warps(attribute + f"K void f(__global int* x) {{ x[0] = {call}; }}")


def test_devices_that_cannot_require_a_size_keep_their_own():
    nvidia = fake(GPU, 1, WARPS, warp_size_nv=32)
    assert ol.subgroup_size(nvidia) == 32 and ol.subgroup_options(nvidia) == ["-DALPYKA_SUBGROUPS"]
    no_warps = fake(CPU, 8, "cl_intel_required_subgroup_size")  # no shuffles: warps of one work-item
    assert ol.subgroup_size(no_warps) == 1 and ol.subgroup_options(no_warps) == []


@pk.kernel
def sizes(acc, out):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] = acc.warp_size


@pk.kernel
def ones(acc, out):
    for i in acc.uniform_elements(out.shape[0]):
        out[i] = 1


def _subgroup_size_of(dev, kernel) -> int:
    """The sub-group size the runtime gives ``kernel``'s plan on ``dev`` in groups of 64."""
    (plan,) = plans_of(dev, kernel).values()
    info = cl.kernel_sub_group_info.MAX_SUB_GROUP_SIZE_FOR_NDRANGE
    return int(plan.kernel.get_sub_group_info(dev.native.device, info, (64,)))


@pytest.mark.alpyka_backends("opencl")
def test_every_device_reports_the_size_its_kernels_see(device):
    for dev in pk.devices("opencl"):
        q = pk.Queue(dev)
        out = pk.Buffer(dev, 64, np.int64)
        pk.exec(q, pk.WorkDiv(1, 64, 1), sizes, out)
        pk.exec(q, pk.WorkDiv(1, 64, 1), ones, out)  # (a kernel without warps after it: no effect)
        got = np.empty(64, np.int64)
        pk.exec(q, pk.WorkDiv(1, 64, 1), sizes, out)
        pk.memcpy(q, got, out)
        q.wait()
        assert set(got.tolist()) == {dev.limits.warp_size} == {dev.capabilities.warp_size}, dev
        assert dev.limits.warp_size == ol.subgroup_size(dev.native.device), dev
        if "cl_intel_required_subgroup_size" in dev.native.device.extensions and ol.uses_subgroups(dev.native.device):
            assert _subgroup_size_of(dev, sizes) == dev.limits.warp_size, dev
            assert _subgroup_size_of(dev, ones) == ol.PINNED_SUBGROUP_SIZE, dev
