"""The kernel-vocabulary tests on the OpenCL runtime the opencl backend does not pick by default.

The suite's opencl rows run on one runtime (Intel's CPU runtime where it is installed). PoCL, the
fallback, compiles the same OpenCL C with another compiler: a child pytest runs the warp,
predicate, random-number and pk.tools tests on it, so a construct one runtime miscompiles (PoCL 3
crashed on a barrier region asking a 1D kernel for get_local_id(1)) fails here too.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from alpyka_testing.backends.opencl_runtimes import missing_platform

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "tests/kernels/test_warps.py",
    "tests/kernels/test_tools.py",
    "tests/kernels/test_rand.py",
    "tests/kernels/test_pairs.py",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kernel_vocabulary_on_pocl():
    why = missing_platform("Portable Computing Language")
    if why is not None:
        pytest.skip(why)
    # without the NVRTC and HIP compiles of each kernel's twins: the suite's own opencl and cuda
    # rows of these files compile the same twins (tests/kernels/test_sanitizer.py's child too)
    checks = {"ALPYKA_CHECK_CUDA": "0", "ALPYKA_CHECK_HIP": "0"}
    env = dict(os.environ, ALPYKA_OPENCL_DEVICE="pocl", ALPYKA_EMULATE="off", **checks)
    env.pop("ALPYKA_BACKENDS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *FILES,
            "--backends=opencl",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--timeout=300",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    tail = done.stdout[-4000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"the kernel tests failed on PoCL ({done.returncode}):\n{tail}"
    passed = re.search(r"(\d+) passed", done.stdout)
    if passed is None or int(passed[1]) == 0:
        pytest.skip(f"PoCL did not pass the opencl backend's probe here:\n{tail[-1500:]}")
