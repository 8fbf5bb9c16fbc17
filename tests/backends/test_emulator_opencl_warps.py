"""The GPU emulator's OpenCL twin executor (``ALPYKA_EMULATE_EXEC=opencl``) runs a kernel's warps
as wide as the emulated GPU's: 32 lanes on cuda, 64 on rocm, what ``acc.warp_size`` and the
device's limits say. Before, the twin ran them as the OpenCL CPU device's own sub-groups (8 or 16
lanes on Intel's runtime, one on PoCL) under a device that said 32, so a warp reduction summed
the wrong lanes; a device that cannot require a sub-group size refuses a kernel with warps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from backends import _opencl_launch
from backends.emulator import fake_cupy_kernels

pytest.importorskip("pyopencl")

ROOT = Path(__file__).resolve().parents[2]

#: a warp reduction (shuffles down within a warp of the size the device reports, the warps' sums
#: through shared memory) on each emulated backend; prints {backend: [what the kernel saw as
#: warp_size, the device's, block sums, the expected sums]}, or {backend: "error: ..."}
CHILD = """
import json
import numpy as np
import portable as pk


@pk.kernel
def warp_block_sum(acc, out, sizes, data, n, ws):
    # ws: the device's warp size, as host code sizing a warp reduction reads it (CMSSW's warpSize)
    partial = acc.shared_array(64, np.int64)
    t = acc.thread_idx
    b = acc.block_idx
    i = b * acc.block_threads + t
    v = data[i] if i < n else 0
    off = ws // 2
    while off > 0:
        v += acc.warp_shfl_down(v, off)
        off //= 2
    if t % ws == 0:
        partial[t // ws] = v
    acc.sync_block_threads()
    if t == 0:
        s = partial[0]
        for w in range(1, (acc.block_threads + ws - 1) // ws):
            s += partial[w]
        out[b] = s
        sizes[b] = acc.warp_size


said = {}
for name in ("cuda", "rocm"):
    dev = pk.device(name)
    q = pk.Queue(dev)
    n, threads = 1000, 192
    blocks = -(-n // threads)
    data = np.random.default_rng(7).integers(-1000, 1000, n)
    out, sizes, d = pk.Buffer(dev, blocks, np.int64), pk.Buffer(dev, blocks, np.int64), pk.Buffer(dev, n, np.int64)
    pk.memcpy(q, d, data)
    try:
        pk.exec(q, pk.WorkDiv(blocks, threads, 1), warp_block_sum, out, sizes, d, n, dev.limits.warp_size)
        got, ws = np.zeros(blocks, np.int64), np.zeros(blocks, np.int64)
        pk.memcpy(q, got, out)
        pk.memcpy(q, ws, sizes)
        q.wait()
    except pk.KernelBuildError as exc:
        said[name] = f"error: {exc}"
        continue
    want = [int(data[b * threads : (b + 1) * threads].sum()) for b in range(blocks)]
    said[name] = [sorted(set(ws.tolist())), dev.limits.warp_size, got.tolist(), want]
print(json.dumps(said))
"""


def test_a_warp_reduction_runs_the_emulated_gpus_warps(tmp_path):
    script = tmp_path / "warp_sum.py"  # (a kernel's source is read from its file)
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALPYKA_EMULATE")}
    env.update(
        ALPYKA_EMULATE="cuda,rocm",
        ALPYKA_EMULATE_EXEC="opencl",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    if "BackendUnavailable" in r.stderr or "no OpenCL CPU device" in r.stderr:
        pytest.skip(f"the twin executor cannot run here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    said = json.loads(r.stdout.strip().splitlines()[-1])
    for name, lanes in (("cuda", 32), ("rocm", 64)):
        got = said[name]
        if isinstance(got, str):  # a device that cannot require a sub-group size: refused, with the fix
            assert "cannot require that size" in got and "unset ALPYKA_EMULATE_EXEC" in got, got
            continue
        seen, reported, sums, want = got
        assert sums == want, name
        assert seen == [lanes] and reported == lanes, (name, seen, reported)


def _device(extensions: str) -> object:
    return types.SimpleNamespace(
        extensions=extensions,
        name="pthread-CPU",
        platform=types.SimpleNamespace(name="Portable Computing Language"),
    )


def test_a_device_that_cannot_require_the_size_refuses_a_kernel_with_warps():
    """Without ``cl_intel_required_subgroup_size`` (PoCL: no sub-groups at all, warps of one) a
    twin with warps is refused, naming the fix; one without warps builds as before."""
    plain = _device("cl_khr_fp64")
    intel = _device(
        " ".join([*_opencl_launch.SUBGROUP_EXTENSIONS, "cl_intel_required_subgroup_size"]),
    )
    assert not _opencl_launch.runs_warps_of(plain, 32) and _opencl_launch.runs_warps_of(plain, 1)
    assert _opencl_launch.runs_warps_of(intel, 32) and _opencl_launch.runs_warps_of(intel, 64)
    assert _opencl_launch.subgroup_options(intel, True, 32)[-1] == "-DALPYKA_SUBGROUP_SIZE=32"
    ocl = object.__new__(fake_cupy_kernels._OpenCL)
    ocl.context = types.SimpleNamespace(devices=[plain])
    twin = types.SimpleNamespace(text="... sub_group_shuffle_down(v, d) ...", entry="warp_block_sum")
    with pytest.raises(Exception, match=r"run 32 lanes wide .* cannot require that size .* unset ALPYKA_EMULATE_EXEC"):
        ocl.program(twin, 32)
