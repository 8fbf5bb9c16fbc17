"""Ctrl-C while alpyka compiles a library (the GPU emulator's kernels on cuda/rocm, the native
OpenCL launch) stops the compiler and leaves nothing behind. ``subprocess.run`` SIGKILLed the
driver only: ``cc1plus`` ran on for seconds after the program had ended, and the driver's
temporary ``cc*.s`` stayed in ``$TMPDIR`` after every interrupted build (backends/_compiler_run.py)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

ROOT = Path(__file__).resolve().parents[2]
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")

CHILD = textwrap.dedent("""
    import ctypes, sys
    from backends._shared_libraries import Library, build_once, library_cache

    # ~10 s of -O2 work on a free core: still compiling when the Ctrl-C comes
    unit = "\\n".join(
        f"extern \\"C\\" double f{i}(double x) {{ double s = 0; for (int k = 0; k < {i % 7 + 3}; ++k) "
        f"s += __builtin_sin(x * k + {i}) / (k + 1.0); return s; }}"
        for i in range(3000)
    )
    lib = Library([sys.argv[1], "-O2", "-shared", "-fPIC", "-x", "c++"], unit, "heavy_unit.cpp",
                  "alpyka_heavy_unit.so", "a test library", ctypes.CDLL)
    print("compiling", flush=True)
    build_once(lib, library_cache("interrupt_test"))
    print("the compile ended before the Ctrl-C", flush=True)
""")


def _compilers_of(marker: str) -> list[int]:
    """Pids of live processes whose command line names ``marker`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++, g++, clang++)")
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc to find the compiler")
def test_ctrl_c_during_a_build_stops_the_compiler_and_leaves_no_files(tmp_path):
    tmpdir, cache = tmp_path / "tmp", tmp_path / "cache"
    tmpdir.mkdir()
    cache.mkdir(mode=0o700)
    script = tmp_path / "build_heavy.py"
    script.write_text(CHILD)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(tmpdir),
        "ALPYKA_CACHE_DIR": str(cache),
    }
    # 1.5 s after "compiling": the driver has started cc1plus, which writes the driver's cc*.s
    run = interrupt_child([sys.executable, str(script), CXX], env, ready="compiling", exit_wait_s=30)
    assert run.rc is not None, f"still running 30 s after Ctrl-C: {run.err[-3000:]}"
    assert run.said("the compile ended before the Ctrl-C") is None, "the compile was too quick to interrupt"
    assert "KeyboardInterrupt" in run.err, run.err[-3000:]
    deadline = time.monotonic() + 5  # the group's SIGTERM, then SIGKILL after 2 s: gone by now
    while _compilers_of("heavy_unit.cpp") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _compilers_of("heavy_unit.cpp"), "the compiler runs on after the program ended"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmpdir.rglob("*"))
    assert not left, f"the interrupted compile left {left} in $TMPDIR"
    built = cache / "interrupt_test"
    assert not [p for p in built.iterdir() if p.is_dir()], "a build directory was left in the cache"
