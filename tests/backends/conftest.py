"""Fixtures shared by the tests of the backends' own machinery."""

import pytest

from backends.emulator import fake_cupy_kernels


@pytest.fixture
def checked(backend, monkeypatch):
    """The GPU emulator's checks on, for a backend the emulator runs as C++ here (the checks are
    the emulator's: another backend, or the emulator's OpenCL twins, skip with that reason)."""
    if backend not in fake_cupy_kernels.served_here():
        pytest.skip(f"{backend} is not emulated here (the checks are the emulator's)")
    if fake_cupy_kernels.executor_name() != "cpp":
        pytest.skip("the emulator runs OpenCL twins in this run (ALPYKA_EMULATE_EXEC=opencl)")
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "1")
