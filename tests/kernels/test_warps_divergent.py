"""Warp operations after divergent loops give exact answers (issue 32, item 3), and the member mask
the CUDA text passes to every ``*_sync`` operation is the warp's launched lanes.

The kernel (alpyka_testing/warp_cases.py) runs uneven grid-stride loops, then ballots, votes, a
broadcast shuffle and ``pk.tools.block_sum``, in blocks whose last warp is partial (48 and 100
threads). The mask itself is checked by compiling the generated helper with the host's C++
compiler for every block shape that matters: ``__activemask()`` would report only the lanes that
happen to run together, which no CPU run can show.
"""

import shutil
import subprocess

import pytest

from alpyka_testing import warp_cases
from backends._c_dialect import DIALECTS

# the rocm stand-in runs this file too (HIP's wavefront intrinsics, 64 lanes)
pytestmark = pytest.mark.hip_differs


@pytest.mark.parametrize("threads", [48, 100])
def test_warps_after_divergent_loops_are_exact(device, queue, threads):
    threads = 1 if device.kind == "cpu" else min(threads, device.limits.max_threads_per_block)
    got = warp_cases.run(queue, threads)
    assert got["passed"], got


_SHIM = """\
#include <stdio.h>
#define __device__
#define __forceinline__ inline
struct alpyka_u3 { unsigned int x, y, z; };
static alpyka_u3 threadIdx, blockDim;
static int warpSize;
"""

_MAIN = """\
int main(int argc, char** argv) {
    unsigned int dims[][3] = {{48, 1, 1}, {96, 1, 1}, {100, 1, 1}, {1000, 1, 1}, {1024, 1, 1},
                              {10, 5, 1}, {7, 3, 5}, {1, 1, 1}};
    for (int w = 32; w <= 64; w += 32) {
        warpSize = w;
        for (auto& d : dims) {
            blockDim = {d[0], d[1], d[2]};
            for (unsigned z = 0; z < d[2]; ++z) for (unsigned y = 0; y < d[1]; ++y)
                for (unsigned x = 0; x < d[0]; ++x) {
                    threadIdx = {x, y, z};
                    printf("%d %u %u %u %u %llx %x\\n", w, d[0] * d[1] * d[2], x + d[0] * (y + d[1] * z),
                           d[0], d[1], (unsigned long long)alpyka_warp_lanes(), ALPYKA_LANES);
                }
        }
    }
    return 0;
}
"""


def _launched_lanes(threads: int, t: int, w: int) -> int:
    left = threads - t // w * w
    return (1 << min(left, w)) - 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the generated helper")
@pytest.mark.parametrize("dialect", ["cuda", "hip"])
def test_sync_member_mask_is_the_warps_launched_lanes(tmp_path, dialect):
    src = tmp_path / "lanes.cpp"  # the kernel's whole prologue, as the GPU compiler gets it
    src.write_text(_SHIM + DIALECTS[dialect].prologue(warps=True) + _MAIN)
    exe = tmp_path / "lanes"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    rows = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    seen = 0
    for k in range(0, len(rows), 7):
        w, threads, t = int(rows[k]), int(rows[k + 1]), int(rows[k + 2])
        want = _launched_lanes(threads, t, w)
        assert int(rows[k + 5], 16) == want, (w, threads, t)
        assert int(rows[k + 6], 16) == want & 0xFFFFFFFF, (w, threads, t)  # what the CUDA calls pass
        seen += 1
    assert seen == 2 * (48 + 96 + 100 + 1000 + 1024 + 50 + 105 + 1)
    # a partial last warp of 48 - 32 = 16 lanes, of 100 - 96 = 4; full warps pass 0xffffffff
    assert _launched_lanes(48, 40, 32) == 0xFFFF and _launched_lanes(100, 99, 32) == 0xF
