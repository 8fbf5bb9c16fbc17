"""kernel -> model -> kernel with real @pk.kernel kernels on one non-blocking queue, one wait."""

from __future__ import annotations

import pytest

from alpyka_testing.inference import MLP, kernel_model_kernel


@pytest.mark.parametrize("n", [300, 2049])
def test_kernel_model_kernel(device, n):
    kernel_model_kernel(device, MLP(), n)
