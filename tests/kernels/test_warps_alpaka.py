"""alpaka's own warp unit tests (activemask, all, any, ballot, shfl; alpyka_testing/alpaka_warp_cases.py)
give alpaka's answers on every backend: a block is one warp, part of the warp returns, the rest
votes or shuffles over the lanes still there (alpaka's warp functions act on the active threads).
The emulated cuda and rocm run them with the emulator's checks on: correct alpaka code is never a
check error there (issue 39, item 3)."""

import pytest

from alpyka_testing import alpaka_warp_cases

# the rocm stand-in runs this file too (HIP's wavefront intrinsics, 64 lanes)
pytestmark = pytest.mark.hip_differs


@pytest.mark.parametrize("case", list(alpaka_warp_cases.CASES))
def test_alpaka_warp_test_passes(queue, monkeypatch, case):
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "1")
    got = alpaka_warp_cases.run(queue, case)
    queue.wait()
    assert got["fails"] == 0, got


def test_explicit_member_masks_split_the_warp(queue, monkeypatch):
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "1")
    got, want = alpaka_warp_cases.run_masked_halves(queue)
    queue.wait()
    assert (got == want).all(), (got.tolist(), want.tolist())
